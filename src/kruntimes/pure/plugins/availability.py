"""``RuntimePodAvailability``: the pod is up, its runtimed heartbeat is fresh, and the Run fits (SPEC §4).

This is a purely computational module with no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, final

from returns.result import Result, Success

from kruntimes.pure.messages import REJECT_RUNTIME_POD_UNAVAILABLE
from kruntimes.pure.model import RUNNING, PodSlot, Resources, Run, Snapshot
from kruntimes.pure.plan import CycleError
from kruntimes.pure.resources import fits

if TYPE_CHECKING:
    from kruntimes.pure.framework import FilterPlugin, PodFilter


def available_and_fits(slot: PodSlot, request: Resources, now: datetime, stale_after: timedelta) -> bool:
    """The predicate: schedulable, fresh heartbeat (inclusive window), and ``fits`` (equality fits)."""
    pod = slot.pod
    return pod.available(now, stale_after) and fits(pod.capacity, slot.usage, request)


@final
@dataclass(frozen=True, slots=True)
class RuntimePodAvailability:
    name: ClassVar[str] = "RuntimePodAvailability"
    reasons: ClassVar[frozenset[str]] = frozenset({REJECT_RUNTIME_POD_UNAVAILABLE})

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

        return Success(pod_filter)


_: FilterPlugin = RuntimePodAvailability()
