"""An example filter plugin written the way a library user writes one: one file, one registration line.

``AvoidDraining`` refuses pods whose name marks them as draining. Everything the
scheduler says about it comes from this file: its reason (a metric label), the
Pending message a Run it holds back carries, with its precedence, and the
detail ``explain`` prints beside a pod it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import FilterPlugin, ParkKind, PendingMessage, PodFilter
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY

DRAINING_PREFIX: Final = "draining-"
REJECT_POD_DRAINING: Final = "PodDraining"
DRAINING_RANK: Final = 150
"""Above a workspace placement (100), below required anti-affinity (200) and affinity (300)."""


def waiting_for_undrained(runtime: str) -> str:
    return f'waiting for runtime pods that are not draining for runtime "{runtime}"'


@final
@dataclass(frozen=True, slots=True)
class AvoidDraining:
    name: ClassVar[str] = "AvoidDraining"
    reasons: ClassVar[frozenset[str]] = frozenset({REJECT_POD_DRAINING})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {REJECT_POD_DRAINING: "capacity"}
    """A Run it holds back waits for room on a pod that is not draining."""
    fast_path: ClassVar[bool] = False
    """It reads the pod's name, which the placement index does not group pods by."""

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        return Success(_refuse_draining)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return PendingMessage(DRAINING_RANK, waiting_for_undrained(run.runtime))

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return f'pod is draining (its name starts with "{DRAINING_PREFIX}")'


def _refuse_draining(slot: PodSlot) -> str | None:
    return REJECT_POD_DRAINING if slot.pod.name.startswith(DRAINING_PREFIX) else None


_: FilterPlugin = AvoidDraining()

WITH_AVOID_DRAINING: Final = DEFAULT_REGISTRY.register_filter("AvoidDraining", AvoidDraining).unwrap()
"""The default plugins, then this one: the one line that adds it."""
