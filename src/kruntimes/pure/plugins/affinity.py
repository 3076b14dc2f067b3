"""``RunAffinity``: required Run affinity and anti-affinity, with the Inter-Run Affinity bootstrap (SPEC §4).

Targets are the namespace's active Runs and assumed reservations that match at
least one of the Run's terms (``Snapshot.targets``); a pod hosts a matching
target when some target with ``target.pod == pod.name`` matches the term. The
topology is always the runtime pod (decode refuses any other key). This is a
purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import FilterPlugin, PodFilter
from kruntimes.pure.model.messages import REJECT_RUN_AFFINITY, REJECT_RUN_ANTI_AFFINITY
from kruntimes.pure.model.objects import AffinityTerm, Labels, PodSlot, Run, Snapshot, Target, selector_hosts
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.framework.batch import BatchFilter, Selection



def seedable(term: AffinityTerm, targets: Iterable[Target], run_labels: Labels) -> bool:
    """Inter-Run Affinity bootstrap: no target matches ``term`` and the Run's own labels do.

    So the first member of a homogeneous cohort may start it anywhere, while two
    Runs that each require only the *other's* labels never seed: neither matches
    its own term, so both wait until a real (or assumed) target appears.
    """
    selector = term.selector
    return selector.matches(run_labels) and not any(selector.matches(t.labels) for t in targets)


@final
@dataclass(frozen=True, slots=True)
class RunAffinity:
    name: ClassVar[str] = "RunAffinity"
    reasons: ClassVar[frozenset[str]] = frozenset({REJECT_RUN_AFFINITY, REJECT_RUN_ANTI_AFFINITY})

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        affinity = run.affinity
        if not affinity.required and not affinity.anti_required:
            return Success(None)
        # Pods satisfying every required term that is not seedable; None while unconstrained.
        # (Every target is on a pod, so no hosting pod means no matching target.)
        allowed: frozenset[str] | None = None
        for term in affinity.required:
            pods = selector_hosts(snapshot, term.selector)
            if not pods and term.selector.matches(run.labels):
                continue  # seedable: passes on every pod
            allowed = pods if allowed is None else allowed & pods
        forbidden: frozenset[str] = frozenset()
        for term in affinity.anti_required:
            forbidden |= selector_hosts(snapshot, term.selector)
        return Success(_pod_filter(allowed, forbidden))


def _pod_filter(allowed: frozenset[str] | None, forbidden: frozenset[str]) -> PodFilter | None:
    if allowed is None and not forbidden:
        return None

    def pod_filter(slot: PodSlot) -> str | None:
        name = slot.pod.name
        if allowed is not None and name not in allowed:
            return REJECT_RUN_AFFINITY
        if name in forbidden:
            return REJECT_RUN_ANTI_AFFINITY
        return None

    def select(slots: Sequence[PodSlot]) -> Selection:
        counts: dict[str, int] = {}
        kept = list(slots)
        if allowed is not None:
            kept = [slot for slot in kept if slot.pod.name in allowed]
            if len(kept) < len(slots):
                counts[REJECT_RUN_AFFINITY] = len(slots) - len(kept)
        if forbidden:
            before = len(kept)
            kept = [slot for slot in kept if slot.pod.name not in forbidden]
            if len(kept) < before:
                counts[REJECT_RUN_ANTI_AFFINITY] = before - len(kept)
        return kept, counts

    return BatchFilter(pod_filter, select)


_: FilterPlugin = RunAffinity()
