"""The retry policy, timed exactly: answers come from httpx's MockTransport (no node), and
the clients' sleep is recorded instead of slept. What the real node's 429 does to the clients
is test_rate_limit.py's."""

from __future__ import annotations

import inspect
import json
import random
from email.utils import formatdate

import httpx
import pytest

from engram_client import (
    AsyncEngram,
    BadRequest,
    Engram,
    Forbidden,
    ProtocolError,
    RateLimited,
    RetryPolicy,
    TransportError,
    Unavailable,
)
from engram_client.retry import parse_retry_after

TURN = {
    "written": True,
    "session_id": "s",
    "seq": 0,
    "entities": [],
    "memories": [],
    "intents": [],
    "distilling": False,
    "replayed": False,
}
KEY = {
    "key_id": "k1",
    "tenant": "t",
    "scope": "gateway",
    "name": "n",
    "created_at": 1,
    "created_by": "root",
    "expires_at": None,
    "replaced_by": None,
    "token": "egk_k1_secret",
}


def error(status: int, code: str, retry_after: str | None = None) -> httpx.Response:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return httpx.Response(status, json={"code": code, "message": "m"}, headers=headers)


class Script:
    """Answers requests in order from a list; records what was sent."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def request_ids(self) -> list[str]:
        return [json.loads(r.content)["request_id"] for r in self.sent]


def client(script: Script, sleeps: list[float], **policy: float) -> Engram:
    return Engram(
        "http://engram.test",
        "egk_a_b",
        transport=httpx.MockTransport(script),
        retry=RetryPolicy(rng=random.Random(7), **policy),  # type: ignore[arg-type]
        sleep=sleeps.append,
    )


def test_429_waits_the_retry_after_then_sends_the_same_request_id() -> None:
    script = Script(error(429, "rate_limited", "2"), httpx.Response(200, json=TURN))
    sleeps: list[float] = []
    with client(script, sleeps) as c:
        assert c.append_turn("u", "hi").seq == 0
    assert sleeps == [2.0], "Retry-After (2 s) is above the backoff (0.25 s at most)"
    first, second = script.request_ids()
    assert first == second


def test_retry_after_as_an_http_date_is_honoured() -> None:
    script = Script(
        error(503, "unavailable", formatdate(timeval=None, usegmt=True)),
        error(503, "overloaded", "3"),
        httpx.Response(200, json=TURN),
    )
    sleeps: list[float] = []
    with client(script, sleeps) as c:
        c.append_turn("u", "hi")
    assert 0.125 <= sleeps[0] <= 1.0, "a date now asks for no wait: the backoff applies"
    assert sleeps[1] == 3.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412478.0) == 2.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_backoff_is_exponential_with_jitter_and_attempts_are_bounded() -> None:
    script = Script(*[error(503, "overloaded") for _ in range(4)])
    sleeps: list[float] = []
    with (
        client(script, sleeps, initial_backoff=0.1, jitter=0.5, max_attempts=4) as c,
        pytest.raises(Unavailable) as raised,
    ):
        c.append_turn("u", "hi", request_id="r-1")
    assert (raised.value.status, raised.value.code, raised.value.retry_after) == (
        503,
        "overloaded",
        None,
    )
    assert raised.value.request_id == "r-1"
    assert len(script.sent) == 4 and len(set(script.request_ids())) == 1
    assert len(sleeps) == 3
    for n, wait in enumerate(sleeps):
        full = 0.1 * 2**n
        assert full * 0.5 <= wait <= full, (n, wait)
    assert len(set(sleeps)) == 3


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(initial_backoff=1.0, max_backoff=3.0, jitter=0.0, max_attempts=10)
    assert [policy.backoff(n) for n in range(1, 6)] == [1.0, 2.0, 3.0, 3.0, 3.0]


def test_a_retry_after_beyond_the_limit_is_raised_at_once() -> None:
    script = Script(error(429, "rate_limited", "120"))
    sleeps: list[float] = []
    with client(script, sleeps, max_retry_after=30.0) as c, pytest.raises(RateLimited) as raised:
        c.list_sessions("u")
    assert raised.value.retry_after == 120.0
    assert sleeps == [] and len(script.sent) == 1


def test_client_errors_are_not_retried() -> None:
    script = Script(error(400, "invalid_input"))
    sleeps: list[float] = []
    with client(script, sleeps) as c, pytest.raises(BadRequest):
        c.append_turn("u", "hi")
    assert sleeps == [] and len(script.sent) == 1


def test_a_read_is_retried_after_a_lost_connection() -> None:
    script = Script(
        httpx.ReadTimeout("slow"),
        httpx.Response(200, json={"sessions": []}),
    )
    sleeps: list[float] = []
    with client(script, sleeps) as c:
        assert c.list_sessions("u") == []
    assert len(sleeps) == 1 and len(script.sent) == 2


@pytest.mark.parametrize(
    ("first", "retried"),
    [
        (httpx.ConnectError("refused"), True),  # nothing was sent
        (error(429, "rate_limited", "1"), True),  # refused before anything was done
        (error(503, "overloaded", "1"), True),  # shed before anything was done
        (httpx.ReadError("reset"), False),  # the key may have been made
        (error(503, "unavailable", "1"), False),  # it may have been made (audit trail down)
    ],
)
def test_making_a_key_is_retried_only_when_nothing_was_done(
    first: httpx.Response | Exception, retried: bool
) -> None:
    script = Script(first, httpx.Response(201, json=KEY))
    sleeps: list[float] = []
    with client(script, sleeps) as c:
        if retried:
            assert c.create_key("gateway").key.key_id == "k1"
        else:
            with pytest.raises((TransportError, Unavailable)):
                c.create_key("gateway")
    assert len(script.sent) == (2 if retried else 1)


def test_readiness_is_not_retried() -> None:
    script = Script(error(503, "unavailable", "1"))
    sleeps: list[float] = []
    with client(script, sleeps) as c:
        assert c.ready() is False
    assert sleeps == []


async def test_the_async_client_honours_retry_after() -> None:
    script = Script(error(429, "rate_limited", "2"), httpx.Response(200, json=TURN))
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with AsyncEngram(
        "http://engram.test",
        "egk_a_b",
        transport=httpx.MockTransport(script),
        sleep=sleep,
    ) as c:
        assert (await c.append_turn("u", "hi")).seq == 0
    assert sleeps == [2.0]
    first, second = script.request_ids()
    assert first == second


def test_sync_and_async_clients_have_the_same_methods() -> None:
    def methods(cls: type) -> dict[str, object]:
        found: dict[str, object] = {}
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") or name in ("close", "aclose"):
                continue
            signature = inspect.signature(fn)
            params = [
                (p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()
            ]
            found[name] = (params, signature.return_annotation)
        return found

    assert methods(Engram) == methods(AsyncEngram)
    assert set(methods(Engram)) == {
        "append_turn", "feedback", "context",
        "write_memory", "list_memories", "search_memories", "set_memory_status",
        "list_conflicts", "resolve_conflict",
        "list_sessions", "session_turns", "clear_session", "forget_user", "prewarm",
        "write_intent", "distil_message", "recall_intent",
        "create_key", "list_keys", "rotate_key", "revoke_key", "audit",
        "sql_cache_lookup", "sql_cache_put", "sql_cache_invalidate",
        "record_success", "search_similar", "report_failure",
        "list_examples", "approve_example", "reject_example", "edit_example",
        "export_examples", "import_examples", "shared_settings", "set_shared_settings",
        "health", "ready",
    }  # fmt: skip


def test_a_yaml_import_keeps_its_request_id_in_the_query_across_retries() -> None:
    script = Script(
        error(503, "overloaded", "1"),
        httpx.Response(200, json={"created": 1, "updated": 0, "replayed": False}),
    )
    sleeps: list[float] = []
    document = "examples:\n- question: q\n"
    with client(script, sleeps) as c:
        ack = c.import_examples(document)
    assert (ack.created, ack.updated, ack.replayed) == (1, 0, False)
    assert sleeps and sleeps[0] >= 1.0
    first, second = script.sent
    assert first.url.params["request_id"] == second.url.params["request_id"]
    for sent in script.sent:
        assert sent.headers["content-type"] == "application/yaml"
        assert sent.content == document.encode()


def test_an_export_is_read_as_text_and_its_errors_as_json() -> None:
    yaml = "examples:\n- question: revenue by region\n"
    script = Script(
        error(503, "unavailable"),
        httpx.Response(200, text=yaml, headers={"content-type": "application/yaml"}),
        error(403, "forbidden"),
        httpx.Response(200, content=b"\xff\xfe", headers={"content-type": "application/yaml"}),
    )
    sleeps: list[float] = []
    with client(script, sleeps) as c:
        assert c.export_examples(status="approved") == yaml
        with pytest.raises(Forbidden) as refused:
            c.export_examples()
        assert refused.value.code == "forbidden"
        with pytest.raises(ProtocolError):
            c.export_examples()
    assert script.sent[0].url.params["status"] == "approved"
    assert "application/yaml" in script.sent[0].headers["accept"]
