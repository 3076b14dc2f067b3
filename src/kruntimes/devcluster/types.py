"""Shared shapes: a Kubernetes object is a JSON mapping, keyed the way the store keys it."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple, TypeAlias, TypeVar

Obj: TypeAlias = dict[str, Any]
"""A decoded JSON object (a Kubernetes object, a Status, a patch). Values are JSON values."""

_T = TypeVar("_T")
_IMMUTABLE: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def json_copy(value: _T) -> _T:
    """A deep copy of a JSON value: new dicts and lists all the way down, the immutable
    leaves shared. ``copy.deepcopy`` does the same for JSON at about six times the cost
    (its memo and dispatch); any other type is handed to it."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [json_copy(item) for item in value]  # type: ignore[attr-defined,return-value]
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


class GroupResource(NamedTuple):
    """Where objects live in the store: one bucket per (group, plural), whatever the version asked."""

    group: str
    plural: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


class ObjectKey(NamedTuple):
    """Namespace ("" for cluster-scoped objects) and name."""

    namespace: str
    name: str
