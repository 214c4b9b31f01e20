"""Sessions, their turns, forgetting a user, and intents (the seed-compatible
``/write`` and ``/recall``, and pre-warm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._json import boolean, integer, items, millis, obj, opt_integer, opt_string, str_item, string
from .conversation import IntentVersion


@dataclass(frozen=True, slots=True)
class Session:
    """A session of a user."""

    session_id: str
    opened_at: int
    last_turn_at: int
    turn_count: int
    title: str | None = None
    """In lists: the first user message (at most 50 characters, personal data masked)."""

    @classmethod
    def from_json(cls, value: Any) -> Session:
        d = obj(value)
        return cls(
            string(d, "session_id"),
            integer(d, "opened_at"),
            integer(d, "last_turn_at"),
            integer(d, "turn_count"),
            opt_string(d, "title"),
        )


def sessions_from_json(value: Any) -> list[Session]:
    """``{"sessions": [...]}``."""
    return items(obj(value), "sessions", Session.from_json)


@dataclass(frozen=True, slots=True)
class Turn:
    """A stored turn."""

    seq: int
    user_text: str
    assistant_text: str
    entities: list[str]
    created_at: int
    route: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> Turn:
        d = obj(value)
        return cls(
            integer(d, "seq"),
            string(d, "user_text"),
            string(d, "assistant_text"),
            items(d, "entities", str_item),
            integer(d, "created_at"),
            opt_string(d, "route"),
        )


@dataclass(frozen=True, slots=True)
class SessionTurns:
    """A session and its newest turns, oldest first."""

    session: Session
    turns: list[Turn]

    @classmethod
    def from_json(cls, value: Any) -> SessionTurns:
        d = obj(value)
        return cls(Session.from_json(d["session"]), items(d, "turns", Turn.from_json))


@dataclass(frozen=True, slots=True)
class Deleted:
    """The outcome of deleting a session's turns."""

    deleted: int
    replayed: bool

    @classmethod
    def from_json(cls, value: Any) -> Deleted:
        d = obj(value)
        return cls(integer(d, "deleted"), boolean(d, "replayed"))


@dataclass(frozen=True, slots=True)
class Forgotten:
    """The outcome of forgetting a user."""

    records: int
    expiry_entries: int

    @classmethod
    def from_json(cls, value: Any) -> Forgotten:
        d = obj(value)
        return cls(integer(d, "records"), integer(d, "expiry_entries"))


@dataclass(frozen=True, slots=True)
class IntentWriteAck:
    """The outcome of ``POST /write``: the version recorded (``intent_type`` and ``version``),
    or, for a message, what the rules distilled at once (``intents``)."""

    deactivated: list[int]
    intents: list[IntentVersion]
    distilling: bool
    replayed: bool
    intent_type: str | None = None
    version: int | None = None

    @classmethod
    def from_json(cls, value: Any) -> IntentWriteAck:
        d = obj(value)
        return cls(
            deactivated=items(d, "deactivated", millis, optional=True),
            intents=items(d, "intents", IntentVersion.from_json, optional=True),
            distilling=boolean(d, "distilling", False),
            replayed=boolean(d, "replayed"),
            intent_type=opt_string(d, "intent_type"),
            version=opt_integer(d, "version"),
        )


@dataclass(frozen=True, slots=True)
class Intent:
    """One version of an intent (fields masked for gateways)."""

    intent_type: str
    version: int
    fields: Any
    active: bool

    @classmethod
    def from_json(cls, value: Any) -> Intent:
        d = obj(value)
        return cls(
            string(d, "intent_type"), integer(d, "version"), d.get("fields"), boolean(d, "active")
        )


def _target_value(d: dict[str, Any]) -> str | dict[str, Any] | None:
    value = d.get("target_value")
    if value is None or isinstance(value, str):
        return value
    return obj(value)


def intents_from_json(value: Any) -> list[Intent]:
    """``{"intents": [...]}`` (pre-warm)."""
    return items(obj(value), "intents", Intent.from_json)


@dataclass(frozen=True, slots=True)
class Recall:
    """An intent type's current target and version (``None`` when none is current), with
    the versions asked for, newest first; ``next_before`` continues a page of every version.
    ``target_value`` is an object for the types with a structure (an appointment's
    ``time`` and ``location``, a complaint's ``service`` and ``problem``, a subscription's
    ``product`` and ``cycle``), else a string."""

    intent_type: str
    intents: list[Intent]
    target_value: str | dict[str, Any] | None = None
    version: int | None = None
    next_before: int | None = None

    @classmethod
    def from_json(cls, value: Any) -> Recall:
        d = obj(value)
        return cls(
            string(d, "intent_type"),
            items(d, "intents", Intent.from_json),
            _target_value(d),
            opt_integer(d, "version"),
            opt_integer(d, "next_before"),
        )
