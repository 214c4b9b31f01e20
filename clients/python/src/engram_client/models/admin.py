"""API keys and the audit trail."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._json import integer, items, obj, opt_integer, opt_string, str_item, string


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key as listed: never its secret."""

    key_id: str
    tenant: str
    scope: str
    name: str
    created_at: int
    created_by: str
    expires_at: int | None = None
    replaced_by: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> ApiKey:
        d = obj(value)
        return cls(
            string(d, "key_id"),
            string(d, "tenant"),
            string(d, "scope"),
            string(d, "name"),
            integer(d, "created_at"),
            string(d, "created_by"),
            opt_integer(d, "expires_at"),
            opt_string(d, "replaced_by"),
        )


def keys_from_json(value: Any) -> list[ApiKey]:
    """``{"keys": [...]}``."""
    return items(obj(value), "keys", ApiKey.from_json)


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made, with its bearer token: shown this once (and kept out of ``repr``)."""

    key: ApiKey
    token: str = field(repr=False)

    @classmethod
    def from_json(cls, value: Any) -> NewKey:
        d = obj(value)
        return cls(ApiKey.from_json(d), string(d, "token"))


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An entry of the tenant's audit trail; ``user`` is the user's keyed pseudonym."""

    id: str
    at: int
    principal: str
    tenant: str
    action: str
    ids: list[str]
    outcome: int
    user: str | None = None
    client: str | None = None

    @classmethod
    def from_json(cls, value: Any) -> AuditEntry:
        d = obj(value)
        return cls(
            string(d, "id"),
            integer(d, "at"),
            string(d, "principal"),
            string(d, "tenant"),
            string(d, "action"),
            items(d, "ids", str_item),
            integer(d, "outcome"),
            opt_string(d, "user"),
            opt_string(d, "client"),
        )


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Entries oldest first; ``next_from`` is the ``from_ms`` of the next page when full."""

    entries: list[AuditEntry]
    next_from: int | None = None

    @classmethod
    def from_json(cls, value: Any) -> AuditPage:
        d = obj(value)
        return cls(items(d, "entries", AuditEntry.from_json), opt_integer(d, "next_from"))
