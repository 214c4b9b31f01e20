"""Memory records, searches and flagged contradictions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._json import (
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


@dataclass(frozen=True, slots=True)
class Memory:
    """A memory record, as the key's scope may read it (personal data masked for gateways)."""

    memory_id: str
    kind: str
    status: str
    text: str
    payload: Any
    namespace: str
    scope: str
    confidence: float
    salience: float
    trigger: str
    pii_level: str
    redaction_level: str
    created_at: int
    last_seen_at: int
    session_id: str | None = None
    turn_id: int | None = None
    source_route: str | None = None
    expires_at: int | None = None
    valid_from: int | None = None
    valid_to: int | None = None
    #: In lists: the entities the text mentions (as the key may read it); None elsewhere.
    entities: list[str] | None = None

    @classmethod
    def from_json(cls, value: Any) -> Memory:
        d = obj(value)
        return cls(
            memory_id=string(d, "memory_id"),
            kind=string(d, "kind"),
            status=string(d, "status"),
            text=string(d, "text"),
            payload=d.get("payload"),
            namespace=string(d, "namespace"),
            scope=string(d, "scope"),
            confidence=number(d, "confidence"),
            salience=number(d, "salience"),
            trigger=string(d, "trigger"),
            pii_level=string(d, "pii_level"),
            redaction_level=string(d, "redaction_level"),
            created_at=integer(d, "created_at"),
            last_seen_at=integer(d, "last_seen_at"),
            session_id=opt_string(d, "session_id"),
            turn_id=opt_integer(d, "turn_id"),
            source_route=opt_string(d, "source_route"),
            expires_at=opt_integer(d, "expires_at"),
            valid_from=opt_integer(d, "valid_from"),
            valid_to=opt_integer(d, "valid_to"),
            entities=items(d, "entities", str_item) if "entities" in d else None,
        )


@dataclass(frozen=True, slots=True)
class MemoryAck:
    """The outcome of a memory write or status change."""

    memory: Memory
    action: str
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> MemoryAck:
        d = obj(value)
        return cls(Memory.from_json(d["memory"]), string(d, "action"), boolean(d, "replayed"))


def memories_from_json(value: Any) -> list[Memory]:
    """``{"memories": [...]}``."""
    return items(obj(value), "memories", Memory.from_json)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A memory a search found, with its score (fused, BM25 or cosine)."""

    memory: Memory
    score: float

    @classmethod
    def from_json(cls, value: Any) -> SearchHit:
        d = obj(value)
        return cls(Memory.from_json(d["memory"]), number(d, "score"))


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Hits best first; ``embedded`` says whether the query was embedded, ``reranked``
    whether the hits were reranked (``rerank_fallback`` why not, when asked)."""

    hits: list[SearchHit]
    embedded: bool
    fallback: str | None = None
    reranked: bool = False
    rerank_fallback: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> SearchResult:
        d = obj(value)
        return cls(
            items(d, "hits", SearchHit.from_json),
            boolean(d, "embedded", False),
            opt_string(d, "fallback"),
            boolean(d, "reranked", False),
            opt_string(d, "rerank_fallback"),
        )


@dataclass(frozen=True, slots=True)
class Conflict:
    """A contradiction flagged for review."""

    flag_id: str
    memory_id: str
    """The memory held back (suppressed until reviewed)."""
    conflicts_with: str
    reason: str
    created_at: int

    @classmethod
    def from_json(cls, value: Any) -> Conflict:
        d = obj(value)
        return cls(
            string(d, "flag_id"),
            string(d, "memory_id"),
            string(d, "conflicts_with"),
            string(d, "reason"),
            integer(d, "created_at"),
        )


def conflicts_from_json(value: Any) -> list[Conflict]:
    """``{"conflicts": [...]}``."""
    return items(obj(value), "conflicts", Conflict.from_json)


@dataclass(frozen=True, slots=True)
class ConflictResolution:
    """What settling a contradiction did: both memories as stored now, the held-back first."""

    flag_id: str
    resolution: str
    memories: list[Memory]
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> ConflictResolution:
        d = obj(value)
        return cls(
            string(d, "flag_id"),
            string(d, "resolution"),
            items(d, "memories", Memory.from_json),
            boolean(d, "replayed"),
        )
