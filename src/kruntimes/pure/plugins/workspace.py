"""``WorkspacePlacement``: a Run on a bound ``RuntimePodLocal`` workspace goes to its pod (SPEC §4).

Not in upstream; the design requires it. An unusable workspace makes the Run
wait (every pod rejected), it never fails it; the Run then says it waits for
its workspace's placement (rank 100: below required affinity and
anti-affinity, above the generic message, SPEC §7). This is a purely
computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import FilterPlugin, ParkKind, PendingMessage, PodFilter
from kruntimes.pure.model.messages import waiting_for_workspace
from kruntimes.pure.model.objects import WORKSPACE_MODE_LOCAL, PodSlot, Run, Snapshot, Workspace, WorkspaceRef
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.framework.batch import BatchFilter, Selection, rejected_as


REJECT_WORKSPACE_UNAVAILABLE: Final = "WorkspaceUnavailable"
REJECT_WORKSPACE_PLACEMENT: Final = "WorkspacePlacement"
WORKSPACE_RANK: Final = 100

BOUND: Final = "Bound"
UNUSABLE_PHASES: Final = frozenset({"Lost", "Released"})


@final
@dataclass(frozen=True, slots=True)
class NoConstraint:
    """Any pod will do (no workspace, a Pending one, or a mode other than RuntimePodLocal)."""


@final
@dataclass(frozen=True, slots=True)
class Unavailable:
    """No pod will do: the workspace is missing, for another runtime, lost, released or unplaced."""


@final
@dataclass(frozen=True, slots=True)
class OnlyPod:
    """Only the pod the workspace is bound to."""

    pod: str


WorkspaceConstraint: TypeAlias = NoConstraint | Unavailable | OnlyPod


def workspace_constraint(ref: WorkspaceRef | None, workspace: Workspace | None, runtime: str) -> WorkspaceConstraint:
    """SPEC §4, checked in exactly this order.

    1. no reference → no constraint;
    2. missing (or not the referenced one) → unavailable;
    3. ``spec.runtime`` differs from the Run's → unavailable, whatever the phase;
    4. ``Lost`` / ``Released`` → unavailable;
    5. ``Bound``, mode ``RuntimePodLocal`` (empty means it), non-empty ``boundPod`` → only that pod;
    6. ``Bound`` with an empty ``boundPod`` → unavailable (whatever the mode);
    7. anything else (``Pending``, an unknown phase, another mode) → no constraint.
    """
    if ref is None:
        return NoConstraint()
    if workspace is None or workspace.name != ref.name:
        return Unavailable()
    if workspace.runtime != runtime:
        return Unavailable()
    if workspace.phase in UNUSABLE_PHASES:
        return Unavailable()
    if workspace.phase == BOUND:
        if workspace.mode in ("", WORKSPACE_MODE_LOCAL) and workspace.bound_pod:
            return OnlyPod(workspace.bound_pod)
        if not workspace.bound_pod:
            return Unavailable()
    return NoConstraint()


def _reject_all(slot: PodSlot) -> str | None:
    return REJECT_WORKSPACE_UNAVAILABLE


@final
@dataclass(frozen=True, slots=True)
class WorkspacePlacement:
    name: ClassVar[str] = "WorkspacePlacement"
    reasons: ClassVar[frozenset[str]] = frozenset({REJECT_WORKSPACE_UNAVAILABLE, REJECT_WORKSPACE_PLACEMENT})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {
        REJECT_WORKSPACE_UNAVAILABLE: "constraints",
        REJECT_WORKSPACE_PLACEMENT: "constraints",
    }
    """Either waits for its workspace to change (the queue activates it on that event)."""
    fast_path: ClassVar[bool] = True
    """It reads only whether a pod is the workspace's pod (that pod is judged alone)."""

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        constraint = workspace_constraint(run.workspace, snapshot.workspace, run.runtime)
        if isinstance(constraint, NoConstraint):
            return Success(None)
        if isinstance(constraint, Unavailable):
            return Success(BatchFilter(_reject_all, _reject_every))
        bound = constraint.pod

        def pod_filter(slot: PodSlot) -> str | None:
            return None if slot.pod.name == bound else REJECT_WORKSPACE_PLACEMENT

        def select(slots: Sequence[PodSlot]) -> Selection:
            kept = [slot for slot in slots if slot.pod.name == bound]
            return rejected_as(REJECT_WORKSPACE_PLACEMENT, len(slots), kept)

        return Success(BatchFilter(pod_filter, select))

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        # Without a referenced name there is nothing truthful to name: the generic message stands.
        if run.workspace is None:
            return None
        return PendingMessage(WORKSPACE_RANK, waiting_for_workspace(run.workspace.name, run.runtime))

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        ref = run.workspace
        if ref is None:
            return "workspace"
        workspace = snapshot.workspace
        constraint = workspace_constraint(ref, workspace, run.runtime)
        if isinstance(constraint, OnlyPod):
            return f'workspace "{ref.name}" is bound to pod {constraint.pod}'
        if workspace is None or workspace.name != ref.name:
            return f'workspace "{ref.name}" does not exist'
        if workspace.runtime != run.runtime:
            return f'workspace "{ref.name}" is for runtime "{workspace.runtime}"'
        if workspace.phase == BOUND:
            return f'workspace "{ref.name}" is Bound to no pod'
        return f'workspace "{ref.name}" is {workspace.phase}'  # Lost or Released: the only other refusals'


def _reject_every(slots: Sequence[PodSlot]) -> Selection:
    return rejected_as(REJECT_WORKSPACE_UNAVAILABLE, len(slots), [])


_: FilterPlugin = WorkspacePlacement()
