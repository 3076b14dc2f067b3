"""``explain(snapshot)`` as a library caller gets it: the whole ``Explanation`` for a Run that
ends before filtering, one in retry back-off, one a plugin fails on, and with a caller's registry.

The rule it is checked against (the module docstring): the plan is ``plan_cycle(snapshot,
registry)``; a Run that ends before filtering gets no verdicts; one held only by its back-off
gets the verdicts and ranking of the cycle that follows it; a plugin error is the plan's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, final

from returns.result import Failure, Result, Success

from kruntimes.pure.explain import FEASIBLE, Explanation, PodVerdict, explain
from kruntimes.pure.framework.interface import ParkKind, PendingMessage, PodFilter
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, Registry
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import Bind, CycleError, Delay, Fail, PodScore, Skip
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.times import format_time
from tests.builders import NOW, active_run, decoded_run
from tests.pure.planning_world import slot, snapshot
from tests.pure.test_framework import FixedScore


def backing_off(name: str = "retry") -> Run:
    """A Run whose third attempt failed just now: its retry back-off holds it (a ``Delay``)."""
    return decoded_run(
        name,
        attempt=3,
        conditions=[{"type": "Running", "status": "False", "lastTransitionTime": format_time(NOW)}],
    )


@final
@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuses the pods named in ``pods`` (declared reason), or fails its prepare."""

    name: ClassVar[str] = "Refuse"
    reasons: ClassVar[frozenset[str]] = frozenset({"Refused"})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {"Refused": "capacity"}
    fast_path: ClassVar[bool] = False
    pods: frozenset[str] = frozenset()
    fail_prepare: bool = False
    undeclared: bool = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        if self.fail_prepare:
            return Failure(CycleError("PluginError", "Refuse could not prepare"))

        def pod_filter(slot: PodSlot) -> str | None:
            if slot.pod.name not in self.pods:
                return None
            return "Other" if self.undeclared else "Refused"

        return Success(pod_filter)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return f"refused ({reason})"


def refusing(plugin: Refuse, base: Registry = EMPTY_REGISTRY) -> Registry:
    return base.register_filter(plugin.name, lambda: plugin).unwrap()


def scoring(plugin: FixedScore, weight: int = 3, base: Registry = EMPTY_REGISTRY) -> Registry:
    return base.register_score(plugin.name, weight, lambda: plugin).unwrap()


# --- a Run that ends before filtering ---------------------------------------------------------------


def test_a_run_that_ends_before_filtering_is_explained_by_its_plan_alone() -> None:
    registry = scoring(FixedScore(7))
    cases = [
        (snapshot(None, [slot("p1")]), Skip("not found")),
        (snapshot(active_run("busy", "p1"), [slot("p1")]), Skip("not pending")),
        (snapshot(decoded_run("bad", requests={"runs": "500m"}), [slot("p1")]), None),
    ]
    for snap, skip in cases:
        exp = explain(snap, registry)
        assert exp == Explanation(snap, plan_cycle(snap, registry), (), False, False, (("Fixed", 3),))
        if skip is not None:
            assert exp.plan == Success(skip)
        else:
            assert isinstance(exp.plan.unwrap(), Fail)


def test_plugins_are_not_asked_about_a_run_that_ends_before_filtering() -> None:
    registry = refusing(Refuse(fail_prepare=True))
    snap = snapshot(decoded_run("gone", cancel=True), [slot("p1")])
    exp = explain(snap, registry)
    assert exp.error is None and exp.verdicts == () and not exp.evaluated


# --- a Run due now ------------------------------------------------------------------------------------


def test_a_due_run_gets_the_plans_ranking_then_the_refused_pods_in_snapshot_order() -> None:
    registry = scoring(FixedScore(7), base=refusing(Refuse(frozenset({"a", "c"}))))
    pods = [slot("a"), slot("b"), slot("c"), slot("d")]
    snap = snapshot(decoded_run("r"), pods)
    exp = explain(snap, registry)
    decided = plan_cycle(snap, registry).unwrap()
    assert isinstance(decided, Bind)
    assert decided.ranking == ("b", "d")
    assert exp == Explanation(
        snap,
        Success(decided),
        (
            PodVerdict(pods[1], None, None, FEASIBLE, decided.scores[0], 1),
            PodVerdict(pods[3], None, None, FEASIBLE, decided.scores[1], 2),
            PodVerdict(pods[0], "Refuse", "Refused", "refused (Refused)"),
            PodVerdict(pods[2], "Refuse", "Refused", "refused (Refused)"),
        ),
        True,
        False,
        (("Fixed", 3),),
    )
    assert [(v.pod, v.feasible) for v in exp.verdicts] == [("b", True), ("d", True), ("a", False), ("c", False)]
    assert decided.scores[0].total == 21


def test_a_pod_refused_by_a_filter_is_not_asked_of_the_filters_after_it() -> None:
    first = Refuse(frozenset({"a"}))
    registry = refusing(first, base=DEFAULT_REGISTRY)
    exp = explain(snapshot(decoded_run("r"), [slot("a", ready=False), slot("b")]), registry)
    assert [(v.pod, v.plugin, v.reason, v.detail) for v in exp.verdicts] == [
        ("b", None, None, FEASIBLE),
        ("a", "RuntimePodAvailability", "RuntimePodUnavailable", "pod is not Ready"),
    ]


# --- a Run in retry back-off --------------------------------------------------------------------------


def test_a_run_in_back_off_is_explained_as_the_next_cycle_of_the_callers_registry_sees_it() -> None:
    registry = scoring(FixedScore(7), weight=2, base=refusing(Refuse(frozenset({"a"}))))
    pods = [slot("a"), slot("b"), slot("c")]
    snap = snapshot(backing_off(), pods)
    plan = plan_cycle(snap, registry)
    assert isinstance(plan.unwrap(), Delay)
    exp = explain(snap, registry)
    assert exp.plan == plan and exp.snapshot == snap
    assert exp.evaluated and exp.hypothetical and exp.error is None
    assert exp.weights == (("Fixed", 2),)
    fixed = PodScore("b", (("Fixed", 7),), 14)
    assert exp.verdicts == (
        PodVerdict(pods[1], None, None, FEASIBLE, fixed, 1),
        PodVerdict(pods[2], None, None, FEASIBLE, PodScore("c", (("Fixed", 7),), 14), 2),
        PodVerdict(pods[0], "Refuse", "Refused", "refused (Refused)"),
    )


def test_a_run_in_back_off_whose_next_cycle_fails_reports_that_error() -> None:
    registry = scoring(FixedScore(500))
    snap = snapshot(backing_off(), [slot("p1")])
    exp = explain(snap, registry)
    assert isinstance(exp.plan.unwrap(), Delay)
    assert exp.error == CycleError("ScoreError", 'score plugin "Fixed" pod "p1" returned 500 outside 0..100')
    assert exp.evaluated and exp.hypothetical
    assert exp.verdicts == (PodVerdict(slot("p1"), None, None, FEASIBLE),)


# --- a plugin error -----------------------------------------------------------------------------------


def test_a_failed_prepare_is_the_plans_error_and_leaves_no_verdicts() -> None:
    for run, hypothetical in ((decoded_run("r"), False), (backing_off(), True)):
        registry = refusing(Refuse(fail_prepare=True))
        snap = snapshot(run, [slot("p1")])
        error = CycleError("PluginError", "Refuse could not prepare")
        exp = explain(snap, registry)
        assert exp == Explanation(snap, plan_cycle(snap, registry), (), True, hypothetical, (), error)
        if not hypothetical:
            assert exp.plan == Failure(error)


def test_an_undeclared_reason_is_the_plans_plugin_error_and_leaves_no_verdicts() -> None:
    registry = refusing(Refuse(frozenset({"p2"}), undeclared=True))
    snap = snapshot(decoded_run("r"), [slot("p1"), slot("p2")])
    error = CycleError("PluginError", "filter plugin \"Refuse\" returned undeclared reason 'Other'")
    assert explain(snap, registry) == Explanation(snap, Failure(error), (), True, False, (), error)


def test_a_score_error_keeps_the_verdicts_unranked_and_reports_the_plans_error() -> None:
    registry = scoring(FixedScore(500), base=refusing(Refuse(frozenset({"p2"}))))
    pods = [slot("p1"), slot("p2")]
    snap = snapshot(decoded_run("r"), pods)
    error = CycleError("ScoreError", 'score plugin "Fixed" pod "p1" returned 500 outside 0..100')
    assert explain(snap, registry) == Explanation(
        snap,
        Failure(error),
        (PodVerdict(pods[0], None, None, FEASIBLE), PodVerdict(pods[1], "Refuse", "Refused", "refused (Refused)")),
        True,
        False,
        (("Fixed", 3),),
        error,
    )
