"""The tenant's shared sets (the SQL cache, the few-shot library, their settings and the
context's shared part) with both clients against the real node.

The suite's node runs without an encoder, so a question matches only the same normalised
question (trimmed, whitespace collapsed, lower case, trailing ``?`` removed), with similarity
1: the lookups here ask the stored question in other case and spacing, never a paraphrase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from conftest import Keys, unique

from engram_client import (
    AsyncEngram,
    BadRequest,
    DomainSettings,
    Engram,
    Example,
    ExampleAck,
    Forbidden,
    NotFound,
    SharedAsk,
    SharedSettings,
    SqlCacheAck,
    SqlLookup,
)

ORDERS = "SELECT count(*) FROM sales.orders WHERE day >= current_date - 7"
ORDERS_Q = "How many orders did we get last week?"
# The same question once normalised: other case, spacing and final punctuation.
ORDERS_AGAIN = "  how many ORDERS did   we get last week "
REVENUE = "SELECT region, sum(amount) FROM sales GROUP BY region"
REVENUE_Q = "Revenue by region this quarter"


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def other_admin(url: str, root_key: str) -> Iterator[Engram]:
    """An admin key of another fresh tenant, made as the suite makes every tenant's keys."""
    with Engram(url, root_key, tenant=unique("py")) as other_root:
        token = Keys(other_root).admin
    with Engram(url, token) as client:
        yield client


def test_sql_cache_put_lookup_and_invalidate(gateway: Engram) -> None:
    put = gateway.sql_cache_put(ORDERS_Q, ORDERS, route="nl2sql", domain="sales", request_id="p1")
    assert isinstance(put, SqlCacheAck)
    assert (put.tables, put.replaced, put.replayed) == (["sales.orders"], False, False)
    assert put.expires_at > now_ms()

    found = gateway.sql_cache_lookup(ORDERS_AGAIN, route="nl2sql", domain="sales")
    assert isinstance(found, SqlLookup) and found.hit is not None
    assert (found.hit.entry_id, found.hit.sql) == (put.entry_id, ORDERS)
    assert found.hit.question == "how many orders did we get last week"
    assert found.hit.similarity == pytest.approx(1.0)
    assert 0 <= found.hit.age_ms < 60_000
    assert found.threshold == pytest.approx(0.92)
    assert found.fallback is None

    # Another domain, route or question misses.
    assert gateway.sql_cache_lookup(ORDERS_Q, route="nl2sql", domain="hr").hit is None
    assert gateway.sql_cache_lookup(ORDERS_Q, route="kpi", domain="sales").hit is None
    assert gateway.sql_cache_lookup("revenue by region", route="nl2sql", domain="sales").hit is None

    # A retry with the same request id replays; another write of the question replaces it.
    again = gateway.sql_cache_put(ORDERS_Q, ORDERS, route="nl2sql", domain="sales", request_id="p1")
    assert (again.entry_id, again.replayed) == (put.entry_id, True)
    replaced = gateway.sql_cache_put(ORDERS_AGAIN, ORDERS, route="nl2sql", domain="sales")
    assert (replaced.replaced, replaced.replayed) == (True, False)

    with pytest.raises(BadRequest) as bad:
        gateway.sql_cache_lookup("  ?? ", route="nl2sql", domain="sales")
    assert bad.value.code == "invalid_input" and "question" in bad.value.message

    dropped = gateway.sql_cache_invalidate('"ORDERS"', request_id="i1")
    assert (dropped.removed, dropped.replayed) == (1, False)
    assert gateway.sql_cache_lookup(ORDERS_Q, route="nl2sql", domain="sales").hit is None
    replayed = gateway.sql_cache_invalidate('"ORDERS"', request_id="i1")
    assert (replayed.removed, replayed.replayed) == (1, True)
    assert gateway.sql_cache_invalidate("customers").removed == 0


def test_few_shot_review_then_search(gateway: Engram, admin: Engram) -> None:
    recorded = gateway.record_success(REVENUE_Q, REVENUE, route="nl2sql", confidence=0.95)
    assert isinstance(recorded, ExampleAck) and isinstance(recorded.example, Example)
    example = recorded.example
    assert (example.status, example.successes, example.fail_count) == ("pending_review", 1, 0)
    assert (example.question, example.sql, example.route) == (
        "revenue by region this quarter",
        REVENUE,
        "nl2sql",
    )
    assert example.confidence == pytest.approx(0.95) and example.reviewed_by is None
    assert (recorded.promoted, recorded.removed, recorded.replayed) == (False, False, False)
    # The same route, question and SQL counts one more success of the same example.
    twice = gateway.record_success(REVENUE_Q.upper(), REVENUE, route="nl2sql", confidence=0.9)
    assert twice.example is not None
    assert (twice.example.example_id, twice.example.successes) == (example.example_id, 2)

    # Pending is not served.
    assert gateway.search_similar(REVENUE_Q, route="nl2sql").examples == []

    queue = admin.list_examples(status="pending_review")
    assert [e.example_id for e in queue] == [example.example_id]
    assert admin.list_examples(status="approved") == []
    assert admin.list_examples(route="kpi") == []
    assert [e.example_id for e in admin.list_examples(route="nl2sql", limit=1)] == [
        example.example_id
    ]
    assert admin.list_examples(after=example.example_id) == []

    edited = admin.edit_example(example.example_id, sql=REVENUE + " ORDER BY 2 DESC")
    assert edited.example is not None
    assert edited.example.sql.endswith("ORDER BY 2 DESC")
    assert edited.example.status == "pending_review" and edited.example.reviewed_by

    approved = admin.approve_example(example.example_id, request_id="a1")
    assert approved.example is not None and approved.example.status == "approved"
    assert admin.approve_example(example.example_id, request_id="a1").replayed is True

    served = gateway.search_similar("revenue by REGION this quarter?", route="nl2sql", limit=1)
    [hit] = served.examples
    assert hit.example.example_id == example.example_id
    assert hit.example.sql.endswith("ORDER BY 2 DESC")
    assert hit.similarity == pytest.approx(1.0) and served.fallback is None
    assert gateway.search_similar(REVENUE_Q, route="kpi").examples == []

    # A rejected example is never served.
    other = gateway.record_success(
        "top products", "SELECT 1 FROM products", route="nl2sql", confidence=0.99
    ).example
    assert other is not None
    rejected = admin.reject_example(other.example_id)
    assert rejected.example is not None and rejected.example.status == "rejected"
    assert [e.example_id for e in admin.list_examples(status="rejected")] == [other.example_id]
    assert gateway.search_similar("top products", route="nl2sql").examples == []

    with pytest.raises(NotFound):
        admin.approve_example("no-such-example")
    with pytest.raises(BadRequest):
        admin.edit_example(example.example_id)  # neither a question nor a SQL


def test_failures_are_counted_and_the_fourth_removes_the_example(
    gateway: Engram, admin: Engram
) -> None:
    example = gateway.record_success(REVENUE_Q, REVENUE, route="nl2sql", confidence=0.95).example
    assert example is not None
    admin.approve_example(example.example_id)
    for n in (1, 2, 3):
        ack = gateway.report_failure(example.example_id, request_id=f"f{n}")
        assert ack.example is not None and ack.example.fail_count == n
        assert (ack.removed, ack.replayed) == (False, False)
    # A retry of a counted failure replays; it does not count again.
    replay = gateway.report_failure(example.example_id, request_id="f3")
    assert replay.replayed is True and replay.example is not None
    assert replay.example.fail_count == 3
    # Three failures are still served; the fourth removes the example.
    assert len(gateway.search_similar(REVENUE_Q, route="nl2sql").examples) == 1
    fourth = gateway.report_failure(example.example_id, request_id="f4")
    assert (fourth.example, fourth.removed) == (None, True)
    assert gateway.search_similar(REVENUE_Q, route="nl2sql").examples == []
    assert admin.list_examples() == []
    with pytest.raises(NotFound):
        gateway.report_failure(example.example_id)


def test_export_imports_into_another_tenant(
    gateway: Engram, admin: Engram, other_admin: Engram
) -> None:
    first = gateway.record_success(REVENUE_Q, REVENUE, route="nl2sql", confidence=0.95).example
    assert first is not None
    admin.approve_example(first.example_id)
    gateway.record_success(
        "top products", "SELECT 1 FROM products", route="nl2sql", confidence=0.91
    )

    yaml = admin.export_examples()
    assert isinstance(yaml, str) and yaml.startswith("examples:")
    assert "revenue by region this quarter" in yaml and "top products" in yaml
    approved_only = admin.export_examples(status="approved")
    assert "revenue by region this quarter" in approved_only
    assert "top products" not in approved_only

    imported = other_admin.import_examples(yaml, request_id="imp1")
    assert (imported.created, imported.updated, imported.replayed) == (2, 0, False)
    assert other_admin.export_examples() == yaml, "the round trip keeps every field"
    assert other_admin.import_examples(yaml, request_id="imp1").replayed is True
    again = other_admin.import_examples(yaml.encode())
    assert (again.created, again.updated, again.replayed) == (0, 2, False)
    listed = other_admin.list_examples()
    assert {e.status for e in listed} == {"approved", "pending_review"}
    assert {e.reviewed_by for e in listed} == {"import"}
    # The other tenant serves what it imported; the first tenant's library is untouched.
    assert admin.export_examples() == yaml

    with pytest.raises(BadRequest) as broken:
        other_admin.import_examples("examples: [ {question: 1")
    assert broken.value.code == "invalid_input"


def test_settings_round_trip(gateway: Engram, admin: Engram) -> None:
    assert admin.shared_settings() == SharedSettings()
    wanted = SharedSettings(
        sql_similarity=0.9,
        sql_ttl_seconds=600,
        domains={
            "sales": DomainSettings(similarity=0.95, ttl_seconds=60),
            "hr": DomainSettings(ttl_seconds=30),
        },
        auto_promote=True,
        literal_guard=False,
    )
    stored = admin.set_shared_settings(wanted, request_id="s1")
    assert stored.sql_similarity == pytest.approx(0.9)
    assert stored.domains["sales"].similarity == pytest.approx(0.95)
    assert (stored.sql_ttl_seconds, stored.auto_promote, stored.literal_guard) == (600, True, False)
    assert (stored.domains["sales"].ttl_seconds, stored.domains["hr"]) == (
        60,
        DomainSettings(None, 30),
    )
    assert admin.shared_settings() == stored

    # A domain's lifetime and threshold apply to its entries and lookups.
    before = now_ms()
    put = gateway.sql_cache_put(ORDERS_Q, ORDERS, route="nl2sql", domain="hr")
    assert before + 29_000 <= put.expires_at <= now_ms() + 31_000
    looked = gateway.sql_cache_lookup(ORDERS_Q, route="nl2sql", domain="sales")
    assert looked.threshold == pytest.approx(0.95)

    with pytest.raises(BadRequest) as bad:
        admin.set_shared_settings(SharedSettings(sql_similarity=0.2))
    assert bad.value.code == "invalid_input"
    assert admin.shared_settings() == stored


def test_the_context_carries_the_shared_sets(gateway: Engram, admin: Engram) -> None:
    user = unique("u")
    gateway.sql_cache_put(ORDERS_Q, ORDERS, route="nl2sql", domain="sales")
    example = gateway.record_success(ORDERS_Q, ORDERS, route="nl2sql", confidence=0.97).example
    assert example is not None
    admin.approve_example(example.example_id)

    ctx = gateway.context(
        user, query=ORDERS_AGAIN, shared=SharedAsk(route="nl2sql", domain="sales")
    )
    assert ctx.shared is not None
    assert ctx.shared.cached_sql is not None and ctx.shared.cached_sql.sql == ORDERS
    assert [h.example.example_id for h in ctx.shared.examples] == [example.example_id]
    assert ctx.shared.fallback is None

    # The question may differ from the query; each part can be left out.
    only_sql = gateway.context(
        user,
        query="anything else",
        shared=SharedAsk(route="nl2sql", domain="sales", question=ORDERS_Q, examples=False),
    )
    assert only_sql.shared is not None and only_sql.shared.examples == []
    assert only_sql.shared.cached_sql is not None
    only_examples = gateway.context(user, query=ORDERS_Q, shared=SharedAsk(route="nl2sql"))
    assert only_examples.shared is not None and only_examples.shared.cached_sql is None
    assert len(only_examples.shared.examples) == 1
    assert gateway.context(user, query=ORDERS_Q).shared is None

    with pytest.raises(BadRequest) as bad:
        gateway.context(user, query="x", shared=SharedAsk(route="nl2sql", cached_sql=True))
    assert "domain" in bad.value.message


def test_a_gateway_key_is_refused_the_admin_endpoints(gateway: Engram) -> None:
    example = gateway.record_success(REVENUE_Q, REVENUE, route="nl2sql", confidence=0.95).example
    assert example is not None
    refused: list[Callable[[], object]] = [
        lambda: gateway.list_examples(status="pending_review"),
        lambda: gateway.approve_example(example.example_id, request_id="gw-approve"),
        lambda: gateway.reject_example(example.example_id),
        lambda: gateway.edit_example(example.example_id, sql="SELECT 2"),
        lambda: gateway.export_examples(),
        lambda: gateway.import_examples("examples: []"),
        lambda: gateway.shared_settings(),
        lambda: gateway.set_shared_settings(SharedSettings()),
    ]
    for call in refused:
        with pytest.raises(Forbidden) as raised:
            call()
        assert (raised.value.status, raised.value.code) == (403, "forbidden")
    with pytest.raises(Forbidden) as approve:
        gateway.approve_example(example.example_id, request_id="gw-approve")
    assert approve.value.request_id == "gw-approve"


async def test_the_async_client_speaks_the_shared_sets(
    agateway: AsyncEngram, aadmin: AsyncEngram
) -> None:
    put = await agateway.sql_cache_put(ORDERS_Q, ORDERS, route="nl2sql", domain="sales")
    found = await agateway.sql_cache_lookup(ORDERS_AGAIN, route="nl2sql", domain="sales")
    assert found.hit is not None and found.hit.entry_id == put.entry_id

    recorded = await agateway.record_success(REVENUE_Q, REVENUE, route="nl2sql", confidence=0.95)
    assert recorded.example is not None
    example_id = recorded.example.example_id
    assert [e.example_id for e in await aadmin.list_examples(status="pending_review")] == [
        example_id
    ]
    approved = await aadmin.approve_example(example_id)
    assert approved.example is not None and approved.example.status == "approved"
    served = await agateway.search_similar(REVENUE_Q.lower(), route="nl2sql")
    assert [h.example.example_id for h in served.examples] == [example_id]
    failed = await agateway.report_failure(example_id)
    assert failed.example is not None and failed.example.fail_count == 1

    ctx = await agateway.context(
        unique("u"), query=ORDERS_Q, shared=SharedAsk(route="nl2sql", domain="sales")
    )
    assert ctx.shared is not None and ctx.shared.cached_sql is not None
    assert ctx.shared.cached_sql.entry_id == put.entry_id
    assert [h.example.example_id for h in ctx.shared.examples] == []

    yaml = await aadmin.export_examples(status="approved")
    assert "revenue by region this quarter" in yaml and "fail_count: 1" in yaml
    reimported = await aadmin.import_examples(yaml)
    assert (reimported.created, reimported.updated) == (0, 1)

    edited = await aadmin.edit_example(example_id, question="Revenue per region this quarter")
    assert edited.example is not None
    assert edited.example.question == "revenue per region this quarter"
    moved = await agateway.search_similar("revenue per region this quarter", route="nl2sql")
    assert [h.example.example_id for h in moved.examples] == [example_id]
    rejected = await aadmin.reject_example(example_id)
    assert rejected.example is not None and rejected.example.status == "rejected"

    settings = SharedSettings(sql_ttl_seconds=120, domains={"sales": DomainSettings(0.97)})
    assert (await aadmin.set_shared_settings(settings)).domains["sales"].similarity == (
        pytest.approx(0.97)
    )
    assert (await aadmin.shared_settings()).sql_ttl_seconds == 120

    assert (await agateway.sql_cache_invalidate("sales.orders")).removed == 1
    with pytest.raises(Forbidden):
        await agateway.shared_settings()
