"""When the client retries a call, and how long it waits first.

A call is retried, up to ``RetryPolicy.max_attempts`` attempts in all, when

- the node answered 429 ``rate_limited`` or 503 (``overloaded``, ``unavailable``,
  ``not_owner``): the wait is at least the answer's ``Retry-After``, and an answer asking for
  more than ``max_retry_after`` seconds is raised at once instead;
- no answer came back (connection refused, reset, timed out), for idempotent calls.

Every write carries a request id that stays the same across attempts, so the node applies it
once however many attempts reach it: writes are idempotent. Two calls are not: making and
rotating a key. They are retried only when the node certainly did nothing: a connection that
could not be made, 429, and 503 ``overloaded`` or ``not_owner`` (answered before any work).

The wait before attempt ``n + 1`` is exponential with jitter: ``initial_backoff * 2**(n-1)``
capped at ``max_backoff``, times a random factor in ``[1 - jitter, 1]``; never less than the
``Retry-After`` the node sent. This module is pure: the transports sleep.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass, field

from .errors import ApiError, RateLimited, Unavailable

__all__ = ["RetryPolicy", "RetryEvent", "parse_retry_after"]

# 503 codes answered before the node did anything: safe to retry even a call that is not
# idempotent.
_NOTHING_DONE = frozenset({"rate_limited", "overloaded", "not_owner"})


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts a call gets and how long the client waits between them."""

    max_attempts: int = 4
    """Attempts in all, the first included (1: never retry)."""
    initial_backoff: float = 0.25
    """Seconds before the second attempt, before jitter."""
    max_backoff: float = 8.0
    """Cap of the exponential wait, before ``Retry-After`` is applied."""
    jitter: float = 0.5
    """The wait is multiplied by a random factor in ``[1 - jitter, 1]`` (0: no jitter)."""
    max_retry_after: float = 60.0
    """An answer asking to wait longer than this is raised instead of waited for."""
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.max_retry_after < 0:
            raise ValueError("waits must not be negative")

    def backoff(self, attempt: int) -> float:
        """The jittered exponential wait after failed attempt ``attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * 2.0 ** (attempt - 1))
        return base * (1.0 - self.jitter * self.rng.random())

    def after_answer(self, attempt: int, error: ApiError, *, idempotent: bool) -> float | None:
        """Seconds to wait before retrying a call that failed with ``error`` at ``attempt``,
        or ``None`` to raise it."""
        if attempt >= self.max_attempts:
            return None
        if not isinstance(error, (RateLimited, Unavailable)):
            return None
        if not idempotent and error.code not in _NOTHING_DONE:
            return None
        wait = self.backoff(attempt)
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                return None
            wait = max(wait, error.retry_after)
        return wait

    def after_no_answer(self, attempt: int, *, idempotent: bool, connected: bool) -> float | None:
        """Seconds to wait before retrying a call that got no answer at ``attempt`` (with
        ``connected`` false when no connection was made), or ``None`` to raise."""
        if attempt >= self.max_attempts:
            return None
        if not idempotent and connected:
            return None
        return self.backoff(attempt)


@dataclass(frozen=True)
class RetryEvent:
    """A retry about to happen, given to the client's ``on_retry`` hook (for metrics or
    logs: it carries no request or response body)."""

    method: str
    route: str
    """The endpoint's template, e.g. ``/v1/users/{user}/turns`` (no user id)."""
    attempt: int
    """The attempt that failed (1-based)."""
    wait: float
    """Seconds the client waits before the next attempt."""
    status: int | None
    """The failed attempt's HTTP status (``None``: no answer)."""
    code: str
    """The API's code, or ``transport``."""
    retry_after: float | None
    request_id: str | None


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date; ``None`` when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)
