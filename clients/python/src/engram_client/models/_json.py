"""Readers of JSON values that check types: a wrong type raises ``TypeError``, a missing
field ``KeyError``, which the client turns into a ``ProtocolError``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

J = Mapping[str, Any]
T = TypeVar("T")


def obj(value: Any) -> J:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def string(d: J, key: str) -> str:
    value = d[key]
    if not isinstance(value, str):
        raise TypeError(f"{key}: expected a string")
    return value


def opt_string(d: J, key: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key}: expected a string or null")
    return value


def integer(d: J, key: str) -> int:
    value = d[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key}: expected an integer")
    return value


def opt_integer(d: J, key: str) -> int | None:
    if d.get(key) is None:
        return None
    return integer(d, key)


def number(d: J, key: str) -> float:
    value = d[key]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{key}: expected a number")
    return float(value)


def boolean(d: J, key: str, default: bool | None = None) -> bool:
    if default is not None and key not in d:
        return default
    value = d[key]
    if not isinstance(value, bool):
        raise TypeError(f"{key}: expected a boolean")
    return value


def items(d: J, key: str, item: Callable[[Any], T], *, optional: bool = False) -> list[T]:
    if optional and d.get(key) is None:
        return []
    value = d[key]
    if not isinstance(value, list):
        raise TypeError(f"{key}: expected a list")
    return [item(v) for v in value]


def str_item(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def millis(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value
