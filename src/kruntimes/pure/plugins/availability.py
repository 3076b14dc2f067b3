"""``RuntimePodAvailability``: the pod is up, its runtimed heartbeat is fresh, and the Run fits (SPEC §4).

Its one reason claims no Pending message: a Run that waits only for a pod that
is up and has room carries the generic one. This is a purely computational
module with no side effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Final, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import FilterPlugin, ParkKind, PendingMessage, PodFilter
from kruntimes.pure.model.objects import RUNNING, RUNS_RESOURCE, PodSlot, Resources, Run, Snapshot, epoch_us
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.framework.batch import BatchFilter, Selection, rejected_as
from kruntimes.pure.model.quantity import format_quantity
from kruntimes.pure.model.resources import fits
from kruntimes.pure.model.times import format_duration

REJECT_RUNTIME_POD_UNAVAILABLE: Final = "RuntimePodUnavailable"


def available_and_fits(slot: PodSlot, request: Resources, now: datetime, stale_after: timedelta) -> bool:
    """The predicate: schedulable, fresh heartbeat (inclusive window), and ``fits`` (equality fits)."""
    pod = slot.pod
    return pod.available(now, stale_after) and fits(pod.capacity, slot.usage, request)


@final
@dataclass(frozen=True, slots=True)
class RuntimePodAvailability:
    name: ClassVar[str] = "RuntimePodAvailability"
    reasons: ClassVar[frozenset[str]] = frozenset({REJECT_RUNTIME_POD_UNAVAILABLE})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {REJECT_RUNTIME_POD_UNAVAILABLE: "capacity"}
    fast_path: ClassVar[bool] = True
    """It reads the static availability, the heartbeat (stale ones are judged alone) and the room."""

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        request = run.requests
        # now - lastProbeTime <= staleAfter  <=>  lastProbeTime >= now - staleAfter (exact: µs integers);
        # inlined because this runs for every candidate pod of every cycle.
        oldest = snapshot.now - snapshot.config.stale_after()

        def pod_filter(slot: PodSlot) -> str | None:
            pod = slot.pod
            probed = pod.heartbeat_at
            if (
                pod.phase == RUNNING
                and pod.ready
                and not pod.deleting
                and pod.heartbeat_ok
                and probed is not None
                and probed >= oldest
                and fits(pod.capacity, slot.usage, request)
            ):
                return None
            return REJECT_RUNTIME_POD_UNAVAILABLE

        # The whole-list form: the time-independent checks are folded into
        # ``pod.available_probe_us`` (decode time), the freshness cutoff is one
        # integer, and the common request ``{runs: n}`` is one comparison.
        oldest_us = epoch_us(oldest) if oldest.tzinfo is not None else None
        runs = request.get(RUNS_RESOURCE)
        only_runs = runs is not None and len(request) == 1 and runs > 0

        def select(slots: Sequence[PodSlot]) -> Selection:
            # A naive lastProbeTime (None) against an aware cutoff raises TypeError here,
            # exactly as the per-slot comparison of datetimes does.
            if oldest_us is None:
                kept = [slot for slot in slots if pod_filter(slot) is None]
            elif only_runs:
                assert runs is not None
                kept = [
                    slot
                    for slot in slots
                    if (pod := slot.pod).available_probe_us >= oldest_us  # type: ignore[operator]
                    and (limit := pod.runs_capacity) is not None
                    and slot.runs_used + runs <= limit
                ]
            else:
                kept = [
                    slot
                    for slot in slots
                    if slot.pod.available_probe_us >= oldest_us  # type: ignore[operator]
                    and fits(slot.pod.capacity, slot.usage, request)
                ]
            return rejected_as(REJECT_RUNTIME_POD_UNAVAILABLE, len(slots), kept)

        return Success(BatchFilter(pod_filter, select))

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return unavailable_detail(slot, run.requests, snapshot.now, snapshot.config.stale_after())


def unavailable_detail(slot: PodSlot, request: Resources, now: datetime, stale_after: timedelta) -> str:
    """Which part of the predicate failed, first failing check first (SPEC §1, §4)."""
    pod = slot.pod
    if pod.phase != RUNNING:
        return f"pod phase is {pod.phase or 'unknown'}, not Running"
    if pod.deleting:
        return "pod is being deleted"
    if not pod.ready:
        return "pod is not Ready"
    if not pod.heartbeat_ok:
        return "runtimed heartbeat (kruntimes.io/RuntimedReady) is missing or not True"
    if pod.heartbeat_at is None:
        return "runtimed heartbeat has no lastProbeTime"
    if not pod.heartbeat_fresh(now, stale_after):
        age = format_duration(now - pod.heartbeat_at)
        return f"runtimed heartbeat is stale: last probe {age} ago (stale after {format_duration(stale_after)})"
    short: list[str] = []
    for name, amount in request.items():
        if amount <= 0:
            continue
        limit = pod.capacity.get(name)
        if limit is None:
            short.append(f"does not advertise {name}")
            continue
        used = slot.usage.get(name, 0)
        if used + amount > limit:
            short.append(
                f"full: {name} {format_quantity(used)}/{format_quantity(limit)} in use, needs {format_quantity(amount)}"
            )
    return "; ".join(short) if short else "unavailable"


def unavailable_kind(slot: PodSlot, request: Resources, now: datetime, stale_after: timedelta) -> str | None:
    """What kind of unavailable the pod is for ``request``, as a short count label for the
    ``FailedScheduling`` Event (``4 full (runs)``, ``2 not ready``); ``None`` when it is
    available and fits. Names only resources the Run itself requests, never the pod."""
    pod = slot.pod
    if pod.phase != RUNNING:
        return "not running"
    if pod.deleting:
        return "being deleted"
    if not pod.ready:
        return "not ready"
    if not pod.heartbeat_ok or pod.heartbeat_at is None:
        return "no heartbeat"
    if not pod.heartbeat_fresh(now, stale_after):
        return "stale heartbeat"
    for name, amount in sorted(request.items()):
        if amount <= 0:
            continue
        limit = pod.capacity.get(name)
        if limit is None:
            return f"without {name}"
        if amount > limit:
            return f"too small ({name})"
        if slot.usage.get(name, 0) + amount > limit:
            return f"full ({name})"
    return None


_: FilterPlugin = RuntimePodAvailability()
