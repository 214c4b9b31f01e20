"""Answers of turns, feedback and contexts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._json import (
    boolean,
    integer,
    items,
    millis,
    number,
    obj,
    opt_integer,
    opt_string,
    str_item,
    string,
)
from .shared import SharedContext


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """A memory a write formed or touched."""

    memory_id: str
    kind: str
    action: str
    """``created``, ``reinforced``, ``superseded``, ``flagged``, ``activated``,
    ``suppressed`` or ``promoted``."""

    @classmethod
    def from_json(cls, value: Any) -> MemoryChange:
        d = obj(value)
        return cls(string(d, "memory_id"), string(d, "kind"), string(d, "action"))


@dataclass(frozen=True, slots=True)
class IntentVersion:
    """A version of an intent a write recorded."""

    intent_type: str
    version: int
    deactivated: list[int]
    replaced: int | None = None

    @classmethod
    def from_json(cls, value: Any) -> IntentVersion:
        d = obj(value)
        return cls(
            string(d, "intent_type"),
            integer(d, "version"),
            items(d, "deactivated", millis, optional=True),
            opt_integer(d, "replaced"),
        )


@dataclass(frozen=True, slots=True)
class TurnAck:
    """The outcome of appending a turn."""

    written: bool
    session_id: str
    seq: int | None
    entities: list[str]
    memories: list[MemoryChange]
    intents: list[IntentVersion]
    distilling: bool
    replayed: bool
    """True when this replays an earlier request with the same request id."""

    @classmethod
    def from_json(cls, value: Any) -> TurnAck:
        d = obj(value)
        return cls(
            written=boolean(d, "written"),
            session_id=string(d, "session_id"),
            seq=opt_integer(d, "seq"),
            entities=items(d, "entities", str_item),
            memories=items(d, "memories", MemoryChange.from_json),
            intents=items(d, "intents", IntentVersion.from_json, optional=True),
            distilling=boolean(d, "distilling", False),
            replayed=boolean(d, "replayed"),
        )


@dataclass(frozen=True, slots=True)
class FeedbackAck:
    """The outcome of feedback on a turn."""

    memories: list[MemoryChange]
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> FeedbackAck:
        d = obj(value)
        return cls(items(d, "memories", MemoryChange.from_json), boolean(d, "replayed"))


@dataclass(frozen=True, slots=True)
class ContextTurn:
    """A recent turn in a context."""

    seq: int
    user: str
    assistant: str

    @classmethod
    def from_json(cls, value: Any) -> ContextTurn:
        d = obj(value)
        return cls(integer(d, "seq"), string(d, "user"), string(d, "assistant"))


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """An older turn, summarised."""

    seq: int
    text: str
    method: str

    @classmethod
    def from_json(cls, value: Any) -> ContextSummary:
        d = obj(value)
        return cls(integer(d, "seq"), string(d, "text"), string(d, "method"))


@dataclass(frozen=True, slots=True)
class ContextMemory:
    """A memory in one of a context's slots."""

    memory_id: str
    text: str
    score: float
    status: str
    """``active``, or ``candidate``: formed but not yet confirmed."""
    corrected_sql: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> ContextMemory:
        d = obj(value)
        return cls(
            string(d, "memory_id"),
            string(d, "text"),
            number(d, "score"),
            opt_string(d, "status") or "",
            opt_string(d, "corrected_sql"),
        )


@dataclass(frozen=True, slots=True)
class ContextIntent:
    """A current intent in the context's key-intents slot."""

    intent_type: str
    target: str
    version: int
    priority: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> ContextIntent:
        d = obj(value)
        return cls(
            string(d, "intent_type"),
            string(d, "target"),
            integer(d, "version"),
            opt_string(d, "priority"),
        )


@dataclass(frozen=True, slots=True)
class ContextTable:
    """A table's cached metadata shown in an nl2sql context."""

    name: str
    metadata: str

    @classmethod
    def from_json(cls, value: Any) -> ContextTable:
        d = obj(value)
        return cls(string(d, "name"), string(d, "metadata"))


@dataclass(frozen=True, slots=True)
class Context:
    """A memory context: ``text`` goes into the prompt, the other fields say what is in it."""

    route: str
    recent_turns: list[ContextTurn]
    summaries: list[ContextSummary]
    profile: list[ContextMemory]
    episodic: list[ContextMemory]
    corrections: list[ContextMemory]
    intents: list[ContextIntent]
    entities: list[str]
    tokens: int
    token_budget: int
    truncated: bool
    dropped: list[str]
    text: str
    query_embedded: bool = False
    fallback: str | None = None
    """Why the query was ranked without its vector: ``deadline``, ``overloaded`` or
    ``unavailable``."""
    tables: list[ContextTable] = field(default_factory=list)
    shared: SharedContext | None = None
    """The tenant's shared sets (served examples, cached SQL) when the request asked for them
    (``shared=``)."""

    @classmethod
    def from_json(cls, value: Any) -> Context:
        d = obj(value)
        return cls(
            route=string(d, "route"),
            recent_turns=items(d, "recent_turns", ContextTurn.from_json),
            summaries=items(d, "summaries", ContextSummary.from_json),
            profile=items(d, "profile", ContextMemory.from_json),
            episodic=items(d, "episodic", ContextMemory.from_json),
            corrections=items(d, "corrections", ContextMemory.from_json),
            intents=items(d, "intents", ContextIntent.from_json, optional=True),
            entities=items(d, "entities", str_item),
            tokens=integer(d, "tokens"),
            token_budget=integer(d, "token_budget"),
            truncated=boolean(d, "truncated"),
            dropped=items(d, "dropped", str_item),
            text=string(d, "text"),
            query_embedded=boolean(d, "query_embedded", False),
            fallback=opt_string(d, "fallback"),
            tables=items(d, "tables", ContextTable.from_json, optional=True),
            shared=SharedContext.from_json(d["shared"]) if d.get("shared") is not None else None,
        )
