"""Exceptions of the client: one hierarchy under :class:`EngramError`.

An answer of the node that is not a success becomes an :class:`ApiError` subclass chosen by
its HTTP status, carrying the API's stable ``code`` (``invalid_input``, ``unauthenticated``,
``rate_limited``, ...), its ``message``, the ``status`` and the ``request_id`` of the write
that failed. A request that got no answer becomes a :class:`TransportError`, and an answer the
client cannot read a :class:`ProtocolError`.

Messages come from the node, which never echoes the values a client sent (no memory text).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "EngramError",
    "ApiError",
    "BadRequest",
    "PayloadTooLarge",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "RateLimited",
    "ServerError",
    "Unavailable",
    "TransportError",
    "ProtocolError",
    "error_from_answer",
]


class EngramError(Exception):
    """Any failure of an Engram call.

    ``code`` is the API's stable code (``transport`` or ``protocol`` for failures that got no
    readable answer), ``status`` the HTTP status (``None`` without an answer) and
    ``request_id`` the idempotency key of the write (``None`` for reads).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id

    def __str__(self) -> str:
        status = f"{self.status} " if self.status is not None else ""
        rid = f" (request id {self.request_id})" if self.request_id else ""
        return f"{status}{self.code}: {self.message}{rid}"


class ApiError(EngramError):
    """The node answered with an error (``{"code": ..., "message": ...}``).

    ``retry_after`` is the wait in seconds the node asked for with ``Retry-After`` (429 and
    503), ``None`` when it asked for none.
    """

    status: int

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, request_id=request_id)
        self.retry_after = retry_after


class BadRequest(ApiError):
    """400: ``invalid_input``, ``invalid_json`` or ``too_large``; the message names the field.
    Also 415 ``unsupported_media_type``."""


class PayloadTooLarge(BadRequest):
    """413 ``payload_too_large``: the body is over the node's limit."""


class Unauthorized(ApiError):
    """401 ``unauthenticated``: no key, or an unknown, revoked or expired one."""


class Forbidden(ApiError):
    """403: ``forbidden`` (the key's scope does not allow it), ``wrong_tenant`` or
    ``approval_required`` (the sensitive-read breaker)."""


class NotFound(ApiError):
    """404 ``not_found``: unknown session, memory, turn, flag, key or endpoint."""


class RateLimited(ApiError):
    """429 ``rate_limited``: the key is over its rate; ``retry_after`` says how long to wait."""


class ServerError(ApiError):
    """500 ``internal`` (or another 5xx than 503): the node failed; it logged why."""


class Unavailable(ServerError):
    """503 ``overloaded``, ``unavailable`` or ``not_owner``: retry, with the same request id,
    after ``retry_after``."""


class TransportError(EngramError):
    """No answer: the connection failed or timed out (after the client's retries). For a
    write, whether the node applied it is unknown: retry it with the same request id."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message, code="transport", request_id=request_id)


class ProtocolError(EngramError):
    """The node answered something the client cannot read (not the JSON it documents)."""

    def __init__(
        self, message: str, *, status: int | None = None, request_id: str | None = None
    ) -> None:
        super().__init__(message, code="protocol", status=status, request_id=request_id)


_BY_STATUS: Mapping[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    413: PayloadTooLarge,
    415: BadRequest,
    429: RateLimited,
    503: Unavailable,
}


def error_from_answer(
    status: int,
    body: Any,
    *,
    request_id: str | None,
    retry_after: float | None,
) -> ApiError:
    """The exception for an error answer: ``body`` is its decoded JSON (``None`` when it was
    not JSON). The versioned API's errors are ``{"code": "...", "message": "..."}``; the seed
    chat endpoints' are ``{"code": <status>, "error": "...", "message": "..."}``."""
    code = f"http_{status}"
    message = "the node answered without an error body"
    if isinstance(body, Mapping):
        raw = body.get("code")
        if isinstance(raw, str):
            code = raw
        elif isinstance(body.get("error"), str):
            code = body["error"]
        if isinstance(body.get("message"), str):
            message = body["message"]
    kind = _BY_STATUS.get(status)
    if kind is None:
        kind = ServerError if status >= 500 else ApiError
    return kind(
        message,
        code=code,
        status=status,
        request_id=request_id,
        retry_after=retry_after,
    )
