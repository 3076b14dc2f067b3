"""Why a Run is (or is not) placed: the per-pod verdicts behind one cycle's plan.

``explain(snapshot)`` answers an operator's question about one Run with the
same plugins, in the same order, that ``plan_cycle`` runs:

- the plan itself is ``plan_cycle(snapshot)``, unchanged (so "what the
  scheduler would do now" cannot drift from what it does);
- every candidate pod gets a verdict: the first filter that rejects it, with
  the reason ``plan_cycle`` counts and a human detail, the plugin's own
  ``explain`` answer (it may name pods, resources and selectors: it is for the
  operator's terminal, never for a status message), or "feasible";
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
from typing import Final

from returns.pipeline import is_successful
from returns.result import Result

from kruntimes.pure.framework.interface import FilterPlugin, PodFilter
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.framework.runtime import undeclared_reason
from kruntimes.pure.planner import plan_cycle, precheck
from kruntimes.pure.plugins.affinity import selector_text
from kruntimes.pure.plugins.availability import unavailable_detail
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import Bind, CycleError, Delay, Plan, PodScore

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
    """PreFilter every plugin once, then each pod through the filters in order: first rejection wins.

    The detail is the rejecting plugin's own ``explain``; an undeclared reason is the
    ``PluginError`` the cycle itself fails with, and no plugin is asked to explain it.
    """
    prepared: list[tuple[str, FilterPlugin, PodFilter]] = []
    for entry in registry.filters:
        result = entry.plugin.prepare(run, snapshot)
        if not is_successful(result):
            return result.failure()
        pod_filter = result.unwrap()
        if pod_filter is not None:
            prepared.append((entry.name, entry.plugin, pod_filter))
    verdicts: list[PodVerdict] = []
    for slot in snapshot.pods:
        for name, plugin, pod_filter in prepared:
            reason = pod_filter(slot)
            if reason is not None:
                if reason not in plugin.reasons:
                    return undeclared_reason(name, reason)
                verdicts.append(PodVerdict(slot, name, reason, plugin.explain(reason, slot, run, snapshot)))
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
