"""Why a Run is (or is not) placed: the per-pod verdicts behind one cycle's plan.

``explain(snapshot)`` answers an operator's question about one Run with the
same plugins, in the same order, that ``plan_cycle`` runs:

- the plan itself is ``plan_cycle(snapshot)``, unchanged (so "what the
  scheduler would do now" cannot drift from what it does);
- every candidate pod gets a verdict: the first filter that rejects it, with
  the reason ``plan_cycle`` counts and a human detail (the detail may name
  pods, resources and selectors: it is for the operator's terminal, never for
  a status message), or "feasible";
- feasible pods carry the ``PodScore`` and rank of the plan's own ranking, so
  the order shown is exactly the order the scheduler binds by.

A Run held back only by its retry back-off (``Delay``) is explained as if it
were due now: the verdicts are what the cycle will see once the delay ends
(given the same cluster). A Run that ends before filtering (not Pending,
cancelled, invalid) gets no verdicts: nothing about the pods matters to it.

This is a purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from returns.pipeline import is_successful
from returns.result import Result

from kruntimes.pure.model import messages
from kruntimes.pure.framework.interface import PodFilter
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.planner import plan_cycle, precheck
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import (
    RUNNING,
    AffinityTerm,
    LabelSelector,
    PodSlot,
    Resources,
    Run,
    Snapshot,
    Target,
)
from kruntimes.pure.model.plan import Bind, CycleError, Delay, Plan, PodScore
from kruntimes.pure.model.objects import hosting_pods
from kruntimes.pure.plugins.workspace import OnlyPod, workspace_constraint
from kruntimes.pure.model.quantity import format_quantity
from kruntimes.pure.model.times import format_duration

__all__ = [
    "FEASIBLE",
    "Explanation",
    "PodVerdict",
    "explain",
    "selector_text",
    "unavailable_detail",
]

FEASIBLE: Final = "feasible"


@dataclass(frozen=True, slots=True)
class PodVerdict:
    """One candidate pod, as the cycle saw it."""

    slot: PodSlot
    """The pod and its usage (actual + assumed) at snapshot time."""
    plugin: str | None
    """The first filter that rejected the pod; ``None`` when it is feasible."""
    reason: str | None
    """That filter's reason (the one ``plan_cycle`` counts); ``None`` when feasible."""
    detail: str
    """Why, for a person: which condition failed, or ``feasible``."""
    score: PodScore | None = None
    """For a feasible pod of a cycle that ranked: the plan's own scores and total."""
    rank: int | None = None
    """1 for the pod the scheduler binds to, 2 for the next, …"""

    @property
    def pod(self) -> str:
        return self.slot.pod.name

    @property
    def feasible(self) -> bool:
        return self.plugin is None


@dataclass(frozen=True, slots=True)
class Explanation:
    """A plan and the verdicts behind it."""

    snapshot: Snapshot
    plan: Result[Plan, CycleError]
    """``plan_cycle(snapshot)``: what the scheduler would do now."""
    verdicts: tuple[PodVerdict, ...]
    """Feasible pods in rank order, then rejected pods by name; empty when pods do not matter."""
    evaluated: bool
    """The filters ran (the Run reached filtering, or only its retry back-off holds it)."""
    hypothetical: bool
    """The verdicts are for when the retry back-off ends (the plan is a ``Delay``)."""
    weights: tuple[tuple[str, int], ...]
    """Score plugins and weights, registration order (what each total is made of)."""
    error: CycleError | None = None
    """A plugin failed while computing verdicts (the plan says the same)."""


def explain(snapshot: Snapshot, registry: Registry = DEFAULT_REGISTRY) -> Explanation:
    """The plan for ``snapshot`` and one verdict per candidate pod (see the module docstring)."""
    plan = plan_cycle(snapshot, registry)
    run = snapshot.run
    early = precheck(snapshot)
    if run is None or (early is not None and not isinstance(early, Delay)):
        return Explanation(snapshot, plan, (), False, False, registry.weights)
    hypothetical = early is not None
    what_if = _due_now(snapshot, run) if hypothetical else snapshot
    placement = plan_cycle(what_if, registry) if hypothetical else plan
    verdicts_or_error = _filter_verdicts(run, what_if, registry)
    if isinstance(verdicts_or_error, CycleError):
        return Explanation(snapshot, plan, (), True, hypothetical, registry.weights, verdicts_or_error)
    verdicts = verdicts_or_error
    ranked = placement.value_or(None)
    if isinstance(ranked, Bind):
        verdicts = _ranked(verdicts, ranked.scores)
    error = None if is_successful(placement) else placement.failure()
    return Explanation(snapshot, plan, verdicts, True, hypothetical, registry.weights, error)


def _due_now(snapshot: Snapshot, run: Run) -> Snapshot:
    """The snapshot as the first cycle after the retry back-off will see it.

    ``attempt`` only feeds the back-off (SPEC §3.6): no plugin reads it, so
    resetting it changes nothing but the ``Delay``.
    """
    return replace(snapshot, run=replace(run, status=replace(run.status, attempt=0)))


def _filter_verdicts(run: Run, snapshot: Snapshot, registry: Registry) -> tuple[PodVerdict, ...] | CycleError:
    """PreFilter every plugin once, then each pod through the filters in order: first rejection wins."""
    prepared: list[tuple[str, PodFilter]] = []
    for entry in registry.filters:
        result = entry.plugin.prepare(run, snapshot)
        if not is_successful(result):
            return result.failure()
        pod_filter = result.unwrap()
        if pod_filter is not None:
            prepared.append((entry.name, pod_filter))
    verdicts: list[PodVerdict] = []
    for slot in snapshot.pods:
        for name, pod_filter in prepared:
            reason = pod_filter(slot)
            if reason is not None:
                verdicts.append(PodVerdict(slot, name, reason, _detail(reason, slot, run, snapshot)))
                break
        else:
            verdicts.append(PodVerdict(slot, None, None, FEASIBLE))
    return tuple(verdicts)


def _ranked(verdicts: tuple[PodVerdict, ...], scores: Sequence[PodScore]) -> tuple[PodVerdict, ...]:
    """Feasible pods in the plan's ranking order with their scores, then the rejected ones as given."""
    by_pod = {v.pod: v for v in verdicts}
    ranked = tuple(replace(by_pod[s.pod], score=s, rank=i) for i, s in enumerate(scores, 1) if s.pod in by_pod)
    shown = {s.pod for s in scores}
    return ranked + tuple(v for v in verdicts if v.pod not in shown)


# --- details: the condition behind each reason ------------------------------------------------


def _detail(reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
    if reason == messages.REJECT_RUNTIME_POD_UNAVAILABLE:
        return unavailable_detail(slot, run.requests, snapshot.now, snapshot.config.stale_after())
    if reason == messages.REJECT_RUN_AFFINITY:
        return _affinity_detail(slot.pod.name, run, snapshot.targets)
    if reason == messages.REJECT_RUN_ANTI_AFFINITY:
        return _anti_affinity_detail(slot.pod.name, run, snapshot.targets)
    if reason in (messages.REJECT_WORKSPACE_UNAVAILABLE, messages.REJECT_WORKSPACE_PLACEMENT):
        return _workspace_detail(run, snapshot)
    return reason


def unavailable_detail(slot: PodSlot, request: Resources, now: datetime, stale_after: timedelta) -> str:
    """Which part of ``RuntimePodAvailability`` failed, first failing check first (SPEC §1, §4)."""
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
            return f"required affinity term {index} ({_term_text(term)}): {why}"
    return messages.REJECT_RUN_AFFINITY


def _anti_affinity_detail(pod: str, run: Run, targets: Sequence[Target]) -> str:
    for index, term in enumerate(run.affinity.anti_required, 1):
        matching = [t for t in targets if t.pod == pod and term.selector.matches(t.labels)]
        if matching:
            assumed = sum(1 for t in matching if t.assumed)
            noun = "Run" if len(matching) == 1 else "Runs"
            extra = f", {assumed} assumed" if assumed else ""
            hosted = f"hosts {len(matching)} matching {noun}{extra}"
            return f"required anti-affinity term {index} ({_term_text(term)}): {hosted}"
    return messages.REJECT_RUN_ANTI_AFFINITY


def _workspace_detail(run: Run, snapshot: Snapshot) -> str:
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
    if workspace.phase == "Bound":
        return f'workspace "{ref.name}" is Bound to no pod'
    return f'workspace "{ref.name}" is {workspace.phase or "in no phase"}'


def _term_text(term: AffinityTerm) -> str:
    return selector_text(term.selector)


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
