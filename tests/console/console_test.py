"""Drives the web console in headless Chromium (Debian's, through Playwright) against a real
node that `tests/tests/console.rs` started and filled: sign in, open a user, suppress a
memory, resolve a flagged conflict, filter the audit trail, open the cluster; each change is
read back from the page. Screenshots go to ``ENGRAM_CONSOLE_SHOTS``.

Environment (set by the Rust test):

- ``ENGRAM_URL``: the node; ``ENGRAM_CHROMIUM``: the browser binary.
- ``ENGRAM_CONSOLE_ADMIN_KEY``, ``..._GATEWAY_KEY``, ``..._OPERATOR_KEY``: the tenant's keys.
- ``ENGRAM_CONSOLE_USER``: the user to open; ``..._OTHER_USER``: another user listed;
  ``..._MEMORY``: the memory to suppress; ``..._HTML_MEMORY``: one whose text is HTML;
  ``..._FLAG``: the flag to resolve (``keep_new``) and ``..._FLAG_MEMORY`` the memory it
  held back; ``..._ENTITY``: an entity of the turns of the user's session ``..._SESSION``.

Besides the steps, it fails on any page error or console error (a Content-Security-Policy
violation is one), on a failed load of anything but the API (whose refusals the page shows)
and the browser's favicon, on any request to another origin, and on the key ever showing in
a URL, a cookie or localStorage. Exits non-zero with the reason; prints one line a step.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

TIMEOUT_MS = 20_000


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{name} is not set (tests/tests/console.rs sets it)")
    return value


BASE = env("ENGRAM_URL").rstrip("/")
ADMIN = env("ENGRAM_CONSOLE_ADMIN_KEY")
GATEWAY = env("ENGRAM_CONSOLE_GATEWAY_KEY")
OPERATOR = env("ENGRAM_CONSOLE_OPERATOR_KEY")
USER = env("ENGRAM_CONSOLE_USER")
OTHER_USER = env("ENGRAM_CONSOLE_OTHER_USER")
MEMORY = env("ENGRAM_CONSOLE_MEMORY")
HTML_MEMORY = env("ENGRAM_CONSOLE_HTML_MEMORY")
FLAG = env("ENGRAM_CONSOLE_FLAG")
FLAG_MEMORY = env("ENGRAM_CONSOLE_FLAG_MEMORY")
ENTITY = env("ENGRAM_CONSOLE_ENTITY")
SESSION = env("ENGRAM_CONSOLE_SESSION")
SHOTS = Path(env("ENGRAM_CONSOLE_SHOTS"))
CHROMIUM = env("ENGRAM_CHROMIUM")

started = time.monotonic()


def step(what: str) -> None:
    print(f"[{time.monotonic() - started:6.2f} s] {what}", flush=True)


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, key: str) -> None:
    page.fill("#key", key)
    page.click("#sign-in-button")


def no_key_anywhere(page: Page, keys: list[str]) -> None:
    stored = page.evaluate("() => JSON.stringify(Object.assign({}, localStorage))")
    cookies = page.context.cookies()
    for key in keys:
        assert key not in page.url, "a key in the URL"
        assert key not in stored, "a key in localStorage"
        assert all(key not in c["value"] for c in cookies), "a key in a cookie"
    assert not cookies, f"the console set cookies: {[c['name'] for c in cookies]}"


def main() -> None:
    problems: list[str] = []
    with sync_playwright() as p:
        # Containers often have a small /dev/shm; Chromium then writes those files to /tmp.
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--disable-dev-shm-usage"]
        )
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

        def console_message(message) -> None:  # type: ignore[no-untyped-def]
            # Failed loads are judged by their responses below; anything else is a problem
            # (a Content-Security-Policy violation is logged as "Refused to ...").
            if message.type == "error" and not message.text.startswith("Failed to load resource"):
                problems.append(f"console {message.type}: {message.text}")

        def failed(response) -> None:  # type: ignore[no-untyped-def]
            # API refusals are expected (the page shows them); the browser's own favicon
            # request gets 404. Any other failure (the page's own files) is a problem.
            path = response.url[len(BASE) :]
            if response.status >= 400 and not (
                path.startswith("/v1/") or path == "/favicon.ico"
            ):
                problems.append(f"{response.status} for {response.url}")

        page.on("console", console_message)
        page.on("response", failed)

        def outside(request) -> None:  # type: ignore[no-untyped-def]
            if not request.url.startswith(BASE + "/"):
                problems.append(f"a request outside the node: {request.url}")

        page.on("request", outside)

        step("open the console")
        page.goto(f"{BASE}/console")
        expect(page.locator("#sign-in")).to_be_visible()
        expect(page.locator("#view")).to_be_hidden()

        step("a gateway key is refused, with the API's code and message")
        sign_in(page, GATEWAY)
        expect(page.locator("#error .code")).to_have_text("403 forbidden")
        expect(page.locator("#error .message")).to_contain_text("admin key or an operator key")
        expect(page.locator("#sign-in")).to_be_visible()
        assert page.evaluate("() => sessionStorage.length") == 0, "a refused key is not kept"

        step("an unknown key is refused (401)")
        sign_in(page, "egk_0123456789abcdef_not-a-key")
        expect(page.locator("#error .code")).to_have_text("401 unauthenticated")

        step("sign in with the admin key: the tenant's users")
        page.fill("#key", ADMIN)
        shot(page, "sign-in")
        page.click("#sign-in-button")
        users = page.locator("#users tbody tr")
        expect(users.first).to_be_visible()
        listed = users.evaluate_all("rows => rows.map(r => r.dataset.user)")
        assert USER in listed and OTHER_USER in listed, listed
        assert listed == sorted(listed), f"users in id order: {listed}"
        expect(page.locator("#error")).to_be_hidden()
        no_key_anywhere(page, [ADMIN])
        assert page.evaluate("() => sessionStorage.getItem('engram.console.key')") == ADMIN
        shot(page, "users")

        step("open a user: sessions, memories, conflicts")
        page.click(f'#users tr[data-user="{USER}"] a')
        memory_row = page.locator(f'#memories-table tr[data-memory="{MEMORY}"]')
        expect(memory_row).to_be_visible()
        expect(memory_row.locator("td.status")).to_have_text("active")
        sessions = page.locator("#sessions-table tbody tr")
        expect(sessions.first).to_be_visible()
        first_session = sessions.first.locator("td")
        assert first_session.nth(1).inner_text().strip(), "a session has its title"
        assert int(first_session.nth(2).inner_text()) >= 2, "its message count"
        assert "UTC" in first_session.nth(4).inner_text(), "its last activity"
        flag_row = page.locator(f'#conflicts-table tr[data-flag="{FLAG}"]')
        expect(flag_row).to_be_visible()
        headers = page.locator("#memories-table thead th").all_inner_texts()
        for column in ["Kind", "Status", "Confidence", "Salience", "Personal data", "Entities"]:
            assert column in headers, headers
        expect(memory_row.locator(".tag", has_text=ENTITY)).to_be_visible()
        hostile = page.locator(f'#memories-table tr[data-memory="{HTML_MEMORY}"] td.text')
        expect(hostile).to_contain_text('<img src=x onerror="window.__xss=1"><b>this</b>')
        assert page.locator("#memories-table img, #memories-table b").count() == 0
        assert page.evaluate("() => window.__xss") is None, "memory text ran as script"
        page.click(f'#sessions-table tr[data-session="{SESSION}"] button')
        expect(page.locator("#turns-table .tag", has_text=ENTITY).first).to_be_visible()
        shot(page, "user")

        step("suppress a memory and see its status change")
        memory_row.locator("button.suppress").click()
        expect(memory_row.locator("td.status")).to_have_text("suppressed")
        expect(page.locator("#notice")).to_contain_text(f"{MEMORY} is now suppressed")
        expect(memory_row.locator("button.suppress")).to_have_count(0)

        step("resolve the conflict (keep new) and see it gone")
        flag_row.locator("button.keep_new").click()
        expect(page.locator("#no-conflicts")).to_be_visible()
        expect(page.locator("#notice")).to_contain_text(f"Conflict {FLAG} resolved")
        kept = page.locator(f'#memories-table tr[data-memory="{FLAG_MEMORY}"] td.status')
        expect(kept).to_have_text("active")
        shot(page, "user-after")

        step("the audit trail filtered by action shows the suppression")
        page.click("#nav-audit")
        expect(page.locator("#audit-form")).to_be_visible()
        page.fill("#audit-action", "memory.status")
        page.click("#audit-apply")
        rows = page.locator("#audit-table tbody tr")
        expect(rows.first).to_be_visible()
        actions = rows.evaluate_all("rows => rows.map(r => r.dataset.action)")
        assert actions and set(actions) == {"memory.status"}, actions
        ids = rows.locator("td:nth-child(5)").all_inner_texts()
        assert any(MEMORY in i for i in ids), ids
        outcomes = rows.locator("td.outcome").all_inner_texts()
        assert "200" in outcomes, outcomes
        shot(page, "audit")

        step("a tenant's admin key gets the API's refusal on the cluster view")
        page.click("#nav-cluster")
        expect(page.locator("#error .code")).to_have_text("403 forbidden")

        step("sign out: the key is gone from the tab")
        page.click("#sign-out")
        expect(page.locator("#sign-in")).to_be_visible()
        assert page.evaluate("() => sessionStorage.length") == 0

        step("sign in with the operator key: the cluster")
        sign_in(page, OPERATOR)
        expect(page.locator("#members-table tbody tr").first).to_be_visible()
        expect(page.locator("#nav-users")).to_be_hidden()
        member = page.locator("#members-table tbody tr").first.locator("td")
        expect(member.nth(3)).to_have_text("live")
        assert int(member.nth(5).inner_text()) > 0, "the node holds shards"
        expect(page.locator("#moving-table tbody tr")).to_have_count(3)
        expect(page.locator("#epochs-table tbody tr").first).to_be_visible()
        expect(page.locator("#pipeline-table")).to_contain_text("Pending entries")
        no_key_anywhere(page, [ADMIN, OPERATOR])
        shot(page, "cluster")

        step("a reload keeps the tab signed in, and an operator key sees the cluster only")
        page.goto(f"{BASE}/console#/users/{USER}")
        expect(page.locator("#members-table")).to_be_visible()
        expect(page.locator("#memories-table")).to_have_count(0)

        browser.close()
    if problems:
        sys.exit("the page reported problems:\n" + "\n".join(problems))
    step("done")


if __name__ == "__main__":
    main()
