"""A write whose answer is lost is retried with the same request id, and the real node
applies it once. The transport here forwards every request to the node and loses the first
answer after the node has handled it, as a dropped connection would."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from conftest import Keys, unique

from engram_client import AsyncEngram, Engram, RetryEvent, RetryPolicy

FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.05)


def json_body(request: httpx.Request) -> dict[str, object]:
    """The request's JSON body; ``{}`` for none, or one that is not JSON (a YAML import)."""
    if not request.content or request.headers.get("content-type") != "application/json":
        return {}
    body: dict[str, object] = json.loads(request.content)
    return body


class LosesFirstAnswer(httpx.BaseTransport):
    """Sends to the node; the first answer is read, then dropped (``ReadError``)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.bodies: list[dict[str, object]] = []
        self.headers: list[httpx.Headers] = []
        self.urls: list[httpx.URL] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json_body(request))
        self.headers.append(request.headers)
        self.urls.append(request.url)
        response = self.inner.handle_request(request)
        response.read()
        if len(self.bodies) == 1:
            response.close()
            raise httpx.ReadError("connection reset after the node answered", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncLosesFirstAnswer(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bodies: list[dict[str, object]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json_body(request))
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if len(self.bodies) == 1:
            await response.aclose()
            raise httpx.ReadError("connection reset after the node answered", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_memory_write_whose_answer_is_lost_is_applied_once(
    url: str, keys: Keys, gateway: Engram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    user, text = unique("u"), "a fact only this test writes " + unique("marker")
    lossy, events = LosesFirstAnswer(), list[RetryEvent]()
    with Engram(url, keys.gateway, transport=lossy, retry=FAST, on_retry=events.append) as c:
        ack = c.write_memory(user, "episodic", text)
    assert ack.replayed is True, "the second attempt found the first one's result"
    first, second = lossy.bodies
    assert first["request_id"] == second["request_id"]
    assert [(e.code, e.request_id) for e in events] == [("transport", first["request_id"])]
    stored = [m for m in gateway.list_memories(user) if m.text == text]
    assert [m.memory_id for m in stored] == [ack.memory.memory_id]
    # The retry was logged, and no log line holds the memory's text or the user id.
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name == "engram_client")
    assert "retrying POST /v1/users/{user}/memories after transport" in ours
    assert user not in ours
    assert text not in caplog.text


def test_a_turn_whose_answer_is_lost_is_appended_once(
    url: str, keys: Keys, gateway: Engram
) -> None:
    user, session = unique("u"), unique("s")
    lossy = LosesFirstAnswer()
    with Engram(url, keys.gateway, transport=lossy, retry=FAST) as c:
        ack = c.append_turn(user, "count the orders of dw_orders", "42", session_id=session)
    assert (ack.seq, ack.replayed) == (0, True)
    [listed] = gateway.list_sessions(user)
    assert listed.turn_count == 1


def test_a_session_clear_whose_answer_is_lost_sends_the_same_idempotency_key(
    url: str, keys: Keys, gateway: Engram
) -> None:
    user, session = unique("u"), unique("s")
    gateway.append_turn(user, "one", "1", session_id=session)
    gateway.append_turn(user, "two", "2", session_id=session)
    lossy = LosesFirstAnswer()
    with Engram(url, keys.gateway, transport=lossy, retry=FAST) as c:
        cleared = c.clear_session(user, session)
    assert (cleared.deleted, cleared.replayed) == (2, True)
    keys_sent = [h["idempotency-key"] for h in lossy.headers]
    assert len(keys_sent) == 2 and keys_sent[0] == keys_sent[1]


def test_the_same_request_id_given_twice_replays(gateway: Engram) -> None:
    user, rid = unique("u"), unique("req")
    first = gateway.write_memory(user, "profile", "prefers tables", request_id=rid)
    again = gateway.write_memory(user, "profile", "prefers tables", request_id=rid)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.memory.memory_id == first.memory.memory_id
    assert len(gateway.list_memories(user)) == 1
    fb_rid = unique("fb")
    gateway.append_turn(user, "hi", "hello", session_id="s")
    assert gateway.feedback(user, 0, "like", session_id="s", request_id=fb_rid).replayed is False
    assert gateway.feedback(user, 0, "like", session_id="s", request_id=fb_rid).replayed is True
    intent_rid = unique("w")
    one = gateway.write_intent(
        user, "complaint", {"target": "late delivery"}, request_id=intent_rid
    )
    two = gateway.write_intent(
        user, "complaint", {"target": "late delivery"}, request_id=intent_rid
    )
    assert (one.replayed, two.replayed, two.version) == (False, True, one.version)


async def test_the_async_client_retries_a_lost_write_once(url: str, keys: Keys) -> None:
    user = unique("u")
    lossy, events = AsyncLosesFirstAnswer(), list[RetryEvent]()
    async with AsyncEngram(
        url, keys.gateway, transport=lossy, retry=FAST, on_retry=events.append
    ) as c:
        ack = await c.append_turn(user, "async turn", "ok", session_id="s")
        assert (ack.seq, ack.replayed) == (0, True)
        assert lossy.bodies[0]["request_id"] == lossy.bodies[1]["request_id"]
        [listed] = await c.list_sessions(user)
    assert listed.turn_count == 1
    assert len(events) == 1


def test_shared_set_writes_whose_answer_is_lost_are_applied_once(
    url: str, keys: Keys, gateway: Engram, admin: Engram
) -> None:
    question, sql = "How many orders last week?", "SELECT count(*) FROM orders"
    lossy = LosesFirstAnswer()
    with Engram(url, keys.gateway, transport=lossy, retry=FAST) as c:
        put = c.sql_cache_put(question, sql, route="nl2sql", domain="sales")
    assert put.replayed is True and put.replaced is False
    first, second = lossy.bodies
    assert first["request_id"] == second["request_id"]

    lossy = LosesFirstAnswer()
    with Engram(url, keys.gateway, transport=lossy, retry=FAST) as c:
        recorded = c.record_success(question, sql, route="nl2sql", confidence=0.95)
    assert recorded.replayed is True and recorded.example is not None
    assert recorded.example.successes == 1, "the retry did not count a second success"
    assert lossy.bodies[0]["request_id"] == lossy.bodies[1]["request_id"]

    # The import's request id is in its query, the same in both attempts.
    yaml = admin.export_examples()
    admin.reject_example(recorded.example.example_id)
    lossy = LosesFirstAnswer()
    with Engram(url, keys.admin, transport=lossy, retry=FAST) as c:
        imported = c.import_examples(yaml)
    assert (imported.updated, imported.replayed) == (1, True)
    rids = [u.params["request_id"] for u in lossy.urls]
    assert len(rids) == 2 and rids[0] == rids[1]
    assert [h["content-type"] for h in lossy.headers] == ["application/yaml"] * 2
    [example] = admin.list_examples()
    assert (example.status, example.reviewed_by) == ("pending_review", "import")


async def test_the_async_client_retries_a_lost_failure_report_once(
    url: str, keys: Keys, gateway: Engram
) -> None:
    recorded = gateway.record_success("top products", "SELECT 1", route="nl2sql", confidence=0.9)
    assert recorded.example is not None
    lossy = AsyncLosesFirstAnswer()
    async with AsyncEngram(url, keys.gateway, transport=lossy, retry=FAST) as c:
        failed = await c.report_failure(recorded.example.example_id)
    assert failed.replayed is True and failed.example is not None
    assert failed.example.fail_count == 1, "counted once"
    assert lossy.bodies[0]["request_id"] == lossy.bodies[1]["request_id"]
