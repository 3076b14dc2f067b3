"""Exact resource arithmetic and the one capacity predicate everyone shares.

A request fits a pod when, for every requested resource, the pod advertises it
and ``usage + request <= capacity`` (SPEC §4). The ledger re-checks exactly the
predicate the ``RuntimePodAvailability`` filter used, so a reservation can never
be granted on a rule the planner did not apply. Maps returned here are
read-only and carry no zero entries. This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kruntimes.pure.model.objects import EMPTY_RESOURCES, Resources, frozen_resources
from kruntimes.pure.model.quantity import Amount


def fits(capacity: Resources, usage: Resources, request: Resources) -> bool:
    """Whether ``request`` fits on a pod with ``capacity`` already using ``usage``.

    Equality fits. A requested resource the pod does not advertise never fits
    (a domain-prefixed resource such as ``example.com/gpu`` cannot be
    advertised, SPEC §1). Non-positive requests ask for nothing.
    """
    for name, amount in request.items():
        if amount <= 0:
            continue
        limit = capacity.get(name)
        if limit is None or usage.get(name, 0) + amount > limit:
            return False
    return True


def add(a: Resources, b: Resources) -> Resources:
    """The exact sum, per resource; zero entries dropped."""
    if not b:
        return a if all(a.values()) else _nonzero(a)
    if not a:
        return b if all(b.values()) else _nonzero(b)
    total: dict[str, Amount] = dict(a)
    for name, amount in b.items():
        total[name] = total.get(name, 0) + amount
    return _nonzero(total)


def subtract(a: Resources, b: Resources) -> Resources:
    """``a - b`` per resource; zero entries dropped (used to retract a Run's old usage)."""
    if not b:
        return a
    total: dict[str, Amount] = dict(a)
    for name, amount in b.items():
        total[name] = total.get(name, 0) - amount
    return _nonzero(total)


def _nonzero(items: Resources | dict[str, Amount]) -> Resources:
    kept = {name: amount for name, amount in items.items() if amount != 0}
    return frozen_resources(kept) if kept else EMPTY_RESOURCES


def plus_reserved(usage: Resources, extra: Mapping[str, Amount]) -> Resources:
    """``add(usage, extra)`` for a snapshot's hot path, where ``extra`` is a pod's reserved
    total (zero entries possible): one dict copy, sorted only when more than one resource
    is left (the ``frozen_resources`` order), zero entries dropped. Exactly the usage
    ``ClusterState.pod_slots(..., extra_usage)`` puts in a slot."""
    total = usage.copy() if isinstance(usage, MappingProxyType) else dict(usage)
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + amount
    if 0 in total.values():
        total = {name: amount for name, amount in total.items() if amount != 0}
    if not total:
        return EMPTY_RESOURCES
    if len(total) > 1:
        return frozen_resources(total)
    return MappingProxyType(total)
