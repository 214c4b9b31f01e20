"""`engram-node mcp` driven by the official MCP client (the `mcp` package) against a real node.

``tests/tests/mcp.rs`` starts the node, makes the keys and runs this script with:

- ``ENGRAM_NODE_BIN``: the ``engram-node`` binary (it serves MCP with ``mcp``);
- ``ENGRAM_URL``: the node; ``ENGRAM_GATEWAY_KEY`` and ``ENGRAM_ADMIN_KEY``: a tenant's keys;
- ``ENGRAM_MCP_LOGS``: a directory for the MCP servers' stderr.

Over stdio it lists the tools and calls every one, checking what the node did (a turn shows in
the context, a retried turn is written once, a written memory is found, listed, suppressed, a
forgotten user has nothing left), the API's errors as tool errors, a wrong key, an unreachable
node, and that the server's log holds no text and no key. Over streamable HTTP it checks that a
request without a key or with a wrong one is refused, and that each client acts with its own
key. The checks run in order and stop at the first failure; the exit status says how it went.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

T = TypeVar("T")

NODE_BIN = os.environ["ENGRAM_NODE_BIN"]
URL = os.environ["ENGRAM_URL"]
GATEWAY = os.environ["ENGRAM_GATEWAY_KEY"]
ADMIN = os.environ["ENGRAM_ADMIN_KEY"]
LOGS = Path(os.environ["ENGRAM_MCP_LOGS"])

TOOLS = {
    "add_turn",
    "get_context",
    "search_memories",
    "write_memory",
    "list_memories",
    "set_memory_status",
    "feedback",
    "list_sessions",
    "recall_intent",
    "forget_user",
}
READ_ONLY = {"get_context", "search_memories", "list_memories", "list_sessions", "recall_intent"}

USER_TEXT = "Show the orders of East China in October from dw_orders with amount over 1000"
ANSWER = "Found 1,284 orders of East China in October with amount over 1000 (table dw_orders)."
MEMORY = "Prefers bar charts for monthly sales reports"

# How long a condition may take to hold, and how long the HTTP server may take to say where it
# listens (a debug build on a busy 2-core machine).
DEADLINE = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def eventually(what: str, check: Callable[[], Awaitable[T | None]]) -> T:
    """Polls ``check`` until it returns something truthy: a condition, never a fixed sleep."""
    deadline = time.monotonic() + DEADLINE
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {DEADLINE} s")
        await asyncio.sleep(0.05)


def structured(result: Any) -> dict[str, Any]:
    """The result's structured content, checked against its text content (the same JSON)."""
    assert result.structured_content is not None, f"no structured content: {result}"
    assert result.content and result.content[0].type == "text", f"no text content: {result}"
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def ok(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, args)
    assert not result.is_error, f"{tool} failed: {result.content}"
    return structured(result)


async def refused(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    """A call the node refuses: an error result (never a protocol error) with the API's code."""
    result = await session.call_tool(tool, args)
    assert result.is_error, f"{tool} succeeded where it should fail: {result.content}"
    error = structured(result)
    assert error["code"] and error["message"], error
    return error


@asynccontextmanager
async def stdio_session(key: str, log: str, url: str = URL) -> AsyncIterator[ClientSession]:
    """An MCP session with ``engram-node mcp`` over stdio, acting with ``key``; its stderr
    goes to ``LOGS/log``."""
    params = StdioServerParameters(
        command=NODE_BIN,
        args=["mcp", "--transport", "stdio", "--url", url],
        env={"ENGRAM_API_KEY": key},
    )
    with open(LOGS / log, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def http_session(url: str, key: str) -> AsyncIterator[ClientSession]:
    """An MCP session over streamable HTTP, sending ``key`` as a bearer on every request."""
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


# ---------------------------------------------------------------------------------------------
# stdio


async def tools_are_listed_with_schemas(gw: ClientSession) -> None:
    listed = {t.name: t for t in (await gw.list_tools()).tools}
    assert set(listed) == TOOLS, sorted(listed)
    for name, tool in listed.items():
        schema = tool.input_schema
        assert tool.description and len(tool.description) > 60, name
        assert schema["type"] == "object", (name, schema)
        assert "user" in schema["required"], (name, schema)
        assert schema.get("additionalProperties") is False, (name, schema)
        assert tool.annotations is not None, name
        assert tool.annotations.read_only_hint is (name in READ_ONLY), name
    add_turn = listed["add_turn"].input_schema
    assert set(add_turn["required"]) == {"user", "user_text"}, add_turn
    for field in ("session_id", "assistant_text", "request_id", "route", "success"):
        assert field in add_turn["properties"], field
    assert "request_id" in listed["add_turn"].description
    kinds = json.dumps(listed["write_memory"].input_schema)
    assert all(k in kinds for k in ("profile", "episodic", "correction")), kinds
    forget = listed["forget_user"]
    assert forget.annotations.destructive_hint is True
    assert "DESTRUCTIVE" in forget.description and "admin" in forget.description


async def a_turn_shows_in_the_context_and_a_retry_is_written_once(
    gw: ClientSession, user: str
) -> None:
    args = dict(
        user=user,
        session_id="s1",
        user_text=USER_TEXT,
        assistant_text=ANSWER,
        route="nl2sql_query",
        request_id=unique("turn"),
    )
    first = await ok(gw, "add_turn", **args)
    assert first["written"] and first["seq"] == 0 and not first["replayed"], first
    again = await ok(gw, "add_turn", **args)
    assert again["replayed"] and again["seq"] == first["seq"], again
    context = await ok(
        gw, "get_context", user=user, session_id="s1", query="what about their total amount?"
    )
    turns = [t for t in context["recent_turns"] if t["user"] == USER_TEXT]
    assert len(turns) == 1, context["recent_turns"]
    assert turns[0]["assistant"] == ANSWER
    assert "dw_orders" in context["text"], context["text"]
    sessions = (await ok(gw, "list_sessions", user=user))["sessions"]
    assert [(s["session_id"], s["turn_count"]) for s in sessions] == [("s1", 1)], sessions
    feedback = await ok(gw, "feedback", user=user, session_id="s1", turn_seq=0, rating="like")
    assert feedback["replayed"] is False, feedback


async def a_written_memory_is_found_listed_and_suppressed(gw: ClientSession, user: str) -> None:
    request_id = unique("memory")
    written = await ok(
        gw,
        "write_memory",
        user=user,
        kind="profile",
        text=MEMORY,
        status="active",
        request_id=request_id,
        source_agent="mcp-test",
    )
    memory_id = written["memory"]["memory_id"]
    assert written["memory"]["status"] == "active" and not written["replayed"], written
    again = await ok(
        gw, "write_memory", user=user, kind="profile", text=MEMORY, status="active",
        request_id=request_id, source_agent="mcp-test",
    )
    assert again["replayed"] and again["memory"]["memory_id"] == memory_id, again

    async def found() -> list[dict[str, Any]] | None:
        hits = (await ok(gw, "search_memories", user=user, query="bar charts", limit=5))["hits"]
        return [h for h in hits if h["memory"]["memory_id"] == memory_id] or None

    await eventually("the search finds the written memory", found)

    async def listed(**filters: Any) -> list[str]:
        memories = (await ok(gw, "list_memories", user=user, **filters))["memories"]
        return [m["memory_id"] for m in memories]

    assert memory_id in await listed(kind="profile")
    assert memory_id not in await listed(kind="episodic")
    assert memory_id in await listed(status="active")
    changed = await ok(gw, "set_memory_status", user=user, memory_id=memory_id, status="suppressed")
    assert changed["memory"]["status"] == "suppressed", changed
    assert memory_id not in await listed(status="active")
    assert memory_id in await listed(status="suppressed")


async def an_intent_is_recalled(gw: ClientSession, user: str) -> None:
    recalled = await ok(gw, "recall_intent", user=user, intent_type="appointment")
    assert recalled["intent_type"] == "appointment" and recalled["target_value"] is None, recalled


async def bad_arguments_are_tool_errors_with_the_apis_code(gw: ClientSession, user: str) -> None:
    error = await refused(gw, "add_turn", user=user, user_text="hello", route="no_such_route")
    assert (error["status"], error["code"]) == (400, "invalid_input"), error
    assert "route" in error["message"], error
    error = await refused(gw, "list_sessions", user="not a user id!")
    assert (error["status"], error["code"]) == (400, "invalid_input"), error
    error = await refused(gw, "set_memory_status", user=user, memory_id="m-none", status="active")
    assert (error["status"], error["code"]) == (404, "not_found"), error
    # A gateway key may not forget: the node's 403 comes back as the tool's error.
    error = await refused(gw, "forget_user", user=user)
    assert (error["status"], error["code"]) == (403, "forbidden"), error
    # Arguments outside a tool's schema are refused by the server itself, in the same shape.
    error = await refused(gw, "write_memory", user=user, kind="bogus", text="x")
    assert error["code"] == "invalid_input" and "status" not in error, error
    assert "kind" in error["message"] or "variant" in error["message"], error
    error = await refused(gw, "get_context", user=user, sesion_id="s1")
    assert error["code"] == "invalid_input" and "sesion_id" in error["message"], error
    assert (await ok(gw, "list_sessions", user=user))["sessions"]


async def a_forgotten_user_has_nothing_left(gw: ClientSession, user: str) -> None:
    async with stdio_session(ADMIN, "stdio-admin.log") as admin:
        forgotten = await ok(admin, "forget_user", user=user)
        assert forgotten, forgotten
    assert (await ok(gw, "list_memories", user=user))["memories"] == []
    assert (await ok(gw, "list_sessions", user=user))["sessions"] == []
    context = await ok(gw, "get_context", user=user, session_id="s1", query="orders")
    assert context["recent_turns"] == [], context


async def a_wrong_key_and_an_unreachable_node_are_tool_errors() -> None:
    async with stdio_session("egk_0000000000000000_wrong", "stdio-wrong-key.log") as wrong:
        error = await refused(wrong, "list_sessions", user="anyone")
        assert (error["status"], error["code"]) == (401, "unauthenticated"), error
    # Port 1 on loopback: nothing listens there.
    async with stdio_session(GATEWAY, "stdio-unreachable.log", url="http://127.0.0.1:1") as lost:
        for _ in range(2):  # the server answers again after a failed call
            error = await refused(lost, "list_sessions", user="anyone")
            assert error["code"] == "unavailable" and "status" not in error, error


def the_logs_hold_no_text_and_no_key() -> None:
    log = (LOGS / "stdio-gateway.log").read_text(encoding="utf-8")
    assert "tool call" in log, "the server logged no tool call: is logging on?"
    secret = GATEWAY.rsplit("_", 1)[-1]
    for needle in (USER_TEXT, ANSWER, MEMORY, "bar charts", secret):
        assert needle not in log, f"the MCP server's log holds {needle[:12]!r}..."


# ---------------------------------------------------------------------------------------------
# streamable HTTP


class HttpServer:
    """``engram-node mcp --transport http`` on a free port; its stderr is kept in a file."""

    def __init__(self) -> None:
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            NODE_BIN, "mcp", "--transport", "http", "--listen", "127.0.0.1:0", "--url", URL,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "")},
        )
        log = open(LOGS / "http.log", "w", encoding="utf-8")
        assert self.process.stderr is not None
        stderr = self.process.stderr

        async def listening() -> str:
            while True:
                line = (await stderr.readline()).decode()
                if not line:
                    raise AssertionError("engram-node mcp exited before it listened")
                log.write(line)
                found = re.search(r"listening on (http://\S+)", line)
                if found:
                    return found.group(1)

        self.url = await asyncio.wait_for(listening(), DEADLINE)

        async def drain() -> None:
            while line := await stderr.readline():
                log.write(line.decode())
            log.close()

        self.drain = asyncio.create_task(drain())

    async def stop(self) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), DEADLINE)
        if self.drain is not None:
            await self.drain
        return code


async def the_endpoint_refuses_a_missing_or_wrong_key(url: str) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "engram-mcp-test", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=DEADLINE) as client:
        for auth in ({}, {"Authorization": "Bearer egk_0000000000000000_wrong"}, {"Authorization": "Basic eDp5"}):
            answer = await client.post(url, json=initialize, headers=headers | auth)
            assert answer.status_code == 401, (auth, answer.status_code, answer.text)
            assert answer.json()["code"] == "unauthenticated", answer.text
            assert answer.headers["www-authenticate"].startswith("Bearer"), answer.headers
    # The official client with a wrong key gets no session either.
    try:
        async with asyncio.timeout(DEADLINE):
            async with http_session(url, "egk_0000000000000000_wrong") as session:
                await session.list_tools()
    except TimeoutError:
        raise AssertionError("a client with a wrong key hung instead of being refused") from None
    except Exception:  # noqa: BLE001 - refused, whichever way the client reports it
        pass
    else:
        raise AssertionError("a client with a wrong key got a session")


async def each_http_client_acts_with_its_own_key(url: str) -> None:
    user = unique("mcp-http")
    async with http_session(url, GATEWAY) as gw:
        assert {t.name for t in (await gw.list_tools()).tools} == TOOLS
        turn = await ok(gw, "add_turn", user=user, session_id="h1", user_text=USER_TEXT, assistant_text=ANSWER)
        assert turn["written"] and turn["seq"] == 0, turn
        context = await ok(gw, "get_context", user=user, session_id="h1", query="total amount")
        assert [t["user"] for t in context["recent_turns"]] == [USER_TEXT], context
        error = await refused(gw, "forget_user", user=user)
        assert (error["status"], error["code"]) == (403, "forbidden"), error
    async with http_session(url, ADMIN) as admin:
        await ok(admin, "forget_user", user=user)
        assert (await ok(admin, "list_sessions", user=user))["sessions"] == []


# ---------------------------------------------------------------------------------------------


async def main() -> int:
    checks = 0

    async def check(name: str, step: Awaitable[None]) -> None:
        nonlocal checks
        started = time.monotonic()
        await step
        checks += 1
        print(f"ok   {name} ({time.monotonic() - started:.2f} s)", flush=True)

    try:
        user = unique("mcp-stdio")
        async with stdio_session(GATEWAY, "stdio-gateway.log") as gw:
            await check("stdio: the tools are listed with schemas", tools_are_listed_with_schemas(gw))
            await check(
                "stdio: a turn shows in the context, a retry is written once",
                a_turn_shows_in_the_context_and_a_retry_is_written_once(gw, user),
            )
            await check(
                "stdio: a written memory is found, listed and suppressed",
                a_written_memory_is_found_listed_and_suppressed(gw, user),
            )
            await check("stdio: an intent is recalled", an_intent_is_recalled(gw, user))
            await check(
                "stdio: bad arguments are tool errors with the API's code",
                bad_arguments_are_tool_errors_with_the_apis_code(gw, user),
            )
            await check(
                "stdio: a forgotten user has nothing left",
                a_forgotten_user_has_nothing_left(gw, user),
            )
        await check(
            "stdio: a wrong key and an unreachable node are tool errors",
            a_wrong_key_and_an_unreachable_node_are_tool_errors(),
        )

        async def logs() -> None:
            the_logs_hold_no_text_and_no_key()

        await check("stdio: the server's log holds no text and no key", logs())

        server = HttpServer()
        await server.start()
        try:
            await check(
                "http: a missing or wrong key is refused",
                the_endpoint_refuses_a_missing_or_wrong_key(server.url),
            )
            await check(
                "http: each client acts with its own key",
                each_http_client_acts_with_its_own_key(server.url),
            )
        finally:
            code = await server.stop()

        async def stopped() -> None:
            assert code == 0, f"the HTTP server exited with {code} on SIGTERM"

        await check("http: the server stops cleanly on SIGTERM", stopped())
    except Exception:  # noqa: BLE001 - report any failure with its traceback
        traceback.print_exc()
        print(f"FAILED after {checks} checks passed", flush=True)
        return 1
    print(f"all {checks} checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
