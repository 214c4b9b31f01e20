"""Every method family of the sync client against a real node: what it sends is accepted
and what comes back is typed and says what the node did."""

from __future__ import annotations

import importlib.metadata

from conftest import eventually, unique

import engram_client
from engram_client import (
    Choice,
    Context,
    Engram,
    Forbidden,
    Memory,
    NotFound,
    TurnAck,
    Unauthorized,
)


def test_the_installed_distribution_is_this_package() -> None:
    assert importlib.metadata.version("engram-client") == engram_client.__version__


def test_probes(gateway: Engram) -> None:
    assert gateway.health() is True
    assert gateway.ready() is True


def test_turns_feedback_and_context(gateway: Engram) -> None:
    user, session = unique("u"), unique("s")
    first = gateway.append_turn(
        user,
        "Show the orders of East China in October from dw_orders with amount over 1000",
        "Found 1,284 orders of East China in October with amount over 1000 (dw_orders).",
        session_id=session,
        route="nl2sql_query",
        trace_id="trace-1",
    )
    assert isinstance(first, TurnAck)
    assert (first.written, first.seq, first.session_id, first.replayed) == (
        True,
        0,
        session,
        False,
    )
    assert "dw_orders" in first.entities
    assert any(c.kind == "episodic" and c.action == "created" for c in first.memories)

    second = gateway.append_turn(
        user, "what about their total amount?", "15.2M in total.", session_id=session
    )
    assert second.seq == 1

    fb = gateway.feedback(
        user,
        1,
        "dislike",
        session_id=session,
        corrected_sql="select sum(amount) from dw_orders where region = 'East China'",
        comment="sum the amount column",
    )
    assert [(c.kind, c.action) for c in fb.memories] == [("correction", "created")]
    assert fb.replayed is False

    ctx = gateway.context(user, session_id=session, query="and in November?", route="nl2sql_query")
    assert isinstance(ctx, Context)
    assert [t.seq for t in ctx.recent_turns] == [0, 1]
    for condition in ("East China", "October", "dw_orders"):
        assert condition in ctx.text
    assert ctx.tokens <= ctx.token_budget
    assert ctx.route == "nl2sql_query"
    [correction] = ctx.corrections
    assert correction.corrected_sql is not None and "sum(amount)" in correction.corrected_sql
    assert correction.status == "candidate"
    assert "dw_orders" in ctx.entities

    small = gateway.context(user, session_id=session, token_budget=64)
    assert (small.token_budget, small.truncated) == (64, True)
    assert small.dropped and small.tokens <= 64


def test_a_failed_turn_is_not_written(gateway: Engram) -> None:
    user = unique("u")
    ack = gateway.append_turn(user, "drop everything", "error", success=False)
    assert ack.written is False and ack.seq is None


def test_memories_write_list_search_status_and_upsert(gateway: Engram) -> None:
    user = unique("u")
    made = gateway.write_memory(
        user,
        "profile",
        "prefers weekly granularity for revenue reports",
        payload={"topic": "granularity", "value": "weekly"},
        status="active",
        confidence=0.9,
        salience=0.7,
        source_agent="pytest",
    )
    memory = made.memory
    assert isinstance(memory, Memory)
    assert (made.action, made.replayed) == ("created", False)
    assert (memory.kind, memory.status, memory.confidence) == ("profile", "active", 0.9)
    assert memory.payload == {"topic": "granularity", "value": "weekly"}
    assert memory.trigger == "Api"

    episodic = gateway.write_memory(user, "episodic", "asked about churn of Q3 cohorts")
    assert episodic.memory.status == "candidate"

    listed = gateway.list_memories(user)
    assert {m.memory_id for m in listed} == {memory.memory_id, episodic.memory.memory_id}
    assert all(m.entities is not None for m in listed), "listed memories carry entities"
    assert memory.entities is None, "a write's answer does not"
    profiles = gateway.list_memories(user, kind="profile")
    assert [m.memory_id for m in profiles] == [memory.memory_id]

    def found() -> list[str] | None:
        hits = gateway.search_memories(user, "weekly granularity revenue", k=5).hits
        return [h.memory.memory_id for h in hits] or None

    assert eventually("the memory is searchable", found)[0] == memory.memory_id
    only_active = gateway.search_memories(user, "churn cohorts", active_only=True, mode="bm25")
    assert all(h.memory.status == "active" for h in only_active.hits)
    assert episodic.memory.memory_id not in [h.memory.memory_id for h in only_active.hits]
    by_kind = gateway.search_memories(user, "churn cohorts", kinds=["episodic"])
    assert [h.memory.memory_id for h in by_kind.hits] == [episodic.memory.memory_id]
    assert by_kind.hits[0].score > 0
    reranked = gateway.search_memories(user, "churn cohorts", kinds=["episodic"], rerank=True)
    assert (reranked.reranked, reranked.rerank_fallback) == (True, None)
    assert [h.memory.memory_id for h in reranked.hits] == [episodic.memory.memory_id]
    assert not by_kind.reranked, "not asked, not reranked"

    suppressed = gateway.set_memory_status(user, memory.memory_id, "suppressed")
    assert suppressed.memory.status == "suppressed"
    assert suppressed.memory.valid_to is not None
    back = gateway.set_memory_status(user, memory.memory_id, "active")
    assert back.memory.status == "active"

    replaced = gateway.write_memory(
        user, "profile", "prefers monthly granularity", memory_id="pinned-1", status="active"
    )
    assert replaced.memory.memory_id == "pinned-1"
    again = gateway.write_memory(
        user, "profile", "prefers daily granularity", memory_id="pinned-1", status="active"
    )
    assert again.memory.memory_id == "pinned-1"
    texts = {m.memory_id: m.text for m in gateway.list_memories(user)}
    assert texts["pinned-1"] == "prefers daily granularity"

    deleted = gateway.set_memory_status(user, episodic.memory.memory_id, "deleted")
    assert deleted.memory.status == "deleted"


def test_conflicts_are_listed_and_resolved(gateway: Engram) -> None:
    user, session = unique("u"), unique("s")
    gateway.append_turn(user, "I prefer bar charts", "Noted.", session_id=session)
    for _ in range(3):
        ack = gateway.append_turn(
            user,
            "show sales by region",
            "Here they are.",
            session_id=session,
            choices=[Choice("pie", topic="chart_type")],
        )
    assert any(c.action == "flagged" for c in ack.memories)
    [flag] = gateway.list_conflicts(user)
    assert flag.reason
    settled = gateway.resolve_conflict(user, flag.flag_id, "keep_new")
    assert (settled.flag_id, settled.resolution, settled.replayed) == (
        flag.flag_id,
        "keep_new",
        False,
    )
    statuses = {m.memory_id: m.status for m in settled.memories}
    assert statuses == {flag.memory_id: "active", flag.conflicts_with: "suppressed"}
    assert gateway.list_conflicts(user) == []


def test_sessions_list_read_and_clear(gateway: Engram) -> None:
    user, session = unique("u"), unique("s")
    for i in range(3):
        gateway.append_turn(user, f"question number {i} about dw_orders", "ok", session_id=session)
    [listed] = gateway.list_sessions(user)
    assert (listed.session_id, listed.turn_count) == (session, 3)
    assert listed.title is not None and listed.title.startswith("question number 0")

    newest = gateway.session_turns(user, session, limit=2)
    assert newest.session.session_id == session
    assert [t.seq for t in newest.turns] == [1, 2]
    assert newest.turns[0].user_text == "question number 1 about dw_orders"
    assert newest.turns[0].entities == ["dw_orders"]

    cleared = gateway.clear_session(user, session, request_id="clear-1")
    assert (cleared.deleted, cleared.replayed) == (3, False)
    again = gateway.clear_session(user, session, request_id="clear-1")
    assert (again.deleted, again.replayed) == (3, True)


def test_intents_write_recall_distil_and_prewarm(gateway: Engram) -> None:
    user = unique("u")
    wrote = gateway.write_intent(user, "appointment", {"target": "dentist", "time": "tomorrow"})
    assert wrote.intent_type == "appointment" and wrote.version is not None
    recalled = gateway.recall_intent(user, "appointment")
    assert (recalled.target_value, recalled.version) == ("dentist", wrote.version)
    assert [i.fields for i in recalled.intents] == [{"target": "dentist", "time": "tomorrow"}]

    later = gateway.write_intent(user, "appointment", {"target": "optician"})
    assert later.version is not None and later.version > wrote.version
    every = gateway.recall_intent(user, "appointment", all_versions=True, limit=1)
    assert [i.version for i in every.intents] == [later.version]
    assert every.next_before == later.version
    rest = gateway.recall_intent(
        user, "appointment", all_versions=True, limit=1, before=every.next_before
    )
    assert [i.version for i in rest.intents] == [wrote.version]

    distilled = gateway.distil_message(user, "please cancel my gym subscription")
    assert [i.intent_type for i in distilled.intents] == ["subscription_cancel"]
    assert distilled.intent_type is None and distilled.replayed is False
    cancelled = gateway.recall_intent(user, "subscription_cancel")
    assert cancelled.target_value == {"product": "gym subscription", "cycle": None}

    current = gateway.prewarm(user)
    types = {i.intent_type for i in current}
    assert {"appointment", "subscription_cancel"} <= types
    assert all(i.active for i in current)


def test_keys_are_made_listed_rotated_and_revoked(url: str, admin: Engram) -> None:
    made = admin.create_key("gateway", name="rotating")
    assert made.key.scope == "gateway" and made.token.startswith(f"egk_{made.key.key_id}_")
    assert made.token not in repr(made)
    listed = {k.key_id: k for k in admin.list_keys()}
    assert listed[made.key.key_id].name == "rotating"

    with Engram(url, made.token) as old:
        assert old.list_sessions(unique("u")) == []
        rotated = admin.rotate_key(made.key.key_id, grace_seconds=600)
        assert rotated.key.key_id != made.key.key_id
        assert old.list_sessions(unique("u")) == [], "the old key works within its grace"
        revoked = admin.revoke_key(made.key.key_id)
        assert revoked.key_id == made.key.key_id and revoked.expires_at is not None

        def refused() -> Unauthorized | None:
            try:
                old.list_sessions(unique("u"))
            except Unauthorized as e:
                return e
            return None

        assert eventually("the revoked key is refused", refused).code == "unauthenticated"
    with Engram(url, rotated.token) as new:
        assert new.list_sessions(unique("u")) == []


def test_forget_user_and_audit(gateway: Engram, admin: Engram) -> None:
    user = unique("u")
    gateway.append_turn(user, "I prefer line charts", "Noted.")
    with_forbidden = None
    try:
        gateway.forget_user(user)
    except Forbidden as e:
        with_forbidden = e
    assert with_forbidden is not None and with_forbidden.code == "forbidden"

    forgotten = admin.forget_user(user)
    assert forgotten.records >= 2
    assert admin.list_memories(user) == []
    assert admin.list_sessions(user) == []

    page = admin.audit(user=user, limit=100)
    actions = [e.action for e in page.entries]
    assert "turn.append" in actions and "user.forget" in actions
    assert all(e.user != user for e in page.entries), "the trail names users by pseudonym"


def test_a_settled_flag_and_an_unknown_session_are_not_found(gateway: Engram) -> None:
    user = unique("u")
    gateway.append_turn(user, "hello", "hi", session_id="s1")
    for call in (
        lambda: gateway.session_turns(user, "no-such-session"),
        lambda: gateway.resolve_conflict(user, "no-such-flag", "keep_old"),
        lambda: gateway.feedback(user, 99, "like", session_id="s1"),
    ):
        try:
            call()
        except NotFound as e:
            assert (e.status, e.code) == (404, "not_found")
        else:
            raise AssertionError("expected NotFound")
