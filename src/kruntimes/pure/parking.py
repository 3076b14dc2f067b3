"""What the parking lot decides (SPEC §8), as pure functions over plain values.

``effects.parking.Parking`` keeps the parked Runs, the claims and the event counters under
its lock and asks these functions what to do with them; time comes in as a number (seconds
on the lot's clock), never read here. Who a released room admits is ``queueing.admit``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, TypeAlias, TypeVar

from kruntimes.pure.model.objects import EMPTY_RESOURCES, Resources
from kruntimes.pure.model.resources import fits
from kruntimes.pure.queueing import ParkReason
from kruntimes.pure.step import BackOff, Next

RECHECK_SECONDS: Final = 30.0
"""A parked Run no event woke is planned again within this many seconds, once its group has
admitted nobody for as long (the safety net, :func:`served` and :func:`overdue`)."""

Slot: TypeAlias = tuple[str, str]
"""(namespace, pod): the room a claim holds."""
_Key = TypeVar("_Key")


def refused(started: int, runtime_event: int, namespace_event: int, reason: ParkReason) -> bool:
    """Whether a Run whose cycle ended in Wait must be queued again at once instead of parked:
    an event its group reads arrived while the cycle ran, after the event counter stood at
    ``started`` (``-1`` when the counter was not taken), so the cycle planned without it and
    no later event would wake the Run. ``runtime_event``: the counter at the last event for its
    (namespace, runtime); ``namespace_event``: at the last change to labels its namespace's
    affinity terms read, which only a Run parked on ``constraints`` waits on (``-1``: none)."""
    return runtime_event > started or (reason == "constraints" and namespace_event > started)


def admission_groups(grown: bool) -> tuple[ParkReason, ...]:
    """The groups a pod's room is offered to, in this order: a pod that appeared or grew may
    hold Runs no pod could hold before (``unfit``); room freed on a pod as it was cannot."""
    return ("capacity", "constraints", "unfit") if grown else ("capacity", "constraints")


def now_fits(capacity: Resources, request: Resources) -> bool:
    """Whether a Run parked ``unfit`` with ``request`` waits for room from now on (it moves
    to ``capacity``): a pod of its runtime with ``capacity`` could hold it empty."""
    return fits(capacity, EMPTY_RESOURCES, request)


def served(admitted_at: float | None, now: float, safety_net: float) -> bool:
    """Whether a group admitted a Run within the last ``safety_net`` seconds (``None``: it
    never did): the safety net passes it by whole, as its Runs' turns come in order."""
    return admitted_at is not None and admitted_at > now - safety_net


def overdue(since: float, now: float, safety_net: float) -> bool:
    """Whether a Run parked at ``since`` in a group not :func:`served` is planned again now."""
    return since <= now - safety_net


def displaced(key: _Key, admitted_for: Slot | None, landed_on: Slot, claimants: Iterable[_Key]) -> _Key | None:
    """Whose claim moves to ``admitted_for`` when ``key``'s cycle put it on ``landed_on``: the
    first other Run admitted for the room ``key`` took (``claimants``, in claim order), when
    ``key`` was admitted for another room; ``None`` when no claim moves."""
    if admitted_for is None or admitted_for == landed_on:
        return None
    return next((other for other in claimants if other != key), None)


def keeps_claim(next_: Next) -> bool:
    """Whether a Run's claim outlives its cycle: only a back-off that asked for it (its reserve
    lost the race for the room it was admitted for, and its retry comes back for that room)."""
    return isinstance(next_, BackOff) and next_.keep_claim


__all__ = [
    "RECHECK_SECONDS",
    "Slot",
    "admission_groups",
    "displaced",
    "keeps_claim",
    "now_fits",
    "overdue",
    "refused",
    "served",
]
