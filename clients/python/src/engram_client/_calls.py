"""Every endpoint the client speaks, as a :class:`Call`: method, path, body, whether it is
idempotent, and how to read its answer. The sync and async clients only send calls and map
answers (:func:`answer`), so both speak the API the same way.

Writes get their request id here (a fresh uuid4 unless the caller gives one); it is in the
call, so every attempt of a call sends the same one.

Bodies and answers are JSON, except the few-shot library's YAML: its import sends ``content``
as it is (with its ``content-type``) and its export's answer is read as text (``text``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from . import models as m
from .errors import ProtocolError, error_from_answer
from .models.admin import keys_from_json
from .models.memories import conflicts_from_json, memories_from_json
from .models.shared import examples_from_json
from .models.users import intents_from_json, sessions_from_json
from .retry import parse_retry_after

T = TypeVar("T")

__all__ = ["Call", "answer"]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call, ready to send (possibly several times)."""

    method: str
    route: str
    """The endpoint's template (for logs and retry events: it names no user)."""
    path: str
    parse: Callable[[Any], T]
    body: Mapping[str, Any] | None = None
    """Sent as JSON."""
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    idempotent: bool = True
    retry: bool = True
    request_id: str | None = None
    content: bytes | None = None
    """Sent as it is, instead of a JSON body (``headers`` give its content type)."""
    text: bool = False
    """The answer is text (UTF-8), not JSON: ``parse`` gets a ``str``. Errors are JSON."""


def answer(call: Call[T], status: int, headers: Mapping[str, str], content: bytes) -> T:
    """The value of a call's answer, or the exception it stands for (raised)."""
    if call.text and 200 <= status < 300:
        try:
            return call.parse(content.decode("utf-8"))
        except UnicodeDecodeError:
            raise ProtocolError(
                f"the answer of {call.method} {call.route} is not UTF-8 text",
                status=status,
                request_id=call.request_id,
            ) from None
    try:
        body: Any = json.loads(content) if content else None
    except ValueError:
        body = None
        if 200 <= status < 300:
            raise ProtocolError(
                "the node answered something that is not JSON",
                status=status,
                request_id=call.request_id,
            ) from None
    if 200 <= status < 300:
        try:
            return call.parse(body)
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(
                f"unexpected answer of {call.method} {call.route}: {e}",
                status=status,
                request_id=call.request_id,
            ) from None
    raise error_from_answer(
        status,
        body,
        request_id=call.request_id,
        retry_after=parse_retry_after(headers.get("retry-after")),
    )


def _seg(value: str) -> str:
    """A path segment (user, session, memory, flag or key id), percent-encoded."""
    if not isinstance(value, str) or not value:
        raise ValueError("ids must be non-empty strings")
    return quote(value, safe="")


def _rid(request_id: str | None) -> str:
    return request_id if request_id is not None else str(uuid.uuid4())


def _compact(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body without the optional fields left out (``None``)."""
    return {k: v for k, v in body.items() if v is not None}


def _user(user: str) -> str:
    return f"/v1/users/{_seg(user)}"


def _ignore(_: Any) -> None:
    return None


# --- conversation ----------------------------------------------------------------------------


def append_turn(
    user: str,
    user_text: str,
    assistant_text: str,
    *,
    session_id: str | None,
    route: m.Route | None,
    success: bool,
    choices: Sequence[m.Choice] | None,
    clarification: m.Clarification | None,
    trace_id: str | None,
    request_id: str | None,
) -> Call[m.TurnAck]:
    rid = _rid(request_id)
    body = _compact(
        {
            "request_id": rid,
            "session_id": session_id,
            "user_text": user_text,
            "assistant_text": assistant_text,
            "route": route,
            "success": success,
            "choices": [c.to_json() for c in choices] if choices else None,
            "clarification": clarification.to_json() if clarification else None,
            "trace_id": trace_id,
        }
    )
    return Call(
        "POST",
        "/v1/users/{user}/turns",
        f"{_user(user)}/turns",
        m.TurnAck.from_json,
        body=body,
        request_id=rid,
    )


def feedback(
    user: str,
    turn_seq: int,
    rating: m.Rating,
    *,
    session_id: str | None,
    corrected_sql: str | None,
    comment: str | None,
    trace_id: str | None,
    request_id: str | None,
) -> Call[m.FeedbackAck]:
    rid = _rid(request_id)
    body = _compact(
        {
            "request_id": rid,
            "session_id": session_id,
            "turn_seq": turn_seq,
            "rating": rating,
            "corrected_sql": corrected_sql,
            "comment": comment,
            "trace_id": trace_id,
        }
    )
    return Call(
        "POST",
        "/v1/users/{user}/feedback",
        f"{_user(user)}/feedback",
        m.FeedbackAck.from_json,
        body=body,
        request_id=rid,
    )


def context(
    user: str,
    *,
    session_id: str | None,
    query: str | None,
    route: m.Route | None,
    token_budget: int | None,
    shared: m.SharedAsk | None,
) -> Call[m.Context]:
    body = _compact(
        {
            "session_id": session_id,
            "query": query,
            "route": route,
            "token_budget": token_budget,
            "shared": shared.to_json() if shared is not None else None,
        }
    )
    return Call(
        "POST",
        "/v1/users/{user}/context",
        f"{_user(user)}/context",
        m.Context.from_json,
        body=body,
    )


# --- memories --------------------------------------------------------------------------------


def write_memory(
    user: str,
    kind: m.Kind,
    text: str,
    *,
    memory_id: str | None,
    payload: Mapping[str, Any] | None,
    status: m.Status | None,
    namespace: str | None,
    scope: str | None,
    confidence: float | None,
    salience: float | None,
    valid_from: int | None,
    valid_to: int | None,
    session_id: str | None,
    source_route: str | None,
    source_agent: str | None,
    trace_id: str | None,
    request_id: str | None,
) -> Call[m.MemoryAck]:
    rid = _rid(request_id)
    body = _compact(
        {
            "request_id": rid,
            "kind": kind,
            "text": text,
            "payload": dict(payload) if payload is not None else None,
            "status": status,
            "namespace": namespace,
            "scope": scope,
            "confidence": confidence,
            "salience": salience,
            "valid_from": valid_from,
            "valid_to": valid_to,
            "session_id": session_id,
            "source_route": source_route,
            "source_agent": source_agent,
            "trace_id": trace_id,
        }
    )
    if memory_id is None:
        return Call(
            "POST",
            "/v1/users/{user}/memories",
            f"{_user(user)}/memories",
            m.MemoryAck.from_json,
            body=body,
            request_id=rid,
        )
    return Call(
        "PUT",
        "/v1/users/{user}/memories/{memory_id}",
        f"{_user(user)}/memories/{_seg(memory_id)}",
        m.MemoryAck.from_json,
        body=body,
        request_id=rid,
    )


def list_memories(user: str, *, kind: m.Kind | None) -> Call[list[m.Memory]]:
    params = {"kind": kind} if kind is not None else None
    return Call(
        "GET",
        "/v1/users/{user}/memories",
        f"{_user(user)}/memories",
        memories_from_json,
        params=params,
    )


def search_memories(
    user: str,
    query: str,
    *,
    k: int | None,
    kinds: Sequence[m.Kind] | None,
    mode: m.SearchMode | None,
    active_only: bool | None,
    rerank: bool | None,
) -> Call[m.SearchResult]:
    body = _compact(
        {
            "query": query,
            "k": k,
            "kinds": list(kinds) if kinds is not None else None,
            "mode": mode,
            "active_only": active_only,
            "rerank": rerank,
        }
    )
    return Call(
        "POST",
        "/v1/users/{user}/memories/search",
        f"{_user(user)}/memories/search",
        m.SearchResult.from_json,
        body=body,
    )


def set_memory_status(
    user: str, memory_id: str, status: m.Status, *, request_id: str | None
) -> Call[m.MemoryAck]:
    rid = _rid(request_id)
    return Call(
        "POST",
        "/v1/users/{user}/memories/{memory_id}/status",
        f"{_user(user)}/memories/{_seg(memory_id)}/status",
        m.MemoryAck.from_json,
        body={"request_id": rid, "status": status},
        request_id=rid,
    )


def list_conflicts(user: str) -> Call[list[m.Conflict]]:
    return Call(
        "GET", "/v1/users/{user}/conflicts", f"{_user(user)}/conflicts", conflicts_from_json
    )


def resolve_conflict(
    user: str, flag_id: str, resolution: m.Resolution, *, request_id: str | None
) -> Call[m.ConflictResolution]:
    rid = _rid(request_id)
    return Call(
        "POST",
        "/v1/users/{user}/conflicts/{flag_id}/resolve",
        f"{_user(user)}/conflicts/{_seg(flag_id)}/resolve",
        m.ConflictResolution.from_json,
        body={"request_id": rid, "resolution": resolution},
        request_id=rid,
    )


# --- sessions and users ----------------------------------------------------------------------


def list_sessions(user: str) -> Call[list[m.Session]]:
    return Call("GET", "/v1/users/{user}/sessions", f"{_user(user)}/sessions", sessions_from_json)


def session_turns(user: str, session_id: str, *, limit: int | None) -> Call[m.SessionTurns]:
    return Call(
        "GET",
        "/v1/users/{user}/sessions/{session_id}/memory",
        f"{_user(user)}/sessions/{_seg(session_id)}/memory",
        m.SessionTurns.from_json,
        params={"limit": str(limit)} if limit is not None else None,
    )


def clear_session(user: str, session_id: str, *, request_id: str | None) -> Call[m.Deleted]:
    rid = _rid(request_id)
    return Call(
        "DELETE",
        "/v1/users/{user}/sessions/{session_id}/memory",
        f"{_user(user)}/sessions/{_seg(session_id)}/memory",
        m.Deleted.from_json,
        headers={"idempotency-key": rid},
        request_id=rid,
    )


def forget_user(user: str) -> Call[m.Forgotten]:
    # Forgetting twice leaves what forgetting once does: idempotent without a request id.
    return Call("DELETE", "/v1/users/{user}", _user(user), m.Forgotten.from_json)


def prewarm(user: str) -> Call[list[m.Intent]]:
    return Call("POST", "/v1/users/{user}/prewarm", f"{_user(user)}/prewarm", intents_from_json)


# --- intents (the seed-compatible endpoints) -------------------------------------------------


def write_intent(
    user: str, intent_type: str, fields: Mapping[str, Any], *, request_id: str | None
) -> Call[m.IntentWriteAck]:
    rid = _rid(request_id)
    body = {"user_id": user, "request_id": rid, "intent_type": intent_type, "fields": dict(fields)}
    return Call("POST", "/write", "/write", m.IntentWriteAck.from_json, body=body, request_id=rid)


def distil_message(user: str, message: str, *, request_id: str | None) -> Call[m.IntentWriteAck]:
    rid = _rid(request_id)
    body = {"user_id": user, "request_id": rid, "message": message}
    return Call("POST", "/write", "/write", m.IntentWriteAck.from_json, body=body, request_id=rid)


def recall_intent(
    user: str,
    intent_type: str,
    *,
    all_versions: bool,
    limit: int | None,
    before: int | None,
) -> Call[m.Recall]:
    params = {"user_id": user, "intent_type": intent_type}
    if all_versions:
        params["all"] = "true"
        if limit is not None:
            params["limit"] = str(limit)
        if before is not None:
            params["before"] = str(before)
    elif limit is not None or before is not None:
        raise ValueError("limit and before page through every version: pass all_versions=True")
    return Call("GET", "/recall", "/recall", m.Recall.from_json, params=params)


# --- admin -----------------------------------------------------------------------------------


def create_key(scope: m.Scope, *, name: str | None) -> Call[m.NewKey]:
    # Not idempotent: a retry after the node made the key would make a second one.
    return Call(
        "POST",
        "/v1/admin/keys",
        "/v1/admin/keys",
        m.NewKey.from_json,
        body=_compact({"scope": scope, "name": name}),
        idempotent=False,
    )


def list_keys() -> Call[list[m.ApiKey]]:
    return Call("GET", "/v1/admin/keys", "/v1/admin/keys", keys_from_json)


def rotate_key(key_id: str, *, grace_seconds: int | None) -> Call[m.NewKey]:
    return Call(
        "POST",
        "/v1/admin/keys/{key_id}/rotate",
        f"/v1/admin/keys/{_seg(key_id)}/rotate",
        m.NewKey.from_json,
        body=_compact({"grace_seconds": grace_seconds}),
        idempotent=False,
    )


def revoke_key(key_id: str) -> Call[m.ApiKey]:
    return Call(
        "DELETE",
        "/v1/admin/keys/{key_id}",
        f"/v1/admin/keys/{_seg(key_id)}",
        m.ApiKey.from_json,
    )


def audit(
    *,
    user: str | None,
    principal: str | None,
    from_ms: int | None,
    to_ms: int | None,
    limit: int | None,
) -> Call[m.AuditPage]:
    raw = {"user": user, "principal": principal, "from": from_ms, "to": to_ms, "limit": limit}
    params = {k: str(v) for k, v in raw.items() if v is not None}
    return Call(
        "GET",
        "/v1/admin/audit",
        "/v1/admin/audit",
        m.AuditPage.from_json,
        params=params or None,
    )


# --- the tenant's shared sets: the SQL cache -------------------------------------------------


def sql_cache_lookup(question: str, *, route: str, domain: str) -> Call[m.SqlLookup]:
    return Call(
        "POST",
        "/v1/sql-cache/lookup",
        "/v1/sql-cache/lookup",
        m.SqlLookup.from_json,
        body={"question": question, "route": route, "domain": domain},
    )


def sql_cache_put(
    question: str, sql: str, *, route: str, domain: str, request_id: str | None
) -> Call[m.SqlCacheAck]:
    rid = _rid(request_id)
    body = {"request_id": rid, "question": question, "route": route, "domain": domain, "sql": sql}
    return Call(
        "POST", "/v1/sql-cache", "/v1/sql-cache", m.SqlCacheAck.from_json, body=body, request_id=rid
    )


def sql_cache_invalidate(table: str, *, request_id: str | None) -> Call[m.Invalidation]:
    rid = _rid(request_id)
    return Call(
        "POST",
        "/v1/sql-cache/invalidate",
        "/v1/sql-cache/invalidate",
        m.Invalidation.from_json,
        body={"request_id": rid, "table": table},
        request_id=rid,
    )


# --- the tenant's shared sets: the few-shot library ------------------------------------------


def _example(example_id: str) -> str:
    return f"/v1/few-shot/examples/{_seg(example_id)}"


def _admin_example(example_id: str) -> str:
    return f"/v1/admin/few-shot/examples/{_seg(example_id)}"


def record_success(
    question: str, sql: str, *, route: str, confidence: float, request_id: str | None
) -> Call[m.ExampleAck]:
    rid = _rid(request_id)
    body = {
        "request_id": rid,
        "question": question,
        "sql": sql,
        "route": route,
        "confidence": confidence,
    }
    return Call(
        "POST",
        "/v1/few-shot/examples",
        "/v1/few-shot/examples",
        m.ExampleAck.from_json,
        body=body,
        request_id=rid,
    )


def search_similar(question: str, *, route: str, limit: int | None) -> Call[m.ExampleSearch]:
    return Call(
        "POST",
        "/v1/few-shot/search",
        "/v1/few-shot/search",
        m.ExampleSearch.from_json,
        body=_compact({"question": question, "route": route, "limit": limit}),
    )


def report_failure(example_id: str, *, request_id: str | None) -> Call[m.ExampleAck]:
    rid = _rid(request_id)
    return Call(
        "POST",
        "/v1/few-shot/examples/{example_id}/failure",
        f"{_example(example_id)}/failure",
        m.ExampleAck.from_json,
        body={"request_id": rid},
        request_id=rid,
    )


def list_examples(
    *,
    status: m.ExampleStatus | None,
    route: str | None,
    after: str | None,
    limit: int | None,
) -> Call[list[m.Example]]:
    raw = {"status": status, "route": route, "after": after, "limit": limit}
    params = {k: str(v) for k, v in raw.items() if v is not None}
    return Call(
        "GET",
        "/v1/admin/few-shot/examples",
        "/v1/admin/few-shot/examples",
        examples_from_json,
        params=params or None,
    )


def review_example(
    example_id: str, action: Literal["approve", "reject"], *, request_id: str | None
) -> Call[m.ExampleAck]:
    rid = _rid(request_id)
    return Call(
        "POST",
        f"/v1/admin/few-shot/examples/{{example_id}}/{action}",
        f"{_admin_example(example_id)}/{action}",
        m.ExampleAck.from_json,
        body={"request_id": rid},
        request_id=rid,
    )


def edit_example(
    example_id: str, *, question: str | None, sql: str | None, request_id: str | None
) -> Call[m.ExampleAck]:
    rid = _rid(request_id)
    return Call(
        "PATCH",
        "/v1/admin/few-shot/examples/{example_id}",
        _admin_example(example_id),
        m.ExampleAck.from_json,
        body=_compact({"request_id": rid, "question": question, "sql": sql}),
        request_id=rid,
    )


def _text(value: str) -> str:
    return value


def export_examples(*, status: m.ExampleStatus | None) -> Call[str]:
    return Call(
        "GET",
        "/v1/admin/few-shot/export",
        "/v1/admin/few-shot/export",
        _text,
        params={"status": status} if status is not None else None,
        headers={"accept": "application/yaml, application/json"},
        text=True,
    )


def import_examples(yaml_text: str | bytes, *, request_id: str | None) -> Call[m.ImportAck]:
    rid = _rid(request_id)
    content = yaml_text.encode("utf-8") if isinstance(yaml_text, str) else bytes(yaml_text)
    return Call(
        "POST",
        "/v1/admin/few-shot/import",
        "/v1/admin/few-shot/import",
        m.ImportAck.from_json,
        params={"request_id": rid},
        headers={"content-type": "application/yaml"},
        content=content,
        request_id=rid,
    )


def shared_settings() -> Call[m.SharedSettings]:
    return Call(
        "GET",
        "/v1/admin/shared/settings",
        "/v1/admin/shared/settings",
        m.SharedSettings.from_json,
    )


def set_shared_settings(
    settings: m.SharedSettings, *, request_id: str | None
) -> Call[m.SharedSettings]:
    rid = _rid(request_id)
    return Call(
        "PUT",
        "/v1/admin/shared/settings",
        "/v1/admin/shared/settings",
        m.SharedSettings.from_json,
        body={"request_id": rid, "settings": settings.to_json()},
        request_id=rid,
    )


# --- probes ----------------------------------------------------------------------------------


def health() -> Call[None]:
    return Call("GET", "/health", "/health", _ignore)


def ready() -> Call[None]:
    return Call("GET", "/ready", "/ready", _ignore, retry=False)
