//! The web console (`/console`) in headless Chromium against a real node: this test starts a
//! node, writes a tenant's data through the API (two users' turns, a memory, a flagged
//! contradiction), then runs `tests/console/console_test.py`, which drives Debian's
//! `chromium` through Playwright: a gateway and an unknown key refused with the API's code
//! and message, sign-in with the tenant's admin key, the users list, a user's sessions (title,
//! message count, last activity, a session's turns with their entities), memories (one
//! whose text is HTML with a script handler, shown as text) and conflicts, suppressing a memory and resolving the conflict (both read back from the page),
//! the audit trail filtered by action, sign-out, and the cluster view with an operator key.
//! The script fails on any page or console error (a Content-Security-Policy violation is
//! one), on any request outside the node, and on a key in a URL, a cookie or localStorage.
//! Afterwards this test checks through the API that the changes were made, by that key, and
//! audited.
//!
//! Screenshots go to the sandbox; with `ENGRAM_UPDATE_SCREENSHOTS=1` they are copied to
//! `docs/console/` as well (what docs/console.md shows).
//!
//! The interpreter is the project's virtual environment,
//! `${ENGRAM_CACHE:-~/.cache/engram}/venv/bin/python`, where `.ci/setup` installs
//! `playwright` (the Python package only: Playwright's browser download cannot work here), and
//! the browser is Debian's `chromium` (`ENGRAM_CHROMIUM` names another binary), which
//! `.ci/setup` installs too. A missing one fails the test, naming it and what `.ci/setup`
//! installs, on any machine, under CI or not: the test never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use engram_tests::harness::{Sandbox, checked_python, turn, workspace_root};
use serde_json::json;

/// How long the script may take (about 10 s on an idle machine).
const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);

/// The interpreter with Playwright, and the browser; otherwise why not.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("ENGRAM_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    if !chromium.is_file() {
        return Err(format!(
            "the browser {} does not exist (.ci/setup installs it with Debian's chromium)",
            chromium.display()
        ));
    }
    let python = checked_python("import playwright.sync_api", "playwright")?;
    Ok((python, chromium))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_signs_in_suppresses_a_memory_and_resolves_a_conflict_in_chromium() {
    let (python, chromium) =
        tools().unwrap_or_else(|why| panic!("the console test cannot run: {why}"));
    let started = Instant::now();
    let sandbox = Sandbox::new();
    let node = sandbox
        .node("console")
        .set("inference.enabled", false)
        .start()
        .await;
    eprintln!("node ready in {:?}", started.elapsed());
    let tenant = "acme";
    let (admin, admin_id) = node.must_make_key(tenant, "admin", "console-admin").await;
    let (gateway, _) = node
        .must_make_key(tenant, "gateway", "console-gateway")
        .await;
    let (operator, _) = node
        .must_make_key(tenant, "operator", "console-operator")
        .await;
    let api = node.client().with_key(&gateway);
    let as_admin = node.client().with_key(&admin);

    // Two users' conversations; alice's mention a table, an entity the page shows.
    let (user, other) = ("alice", "bob");
    for (i, (text, answer)) in [
        (
            "Show the orders of East China in October from dw_orders with amount over 1000",
            "Found 1,284 orders of East China in October (table dw_orders).",
        ),
        (
            "Now only those paid by card, from dw_orders",
            "412 of them were paid by card.",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        api.must_append_turn(user, &turn(&format!("a-{i}"), "s-orders", text, answer))
            .await;
    }
    api.must_append_turn(
        other,
        &turn("b-0", "s-1", "What were last week's sales?", "1.2 M."),
    )
    .await;
    // A memory to suppress, and one with personal data (an e-mail address: level low).
    let written = api
        .must_create_memory(
            user,
            &json!({"request_id": "m-weekly", "kind": "profile", "status": "active",
                    "text": "Prefers weekly granularity in sales reports from dw_orders"}),
        )
        .await;
    let memory = written["memory"]["memory_id"].as_str().unwrap().to_owned();
    api.must_create_memory(
        user,
        &json!({"request_id": "m-mail", "kind": "profile", "status": "active",
                "text": "Wants reports sent to alice.li@example.com"}),
    )
    .await;
    // Text that would run script if the page parsed it as HTML.
    let hostile = api
        .must_create_memory(
            user,
            &json!({"request_id": "m-html", "kind": "profile", "status": "candidate",
                    "text": "Titles like <img src=x onerror=\"window.__xss=1\"><b>this</b>"}),
        )
        .await;
    let hostile = hostile["memory"]["memory_id"].as_str().unwrap().to_owned();
    // A contradiction: a stated preference, then three choices of another value.
    api.must_append_turn(
        user,
        &turn("c-0", "s-charts", "I prefer bar charts", "Noted."),
    )
    .await;
    let mut flagged = false;
    for i in 0..3 {
        let mut body = turn(
            &format!("c-{}", i + 1),
            "s-charts",
            "show sales by region",
            "Here they are.",
        );
        body["choices"] = json!([{"topic": "chart_type", "value": "pie"}]);
        let ack = api.must_append_turn(user, &body).await;
        flagged |= ack["memories"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["action"] == "flagged");
    }
    assert!(
        flagged,
        "the third choice contradicting the preference is flagged"
    );
    let conflicts = as_admin
        .must_get(&format!("/v1/users/{user}/conflicts"))
        .await;
    let [conflict] = conflicts["conflicts"].as_array().unwrap().as_slice() else {
        panic!("one flagged conflict: {conflicts}");
    };
    let flag = conflict["flag_id"].as_str().unwrap().to_owned();
    let held_back = conflict["memory_id"].as_str().unwrap().to_owned();
    let contradicted = conflict["conflicts_with"].as_str().unwrap().to_owned();

    let shots = sandbox.path().join("screenshots");
    let root = workspace_root();
    let log_path = sandbox.path().join("console.log");
    let log = std::fs::File::create(&log_path).expect("script log file");
    let script = Instant::now();
    let mut child = Command::new(&python)
        .arg(root.join("tests/console/console_test.py"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("ENGRAM_URL", node.url())
        .env("ENGRAM_CHROMIUM", &chromium)
        .env("ENGRAM_CONSOLE_ADMIN_KEY", &admin)
        .env("ENGRAM_CONSOLE_GATEWAY_KEY", &gateway)
        .env("ENGRAM_CONSOLE_OPERATOR_KEY", &operator)
        .env("ENGRAM_CONSOLE_USER", user)
        .env("ENGRAM_CONSOLE_OTHER_USER", other)
        .env("ENGRAM_CONSOLE_MEMORY", &memory)
        .env("ENGRAM_CONSOLE_HTML_MEMORY", &hostile)
        .env("ENGRAM_CONSOLE_FLAG", &flag)
        .env("ENGRAM_CONSOLE_FLAG_MEMORY", &held_back)
        .env("ENGRAM_CONSOLE_ENTITY", "dw_orders")
        .env("ENGRAM_CONSOLE_SESSION", "s-orders")
        .env("ENGRAM_CONSOLE_SHOTS", &shots)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("script log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let status: ExitStatus = loop {
        if let Some(status) = child.try_wait().expect("waiting for the script") {
            break status;
        }
        if script.elapsed() > SCRIPT_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("the console script still ran after {SCRIPT_DEADLINE:?}; its output:\n{output}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let output = std::fs::read_to_string(&log_path).expect("script log");
    println!("{output}");
    eprintln!("the browser script took {:?}", script.elapsed());
    assert!(
        status.success(),
        "the console script failed ({status}):\n{output}"
    );
    assert!(output.contains("done"), "{output}");

    // What the page did, read back through the API: the memory suppressed, the conflict
    // settled by keeping the new memory, both by the admin key and audited.
    let memories = as_admin
        .must_get(&format!("/v1/users/{user}/memories"))
        .await;
    let status_of = |id: &str| -> String {
        memories["memories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["memory_id"] == id)
            .unwrap_or_else(|| panic!("no memory {id}: {memories}"))["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(status_of(&memory), "suppressed");
    assert_eq!(status_of(&held_back), "active");
    assert_eq!(status_of(&contradicted), "suppressed");
    let conflicts = as_admin
        .must_get(&format!("/v1/users/{user}/conflicts"))
        .await;
    assert_eq!(conflicts["conflicts"], json!([]), "{conflicts}");
    let named = [
        ("memory.status", format!("memory_id={memory}")),
        ("conflict.resolve", format!("flag_id={flag}")),
    ];
    for (action, id) in named {
        let trail = as_admin
            .must_get(&format!(
                "/v1/admin/audit?action={action}&principal={admin_id}&user={user}"
            ))
            .await;
        let entries = trail["entries"].as_array().unwrap();
        assert!(
            entries
                .iter()
                .any(|e| e["outcome"] == 200 && e["ids"].as_array().unwrap().contains(&json!(id))),
            "{action} of {id} by the admin key is audited: {trail}"
        );
    }

    // The screenshots, copied into the docs when asked.
    let names = ["sign-in", "users", "user", "user-after", "audit", "cluster"];
    for name in names {
        let shot = shots.join(format!("{name}.png"));
        let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
        assert!(bytes.starts_with(b"\x89PNG"), "{} is a PNG", shot.display());
    }
    if std::env::var("ENGRAM_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        copy_screenshots(&shots, &root.join("docs/console"), &names);
    }
    eprintln!("the console test took {:?}", started.elapsed());
}

/// Copies the screenshots `names` from `from` to `to`.
fn copy_screenshots(from: &Path, to: &Path, names: &[&str]) {
    std::fs::create_dir_all(to).expect("docs/console");
    for name in names {
        let file = format!("{name}.png");
        std::fs::copy(from.join(&file), to.join(&file))
            .unwrap_or_else(|e| panic!("copying {file}: {e}"));
    }
    eprintln!("screenshots copied to {}", to.display());
}
