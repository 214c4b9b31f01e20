"""The real node's per-key rate limit: its 429 carries ``rate_limited`` and ``Retry-After``,
and both clients wait at least that long and then succeed. The node of ``ENGRAM_RATE_URL``
lets a key make 1 request a second, in bursts of 3."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import env, unique

from engram_client import AsyncEngram, Engram, RateLimited, RetryEvent, RetryPolicy

NEVER_RETRY = RetryPolicy(max_attempts=1)


@pytest.fixture
def rate_url() -> str:
    return env("ENGRAM_RATE_URL")


@pytest.fixture
def limited_key(rate_url: str, root_key: str) -> str:
    with Engram(rate_url, root_key, tenant=unique("py-rate")) as root:
        return root.create_key("gateway", name="pytest-limited").token


@pytest.fixture
def exhausted(rate_url: str, limited_key: str) -> Iterator[RateLimited]:
    """Spends the key's burst; yields the 429 that ended it."""
    with Engram(rate_url, limited_key, retry=NEVER_RETRY) as c:
        for _ in range(20):
            try:
                c.list_sessions("u")
            except RateLimited as e:
                yield e
                return
    pytest.fail("20 requests at once never went over a rate of 1 a second (burst 3)")


def test_the_node_answers_429_with_retry_after(exhausted: RateLimited) -> None:
    assert (exhausted.status, exhausted.code) == (429, "rate_limited")
    assert exhausted.retry_after is not None and exhausted.retry_after >= 1.0


def test_the_sync_client_waits_the_retry_after_and_succeeds(
    rate_url: str, limited_key: str, exhausted: RateLimited
) -> None:
    events: list[RetryEvent] = []
    with Engram(rate_url, limited_key, on_retry=events.append) as c:
        started = time.monotonic()
        ack = c.append_turn(unique("u"), "a turn past the rate", "ok")
        waited = time.monotonic() - started
    assert ack.written and ack.seq == 0
    limited = [e for e in events if e.status == 429]
    assert limited, "the first attempt was over the rate"
    first = limited[0]
    assert first.code == "rate_limited" and first.retry_after is not None
    assert first.wait >= first.retry_after >= 1.0
    assert waited >= first.retry_after
    assert len({e.request_id for e in events}) == 1 and first.request_id is not None


async def test_the_async_client_waits_the_retry_after_and_succeeds(
    rate_url: str, limited_key: str, exhausted: RateLimited
) -> None:
    events: list[RetryEvent] = []
    async with AsyncEngram(rate_url, limited_key, on_retry=events.append) as c:
        started = time.monotonic()
        sessions = await c.list_sessions(unique("u"))
        waited = time.monotonic() - started
    assert sessions == []
    first = next(e for e in events if e.status == 429)
    assert first.retry_after is not None and first.wait >= first.retry_after >= 1.0
    assert waited >= first.retry_after
