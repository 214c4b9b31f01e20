"""The synchronous client, :class:`Engram`, over ``httpx.Client``.

Every method builds its call in ``_calls`` and sends it here, retrying as ``retry`` says;
:class:`~engram_client.aio.AsyncEngram` has the same methods, awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from . import _calls
from . import models as m
from ._base import DEFAULT_TIMEOUT, Settings
from ._calls import Call, answer
from .errors import ApiError, Unavailable
from .retry import RetryEvent, RetryPolicy

__all__ = ["Engram"]

T = TypeVar("T")


class Engram:
    """A client of one Engram node (any node of a cluster serves any user).

    ``base_url`` and ``api_key`` default to ``ENGRAM_URL`` and ``ENGRAM_API_KEY``. ``tenant``
    is sent as ``x-engram-tenant`` (the root admin key names the tenant it acts for; a tenant's
    key needs none). Writes carry a request id, generated unless given, which stays the same
    across the client's retries (``retry``: 429 and 503 honouring ``Retry-After``, and lost
    connections). Errors raise :class:`~engram_client.errors.EngramError` subclasses.

    ``transport`` replaces httpx's (tests, proxies); ``sleep`` replaces ``time.sleep``
    between attempts; ``on_retry`` is called before each retry. Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        tenant: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._settings = Settings(
            base_url,
            api_key,
            tenant=tenant,
            timeout=timeout,
            retry=retry,
            headers=headers,
            on_retry=on_retry,
        )
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._http.close()

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(**self._settings.request_args(call))
            except httpx.TransportError as e:
                self._sleep(self._settings.after_no_answer(call, attempt, e))
                continue
            try:
                return answer(call, response.status_code, response.headers, response.content)
            except ApiError as e:
                wait = self._settings.after_error(call, attempt, e)
                if wait is None:
                    raise
            self._sleep(wait)

    # --- conversation ------------------------------------------------------------------------

    def append_turn(
        self,
        user: str,
        user_text: str,
        assistant_text: str = "",
        *,
        session_id: str | None = None,
        route: m.Route | None = None,
        success: bool = True,
        choices: Sequence[m.Choice] | None = None,
        clarification: m.Clarification | None = None,
        trace_id: str | None = None,
        request_id: str | None = None,
    ) -> m.TurnAck:
        """Appends a conversation turn (``success=False`` turns are not written); forms
        memories and distils the user's text."""
        return self._run(
            _calls.append_turn(
                user,
                user_text,
                assistant_text,
                session_id=session_id,
                route=route,
                success=success,
                choices=choices,
                clarification=clarification,
                trace_id=trace_id,
                request_id=request_id,
            )
        )

    def feedback(
        self,
        user: str,
        turn_seq: int,
        rating: m.Rating,
        *,
        session_id: str | None = None,
        corrected_sql: str | None = None,
        comment: str | None = None,
        trace_id: str | None = None,
        request_id: str | None = None,
    ) -> m.FeedbackAck:
        """Likes or dislikes a turn; a dislike with ``corrected_sql`` and ``comment`` forms a
        correction."""
        return self._run(
            _calls.feedback(
                user,
                turn_seq,
                rating,
                session_id=session_id,
                corrected_sql=corrected_sql,
                comment=comment,
                trace_id=trace_id,
                request_id=request_id,
            )
        )

    def context(
        self,
        user: str,
        *,
        session_id: str | None = None,
        query: str | None = None,
        route: m.Route | None = None,
        token_budget: int | None = None,
        shared: m.SharedAsk | None = None,
    ) -> m.Context:
        """The memory context for the next LLM call (``text`` goes into the prompt); with
        ``shared``, also the tenant's served examples and cached SQL (``Context.shared``)."""
        return self._run(
            _calls.context(
                user,
                session_id=session_id,
                query=query,
                route=route,
                token_budget=token_budget,
                shared=shared,
            )
        )

    # --- memories ----------------------------------------------------------------------------

    def write_memory(
        self,
        user: str,
        kind: m.Kind,
        text: str,
        *,
        memory_id: str | None = None,
        payload: Mapping[str, Any] | None = None,
        status: m.Status | None = None,
        namespace: str | None = None,
        scope: str | None = None,
        confidence: float | None = None,
        salience: float | None = None,
        valid_from: int | None = None,
        valid_to: int | None = None,
        session_id: str | None = None,
        source_route: str | None = None,
        source_agent: str | None = None,
        trace_id: str | None = None,
        request_id: str | None = None,
    ) -> m.MemoryAck:
        """Writes a memory (a candidate unless ``status="active"``), resolving conflicts; with
        ``memory_id``, creates or replaces the memory of that id."""
        return self._run(
            _calls.write_memory(
                user,
                kind,
                text,
                memory_id=memory_id,
                payload=payload,
                status=status,
                namespace=namespace,
                scope=scope,
                confidence=confidence,
                salience=salience,
                valid_from=valid_from,
                valid_to=valid_to,
                session_id=session_id,
                source_route=source_route,
                source_agent=source_agent,
                trace_id=trace_id,
                request_id=request_id,
            )
        )

    def list_memories(self, user: str, *, kind: m.Kind | None = None) -> list[m.Memory]:
        """The user's memories, of one kind or all, by id."""
        return self._run(_calls.list_memories(user, kind=kind))

    def search_memories(
        self,
        user: str,
        query: str,
        *,
        k: int | None = None,
        kinds: Sequence[m.Kind] | None = None,
        mode: m.SearchMode | None = None,
        active_only: bool | None = None,
        rerank: bool | None = None,
    ) -> m.SearchResult:
        """Searches the user's live memories; hits best first. ``rerank`` asks the node's
        English cross-encoder to reorder the first candidates (``reranked`` says whether it
        did, ``rerank_fallback`` why not)."""
        return self._run(
            _calls.search_memories(
                user,
                query,
                k=k,
                kinds=kinds,
                mode=mode,
                active_only=active_only,
                rerank=rerank,
            )
        )

    def set_memory_status(
        self,
        user: str,
        memory_id: str,
        status: m.Status,
        *,
        request_id: str | None = None,
    ) -> m.MemoryAck:
        """Activates, suppresses or deletes a memory."""
        return self._run(_calls.set_memory_status(user, memory_id, status, request_id=request_id))

    def list_conflicts(self, user: str) -> list[m.Conflict]:
        """Contradictions flagged for review."""
        return self._run(_calls.list_conflicts(user))

    def resolve_conflict(
        self,
        user: str,
        flag_id: str,
        resolution: m.Resolution,
        *,
        request_id: str | None = None,
    ) -> m.ConflictResolution:
        """Settles a flagged contradiction: ``keep_old``, ``keep_new`` or ``keep_both``."""
        return self._run(_calls.resolve_conflict(user, flag_id, resolution, request_id=request_id))

    # --- sessions and users ------------------------------------------------------------------

    def list_sessions(self, user: str) -> list[m.Session]:
        """The user's sessions, with their titles."""
        return self._run(_calls.list_sessions(user))

    def session_turns(
        self, user: str, session_id: str, *, limit: int | None = None
    ) -> m.SessionTurns:
        """A session's newest ``limit`` turns (default 50, at most 500), oldest first."""
        return self._run(_calls.session_turns(user, session_id, limit=limit))

    def clear_session(
        self, user: str, session_id: str, *, request_id: str | None = None
    ) -> m.Deleted:
        """Deletes a session's turns (the request id travels as ``Idempotency-Key``)."""
        return self._run(_calls.clear_session(user, session_id, request_id=request_id))

    def forget_user(self, user: str) -> m.Forgotten:
        """Forgets the user: every key, index entry and cached state (admin keys)."""
        return self._run(_calls.forget_user(user))

    def prewarm(self, user: str) -> list[m.Intent]:
        """Pre-warm at login: starts the user's actor and returns the latest three current
        intents of the key types."""
        return self._run(_calls.prewarm(user))

    # --- intents -----------------------------------------------------------------------------

    def write_intent(
        self,
        user: str,
        intent_type: str,
        fields: Mapping[str, Any],
        *,
        request_id: str | None = None,
    ) -> m.IntentWriteAck:
        """Records a new version of a distilled intent (``POST /write``); earlier active
        versions become inactive."""
        return self._run(_calls.write_intent(user, intent_type, fields, request_id=request_id))

    def distil_message(
        self, user: str, message: str, *, request_id: str | None = None
    ) -> m.IntentWriteAck:
        """Distils a user's message into intents (``POST /write``): the rules' at once, the
        model's in the background (``distilling``)."""
        return self._run(_calls.distil_message(user, message, request_id=request_id))

    def recall_intent(
        self,
        user: str,
        intent_type: str,
        *,
        all_versions: bool = False,
        limit: int | None = None,
        before: int | None = None,
    ) -> m.Recall:
        """The current version of an intent type (``GET /recall``); with ``all_versions``, a
        page of every version, newest first (``limit``, ``before``)."""
        return self._run(
            _calls.recall_intent(
                user, intent_type, all_versions=all_versions, limit=limit, before=before
            )
        )

    # --- admin -------------------------------------------------------------------------------

    def create_key(self, scope: m.Scope, *, name: str | None = None) -> m.NewKey:
        """Makes an API key of the tenant (admin keys); its token is in the answer only."""
        return self._run(_calls.create_key(scope, name=name))

    def list_keys(self) -> list[m.ApiKey]:
        """The tenant's keys, never their secrets."""
        return self._run(_calls.list_keys())

    def rotate_key(self, key_id: str, *, grace_seconds: int | None = None) -> m.NewKey:
        """Replaces a key by a new one; the old one keeps working ``grace_seconds``."""
        return self._run(_calls.rotate_key(key_id, grace_seconds=grace_seconds))

    def revoke_key(self, key_id: str) -> m.ApiKey:
        """Revokes a key at once (idempotent)."""
        return self._run(_calls.revoke_key(key_id))

    def audit(
        self,
        *,
        user: str | None = None,
        principal: str | None = None,
        from_ms: int | None = None,
        to_ms: int | None = None,
        limit: int | None = None,
    ) -> m.AuditPage:
        """The tenant's audit trail, oldest first (admin keys)."""
        return self._run(
            _calls.audit(user=user, principal=principal, from_ms=from_ms, to_ms=to_ms, limit=limit)
        )

    # --- the tenant's shared sets: the SQL cache ---------------------------------------------

    def sql_cache_lookup(self, question: str, *, route: str, domain: str) -> m.SqlLookup:
        """The cached SQL of the closest question of the same route and domain, when it is
        similar and young enough (``hit`` is ``None`` on a miss)."""
        return self._run(_calls.sql_cache_lookup(question, route=route, domain=domain))

    def sql_cache_put(
        self,
        question: str,
        sql: str,
        *,
        route: str,
        domain: str,
        request_id: str | None = None,
    ) -> m.SqlCacheAck:
        """Caches the SQL that answered a question (never its results), replacing the entry of
        the same question."""
        return self._run(
            _calls.sql_cache_put(question, sql, route=route, domain=domain, request_id=request_id)
        )

    def sql_cache_invalidate(self, table: str, *, request_id: str | None = None) -> m.Invalidation:
        """A table's schema changed: drops every cached SQL that mentions it."""
        return self._run(_calls.sql_cache_invalidate(table, request_id=request_id))

    # --- the tenant's shared sets: the few-shot library --------------------------------------

    def record_success(
        self,
        question: str,
        sql: str,
        *,
        route: str,
        confidence: float,
        request_id: str | None = None,
    ) -> m.ExampleAck:
        """Records a question and the SQL that answered it well: a new example waits for
        review (``pending_review``), a known one counts one more success."""
        return self._run(
            _calls.record_success(
                question, sql, route=route, confidence=confidence, request_id=request_id
            )
        )

    def search_similar(
        self, question: str, *, route: str, limit: int | None = None
    ) -> m.ExampleSearch:
        """The approved examples of the route closest to a question, best first (at most
        ``limit``, 1 to 3; default 3)."""
        return self._run(_calls.search_similar(question, route=route, limit=limit))

    def report_failure(self, example_id: str, *, request_id: str | None = None) -> m.ExampleAck:
        """Counts a failure of an example; the fourth removes it (``removed``)."""
        return self._run(_calls.report_failure(example_id, request_id=request_id))

    def list_examples(
        self,
        *,
        status: m.ExampleStatus | None = None,
        route: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[m.Example]:
        """The tenant's examples in id order (admin keys); ``status="pending_review"`` is the
        review queue, ``after`` the last id of the previous page."""
        return self._run(_calls.list_examples(status=status, route=route, after=after, limit=limit))

    def approve_example(self, example_id: str, *, request_id: str | None = None) -> m.ExampleAck:
        """Approves an example: it is served from now on (admin keys)."""
        return self._run(_calls.review_example(example_id, "approve", request_id=request_id))

    def reject_example(self, example_id: str, *, request_id: str | None = None) -> m.ExampleAck:
        """Rejects an example: it is never served (admin keys)."""
        return self._run(_calls.review_example(example_id, "reject", request_id=request_id))

    def edit_example(
        self,
        example_id: str,
        *,
        question: str | None = None,
        sql: str | None = None,
        request_id: str | None = None,
    ) -> m.ExampleAck:
        """Edits an example's question or SQL; its status stays (admin keys)."""
        return self._run(
            _calls.edit_example(example_id, question=question, sql=sql, request_id=request_id)
        )

    def export_examples(self, *, status: m.ExampleStatus | None = None) -> str:
        """The tenant's examples (of one status, or all) as the YAML document the node writes
        (admin keys)."""
        return self._run(_calls.export_examples(status=status))

    def import_examples(
        self, yaml_text: str | bytes, *, request_id: str | None = None
    ) -> m.ImportAck:
        """Imports examples from a YAML document as :meth:`export_examples` returns it (at
        most 1,000; admin keys), each with the status and counts it gives."""
        return self._run(_calls.import_examples(yaml_text, request_id=request_id))

    def shared_settings(self) -> m.SharedSettings:
        """The tenant's settings of its shared sets (admin keys)."""
        return self._run(_calls.shared_settings())

    def set_shared_settings(
        self, settings: m.SharedSettings, *, request_id: str | None = None
    ) -> m.SharedSettings:
        """Replaces the tenant's settings of its shared sets (admin keys); answers them as
        stored."""
        return self._run(_calls.set_shared_settings(settings, request_id=request_id))

    # --- probes ------------------------------------------------------------------------------

    def health(self) -> bool:
        """True when the node's process answers (``/health``); raises when it does not."""
        self._run(_calls.health())
        return True

    def ready(self) -> bool:
        """Whether the node is ready (``/ready``: its storage answers); not retried."""
        try:
            self._run(_calls.ready())
        except Unavailable:
            return False
        return True
