"""Shared shapes: a Kubernetes object is a JSON mapping, keyed the way the store keys it."""

from __future__ import annotations

from typing import Any, NamedTuple, TypeAlias

Obj: TypeAlias = dict[str, Any]
"""A decoded JSON object (a Kubernetes object, a Status, a patch). Values are JSON values."""


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
