"""The node's errors become exceptions carrying its code, message, status and the write's
request id, and errors that retrying cannot fix are raised at once."""

from __future__ import annotations

import socket

import pytest
from conftest import Keys, unique

from engram_client import (
    ApiError,
    BadRequest,
    Engram,
    EngramError,
    Forbidden,
    NotFound,
    RetryEvent,
    RetryPolicy,
    TransportError,
    Unauthorized,
)


def test_bad_input_is_a_bad_request_naming_the_field_and_not_retried(url: str, keys: Keys) -> None:
    events: list[RetryEvent] = []
    with (
        Engram(url, keys.gateway, on_retry=events.append) as gateway,
        pytest.raises(BadRequest) as raised,
    ):
        gateway.write_memory(unique("u"), "bogus", "text", request_id="bad-1")  # type: ignore[arg-type]
    e = raised.value
    assert (e.status, e.code, e.request_id) == (400, "invalid_input", "bad-1")
    assert "kind" in e.message
    assert isinstance(e, ApiError) and isinstance(e, EngramError)
    assert str(e) == f"400 invalid_input: {e.message} (request id bad-1)"
    assert events == []


def test_a_too_long_text_is_refused_without_echoing_it(gateway: Engram) -> None:
    secret = "confidential-" + "x" * 20_000
    with pytest.raises(BadRequest) as raised:
        gateway.append_turn(unique("u"), secret, "ok")
    assert raised.value.code == "invalid_input"
    assert "confidential" not in str(raised.value)


def test_an_unknown_key_is_unauthorized(url: str) -> None:
    events: list[RetryEvent] = []
    with (
        Engram(url, "egk_0123456789abcdef_" + "0" * 64, on_retry=events.append) as stranger,
        pytest.raises(Unauthorized) as raised,
    ):
        stranger.list_memories(unique("u"))
    assert (raised.value.status, raised.value.code) == (401, "unauthenticated")
    assert raised.value.request_id is None
    assert events == []


def test_scope_and_tenant_refusals_are_forbidden(url: str, keys: Keys, tenant: str) -> None:
    with Engram(url, keys.gateway) as gateway, pytest.raises(Forbidden) as scope:
        gateway.list_keys()
    assert (scope.value.status, scope.value.code) == (403, "forbidden")
    with (
        Engram(url, keys.gateway, tenant=tenant + "-other") as elsewhere,
        pytest.raises(Forbidden) as tenant_refused,
    ):
        elsewhere.list_sessions(unique("u"))
    assert tenant_refused.value.code == "wrong_tenant"


def test_an_unknown_memory_is_not_found_with_the_request_id(gateway: Engram) -> None:
    user = unique("u")
    gateway.write_memory(user, "episodic", "something happened")
    with pytest.raises(NotFound) as raised:
        gateway.set_memory_status(user, "m-missing", "suppressed", request_id="status-1")
    assert (raised.value.status, raised.value.code) == (404, "not_found")
    assert raised.value.request_id == "status-1"


def test_no_answer_is_a_transport_error_after_bounded_attempts() -> None:
    # A port nothing listens on: bound, then closed.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events: list[RetryEvent] = []
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002)
    with (
        Engram(
            f"http://127.0.0.1:{port}", "egk_x_y", retry=policy, on_retry=events.append
        ) as nobody,
        pytest.raises(TransportError) as raised,
    ):
        nobody.append_turn("u", "hello", request_id="lost-1")
    assert raised.value.code == "transport" and raised.value.status is None
    assert raised.value.request_id == "lost-1"
    assert [(e.attempt, e.code, e.request_id) for e in events] == [
        (1, "transport", "lost-1"),
        (2, "transport", "lost-1"),
    ]
