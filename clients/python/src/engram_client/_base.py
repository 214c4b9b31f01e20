"""What the sync and async clients share: their settings, the headers of every request,
and the decisions taken after a failed attempt (wait and retry, or raise), with the retry
hook and the log line. The transports (``client``, ``aio``) only send and sleep.

The log names the method, the endpoint's template, the API's code and the request id: never
a user id, a body or a memory text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ._calls import Call
from .errors import ApiError, TransportError
from .retry import RetryEvent, RetryPolicy

__version__ = "0.1.0"

log = logging.getLogger("engram_client")

DEFAULT_TIMEOUT = 30.0
"""Seconds a request may take (connect, send, first byte, read), per attempt."""


class Settings:
    """The settings of a client, read once at construction."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        *,
        tenant: str | None,
        timeout: float | httpx.Timeout,
        retry: RetryPolicy | None,
        headers: Mapping[str, str] | None,
        on_retry: Callable[[RetryEvent], None] | None,
    ) -> None:
        base_url = base_url if base_url is not None else os.environ.get("ENGRAM_URL")
        api_key = api_key if api_key is not None else os.environ.get("ENGRAM_API_KEY")
        if not base_url:
            raise ValueError("no base_url given and ENGRAM_URL is not set")
        if not api_key:
            raise ValueError("no api_key given and ENGRAM_API_KEY is not set")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.on_retry = on_retry
        self.headers: dict[str, str] = {
            "authorization": f"Bearer {api_key}",
            "accept": "application/json",
            "user-agent": f"engram-client-python/{__version__}",
        }
        if tenant is not None:
            self.headers["x-engram-tenant"] = tenant
        if headers:
            self.headers.update(headers)

    def request_args(self, call: Call[Any]) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` for ``call``."""
        args: dict[str, Any] = {"method": call.method, "url": call.path}
        if call.content is not None:
            args["content"] = call.content
        elif call.body is not None:
            args["json"] = call.body
        if call.params:
            args["params"] = dict(call.params)
        if call.headers:
            args["headers"] = dict(call.headers)
        return args

    def after_error(self, call: Call[Any], attempt: int, error: ApiError) -> float | None:
        """The wait before retrying ``call`` after it failed with ``error``, or ``None``."""
        if not call.retry:
            return None
        wait = self.retry.after_answer(attempt, error, idempotent=call.idempotent)
        if wait is not None:
            self._retrying(call, attempt, wait, error.status, error.code, error.retry_after)
        return wait

    def after_no_answer(self, call: Call[Any], attempt: int, error: httpx.TransportError) -> float:
        """The wait before retrying ``call`` after it got no answer; raises
        :class:`TransportError` when it is not retried."""
        # Nothing was sent when no connection could be made (or none was free in the pool).
        connected = not isinstance(
            error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
        )
        wait = (
            self.retry.after_no_answer(attempt, idempotent=call.idempotent, connected=connected)
            if call.retry
            else None
        )
        if wait is None:
            raise TransportError(
                f"{call.method} {call.route}: no answer after {attempt} attempt(s): "
                f"{type(error).__name__}",
                request_id=call.request_id,
            ) from error
        self._retrying(call, attempt, wait, None, "transport", None)
        return wait

    def _retrying(
        self,
        call: Call[Any],
        attempt: int,
        wait: float,
        status: int | None,
        code: str,
        retry_after: float | None,
    ) -> None:
        log.info(
            "retrying %s %s after %s (attempt %d of %d failed, waiting %.2fs, request id %s)",
            call.method,
            call.route,
            code,
            attempt,
            self.retry.max_attempts,
            wait,
            call.request_id,
        )
        if self.on_retry is not None:
            self.on_retry(
                RetryEvent(
                    method=call.method,
                    route=call.route,
                    attempt=attempt,
                    wait=wait,
                    status=status,
                    code=code,
                    retry_after=retry_after,
                    request_id=call.request_id,
                )
            )
