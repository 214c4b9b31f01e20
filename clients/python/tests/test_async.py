"""The async client against the real node: each method family, concurrent calls, errors."""

from __future__ import annotations

import asyncio

import pytest
from conftest import Keys, unique

from engram_client import AsyncEngram, BadRequest, NotFound, Unauthorized


async def test_conversation_memories_and_sessions(agateway: AsyncEngram) -> None:
    user, session = unique("u"), unique("s")
    first = await agateway.append_turn(
        user,
        "Show the GMV of East China in October from dw_orders, by week",
        "GMV of East China in October (dw_orders): 12.8M.",
        session_id=session,
        route="nl2sql_query",
    )
    assert (first.written, first.seq) == (True, 0)
    fb = await agateway.feedback(user, 0, "like", session_id=session)
    assert fb.replayed is False
    ctx = await agateway.context(user, session_id=session, query="what about November?")
    assert "East China" in ctx.text and [t.seq for t in ctx.recent_turns] == [0]

    made = await agateway.write_memory(user, "profile", "prefers bar charts", status="active")
    listed = await agateway.list_memories(user, kind="profile")
    assert [m.memory_id for m in listed] == [made.memory.memory_id]
    hits = (await agateway.search_memories(user, "bar charts", k=3)).hits
    assert hits and hits[0].memory.memory_id == made.memory.memory_id
    suppressed = await agateway.set_memory_status(user, made.memory.memory_id, "suppressed")
    assert suppressed.memory.status == "suppressed"
    assert await agateway.list_conflicts(user) == []

    [s] = await agateway.list_sessions(user)
    assert (s.session_id, s.turn_count) == (session, 1)
    turns = await agateway.session_turns(user, session)
    assert [t.seq for t in turns.turns] == [0]
    cleared = await agateway.clear_session(user, session)
    assert cleared.deleted == 1


async def test_intents_keys_forget_and_probes(
    url: str, keys: Keys, agateway: AsyncEngram, aadmin: AsyncEngram
) -> None:
    user = unique("u")
    wrote = await agateway.write_intent(user, "appointment", {"target": "dentist"})
    recalled = await agateway.recall_intent(user, "appointment")
    assert (recalled.target_value, recalled.version) == ("dentist", wrote.version)
    distilled = await agateway.distil_message(user, "I want to cancel my subscription")
    assert distilled.intents
    assert {i.intent_type for i in await agateway.prewarm(user)} >= {"appointment"}

    made = await aadmin.create_key("gateway", name="async")
    assert made.key.key_id in {k.key_id for k in await aadmin.list_keys()}
    rotated = await aadmin.rotate_key(made.key.key_id)
    assert rotated.key.key_id != made.key.key_id
    assert (await aadmin.revoke_key(rotated.key.key_id)).key_id == rotated.key.key_id
    async with AsyncEngram(url, rotated.token) as revoked:
        with pytest.raises(Unauthorized):
            await revoked.list_sessions(user)

    assert (await aadmin.forget_user(user)).records >= 0
    assert await aadmin.list_memories(user) == []
    page = await aadmin.audit(limit=5)
    assert len(page.entries) == 5 and page.next_from is not None
    assert await agateway.health() and await agateway.ready()


async def test_concurrent_calls_share_one_client(agateway: AsyncEngram) -> None:
    users = [unique("u") for _ in range(8)]
    acks = await asyncio.gather(
        *(agateway.append_turn(u, f"turn of {u}", "ok", session_id="s") for u in users)
    )
    assert [a.seq for a in acks] == [0] * len(users)
    sessions = await asyncio.gather(*(agateway.list_sessions(u) for u in users))
    assert all(len(s) == 1 and s[0].turn_count == 1 for s in sessions)


async def test_errors_map_to_the_same_exceptions(agateway: AsyncEngram) -> None:
    user = unique("u")
    with pytest.raises(NotFound) as missing:
        await agateway.session_turns(user, "nothing-here")
    assert missing.value.code == "not_found"
    with pytest.raises(BadRequest) as bad:
        await agateway.search_memories(user, "x", mode="fuzzy")  # type: ignore[arg-type]
    assert (bad.value.code, bad.value.status) == ("invalid_input", 400)
    assert "mode" in bad.value.message
