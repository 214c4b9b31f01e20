"""The tenant's shared sets (docs/shared.md): the semantic SQL cache, the few-shot library and
their settings, and the part of a context that carries them. The node's JSON is
``node/src/http/shared.rs``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._json import (
    J,
    boolean,
    integer,
    items,
    number,
    obj,
    opt_integer,
    opt_string,
    str_item,
    string,
)

T = TypeVar("T")


def _opt_number(d: J, key: str) -> float | None:
    return None if d.get(key) is None else number(d, key)


def _opt(value: Any, read: Callable[[Any], T]) -> T | None:
    """``read(value)``, or ``None`` for a JSON null or a missing field."""
    return None if value is None else read(value)


# --- the SQL cache ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SqlHit:
    """A cached SQL that answers the question."""

    entry_id: str
    sql: str
    question: str
    """The normalised question it was stored for."""
    similarity: float
    """Cosine similarity of the two questions (1 for the same normalised text)."""
    age_ms: int

    @classmethod
    def from_json(cls, value: Any) -> SqlHit:
        d = obj(value)
        return cls(
            string(d, "entry_id"),
            string(d, "sql"),
            string(d, "question"),
            number(d, "similarity"),
            integer(d, "age_ms"),
        )


@dataclass(frozen=True, slots=True)
class SqlLookup:
    """What a SQL cache lookup found: ``hit`` is ``None`` on a miss."""

    hit: SqlHit | None
    threshold: float
    """The least similarity a hit needed."""
    fallback: str | None = None
    """Why only the same normalised question could hit (``deadline``, ``overloaded``,
    ``unavailable``): the question's vector did not come in time."""

    @classmethod
    def from_json(cls, value: Any) -> SqlLookup:
        d = obj(value)
        return cls(
            _opt(d.get("hit"), SqlHit.from_json),
            number(d, "threshold"),
            opt_string(d, "fallback"),
        )


@dataclass(frozen=True, slots=True)
class SqlCacheAck:
    """A SQL cache entry just stored."""

    entry_id: str
    tables: list[str]
    """The tables the SQL names."""
    expires_at: int
    """Served until (Unix ms)."""
    replaced: bool
    """Whether it replaced the entry of the same question."""
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> SqlCacheAck:
        d = obj(value)
        return cls(
            string(d, "entry_id"),
            items(d, "tables", str_item),
            integer(d, "expires_at"),
            boolean(d, "replaced"),
            boolean(d, "replayed"),
        )


@dataclass(frozen=True, slots=True)
class Invalidation:
    """What invalidating a table removed from the SQL cache."""

    removed: int
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> Invalidation:
        d = obj(value)
        return cls(integer(d, "removed"), boolean(d, "replayed"))


# --- the few-shot library --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Example:
    """A few-shot example (a question and the SQL that answered it)."""

    example_id: str
    question: str
    """Normalised."""
    sql: str
    route: str
    confidence: float
    status: str
    """``pending_review``, ``approved`` or ``rejected``."""
    successes: int
    fail_count: int
    created_at: int
    updated_at: int
    last_used_at: int
    """Last served or recorded; 30 days after it the example expires."""
    reviewed_by: str | None = None
    """Who approved, rejected or edited it last (a key id, ``auto-promotion`` or
    ``import``)."""

    @classmethod
    def from_json(cls, value: Any) -> Example:
        d = obj(value)
        return cls(
            example_id=string(d, "example_id"),
            question=string(d, "question"),
            sql=string(d, "sql"),
            route=string(d, "route"),
            confidence=number(d, "confidence"),
            status=string(d, "status"),
            successes=integer(d, "successes"),
            fail_count=integer(d, "fail_count"),
            created_at=integer(d, "created_at"),
            updated_at=integer(d, "updated_at"),
            last_used_at=integer(d, "last_used_at"),
            reviewed_by=opt_string(d, "reviewed_by"),
        )


def examples_from_json(value: Any) -> list[Example]:
    """``{"examples": [...]}``."""
    return items(obj(value), "examples", Example.from_json)


@dataclass(frozen=True, slots=True)
class ExampleAck:
    """An example after a write (record, failure, review, edit)."""

    example: Example | None
    """``None`` when the write removed it."""
    promoted: bool
    """Whether it was approved automatically (auto-promotion)."""
    removed: bool
    """Whether it was removed (more than three failures)."""
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> ExampleAck:
        d = obj(value)
        return cls(
            _opt(d.get("example"), Example.from_json),
            boolean(d, "promoted"),
            boolean(d, "removed"),
            boolean(d, "replayed"),
        )


@dataclass(frozen=True, slots=True)
class ExampleHit:
    """An example served, with its question's similarity to the one asked."""

    example: Example
    similarity: float

    @classmethod
    def from_json(cls, value: Any) -> ExampleHit:
        d = obj(value)
        return cls(Example.from_json(d["example"]), number(d, "similarity"))


@dataclass(frozen=True, slots=True)
class ExampleSearch:
    """The approved examples closest to a question, best first."""

    examples: list[ExampleHit]
    fallback: str | None = None
    """Why only the same normalised question could match (no vector in time)."""

    @classmethod
    def from_json(cls, value: Any) -> ExampleSearch:
        d = obj(value)
        return cls(items(d, "examples", ExampleHit.from_json), opt_string(d, "fallback"))


@dataclass(frozen=True, slots=True)
class ImportAck:
    """What an import of examples did."""

    created: int
    """Examples new to the library."""
    updated: int
    """Examples that were there, replaced."""
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> ImportAck:
        d = obj(value)
        return cls(integer(d, "created"), integer(d, "updated"), boolean(d, "replayed"))


# --- settings --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainSettings:
    """One domain's SQL cache settings, where they differ from the tenant's."""

    similarity: float | None = None
    """Least similarity of a hit, 0.5 to 1."""
    ttl_seconds: int | None = None
    """Seconds an entry is served, 1 to 86,400."""

    @classmethod
    def from_json(cls, value: Any) -> DomainSettings:
        d = obj(value)
        return cls(_opt_number(d, "similarity"), opt_integer(d, "ttl_seconds"))

    def to_json(self) -> dict[str, Any]:
        return {"similarity": self.similarity, "ttl_seconds": self.ttl_seconds}


@dataclass(frozen=True, slots=True)
class SharedSettings:
    """The tenant's settings of its shared sets (the defaults are the node's)."""

    sql_similarity: float = 0.92
    """Least similarity of a SQL cache hit, 0.5 to 1."""
    sql_ttl_seconds: int = 900
    """Seconds a SQL cache entry is served, 1 to 86,400."""
    domains: dict[str, DomainSettings] = field(default_factory=dict)
    """Per-domain overrides, by domain."""
    auto_promote: bool = False
    """Whether examples that keep succeeding and are near-duplicates of approved ones are
    approved automatically (audited)."""
    literal_guard: bool = True
    """Whether a cached SQL answers only questions with the same numbers and time
    expressions as its own."""

    @classmethod
    def from_json(cls, value: Any) -> SharedSettings:
        d = obj(value)
        domains = obj(d.get("domains") or {})
        return cls(
            sql_similarity=number(d, "sql_similarity"),
            sql_ttl_seconds=integer(d, "sql_ttl_seconds"),
            domains={str_item(k): DomainSettings.from_json(v) for k, v in domains.items()},
            auto_promote=boolean(d, "auto_promote", False),
            literal_guard=boolean(d, "literal_guard", True),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "sql_similarity": self.sql_similarity,
            "sql_ttl_seconds": self.sql_ttl_seconds,
            "domains": {name: d.to_json() for name, d in self.domains.items()},
            "auto_promote": self.auto_promote,
            "literal_guard": self.literal_guard,
        }


# --- in a context ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharedAsk:
    """What of the tenant's shared sets a context should carry (``context(..., shared=)``)."""

    route: str
    """The route the shared sets are keyed by (e.g. ``nl2sql``)."""
    domain: str | None = None
    """The data domain, for the cached SQL."""
    question: str | None = None
    """The question to match; ``None``: the context's ``query``."""
    examples: bool | None = None
    """Serve approved few-shot examples; the node's default: yes."""
    cached_sql: bool | None = None
    """Serve the cached SQL (needs ``domain``); the node's default: when a domain is given."""

    def to_json(self) -> dict[str, Any]:
        body = {
            "route": self.route,
            "domain": self.domain,
            "question": self.question,
            "examples": self.examples,
            "cached_sql": self.cached_sql,
        }
        return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True, slots=True)
class SharedContext:
    """The shared sets' part of a context: examples served and the cached SQL."""

    examples: list[ExampleHit]
    """Best first."""
    cached_sql: SqlHit | None = None
    fallback: str | None = None
    """Why only the same normalised question could match."""

    @classmethod
    def from_json(cls, value: Any) -> SharedContext:
        d = obj(value)
        return cls(
            items(d, "examples", ExampleHit.from_json),
            _opt(d.get("cached_sql"), SqlHit.from_json),
            opt_string(d, "fallback"),
        )
