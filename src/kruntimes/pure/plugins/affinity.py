"""``RunAffinity``: required Run affinity and anti-affinity, with the Inter-Run Affinity bootstrap (SPEC §4).

Targets are the namespace's active Runs and assumed reservations that match at
least one of the Run's terms (``Snapshot.targets``); a pod hosts a matching
target when some target with ``target.pod == pod.name`` matches the term. The
topology is always the runtime pod (decode refuses any other key).

A Run waiting on a required affinity term says so first (rank 300), then one
waiting on a required anti-affinity term (rank 200): both outrank a workspace
placement (100) and the generic message (SPEC §7). This is a purely
computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import FilterPlugin, ParkKind, PendingMessage, PodFilter
from kruntimes.pure.model.messages import waiting_for_affinity, waiting_for_anti_affinity
from kruntimes.pure.model.objects import (
    AffinityTerm,
    LabelSelector,
    Labels,
    PodSlot,
    Run,
    Snapshot,
    Target,
    hosting_pods,
    selector_hosts,
)
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.framework.batch import BatchFilter, Selection

REJECT_RUN_AFFINITY: Final = "UnsatisfiedRunAffinity"
REJECT_RUN_ANTI_AFFINITY: Final = "UnsatisfiedRunAntiAffinity"
AFFINITY_RANK: Final = 300
ANTI_AFFINITY_RANK: Final = 200


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
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {REJECT_RUN_AFFINITY: "constraints", REJECT_RUN_ANTI_AFFINITY: "constraints"}
    """Either waits for the Runs its terms select to come or go (their labels), not for room."""
    fast_path: ClassVar[bool] = True
    """It reads only whether a pod hosts a target of a required term (those pods are judged alone)."""

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

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        if REJECT_RUN_AFFINITY in reasons:
            return PendingMessage(AFFINITY_RANK, waiting_for_affinity(run.runtime))
        if REJECT_RUN_ANTI_AFFINITY in reasons:
            return PendingMessage(ANTI_AFFINITY_RANK, waiting_for_anti_affinity(run.runtime))
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        if reason == REJECT_RUN_AFFINITY:
            return _affinity_detail(slot.pod.name, run, snapshot.targets)
        return _anti_affinity_detail(slot.pod.name, run, snapshot.targets)


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


def _affinity_detail(pod: str, run: Run, targets: Sequence[Target]) -> str:
    """The first required term the pod fails (one that no target satisfies on it and that cannot seed)."""
    for index, term in enumerate(run.affinity.required, 1):
        hosts = hosting_pods(term, targets)
        if not hosts and term.selector.matches(run.labels):
            continue  # seedable
        if pod not in hosts:
            if hosts:
                why = f"hosts no matching Run (matching Runs are on {', '.join(sorted(hosts))})"
            else:
                why = "no active Run in the namespace matches it, and the Run's own labels do not (cannot seed)"
            return f"required affinity term {index} ({selector_text(term.selector)}): {why}"
    return REJECT_RUN_AFFINITY


def _anti_affinity_detail(pod: str, run: Run, targets: Sequence[Target]) -> str:
    for index, term in enumerate(run.affinity.anti_required, 1):
        matching = [t for t in targets if t.pod == pod and term.selector.matches(t.labels)]
        if matching:
            assumed = sum(1 for t in matching if t.assumed)
            noun = "Run" if len(matching) == 1 else "Runs"
            extra = f", {assumed} assumed" if assumed else ""
            hosted = f"hosts {len(matching)} matching {noun}{extra}"
            return f"required anti-affinity term {index} ({selector_text(term.selector)}): {hosted}"
    return REJECT_RUN_ANTI_AFFINITY


def selector_text(selector: LabelSelector) -> str:
    """``app=db,tier in (gold,silver),!legacy``: the selector as ``kubectl -l`` would take it."""
    parts: list[str] = []
    for requirement in selector.requirements:
        values = sorted(requirement.values)
        if requirement.operator == "In":
            listed = ",".join(values)
            parts.append(f"{requirement.key}={listed}" if len(values) == 1 else f"{requirement.key} in ({listed})")
        elif requirement.operator == "NotIn":
            parts.append(f"{requirement.key} notin ({','.join(values)})")
        elif requirement.operator == "Exists":
            parts.append(requirement.key)
        else:
            parts.append(f"!{requirement.key}")
    return ",".join(parts) or "everything"


_: FilterPlugin = RunAffinity()
