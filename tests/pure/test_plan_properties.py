"""Laws of ``plan_cycle``, checked on generated worlds (hypothesis).

Worlds come from :func:`tests.pure.ranking_world.worlds` (pods, Runs, workspaces,
ledger reservations; the snapshot is cut with ``snapshot.take``) and every plan is
compared with :mod:`tests.pure.spec_oracle`, a naive transcription of SPEC §1, §2,
§4, §5 and §7 that shares no code with the plugins, the framework or the planner:

- Bind iff the oracle finds a feasible pod (Runs and reservations bound to a pod
  deleted or replaced under its name counting nothing, SPEC §1); the pod, its uid,
  the whole ranking, every pod's per-plugin normalized scores and total, and the
  rejection counts per (plugin, reason) are the oracle's; a Wait's message and rejections are too, and
  a Run with a bad request fails with ``InvalidResources``;
- determinism: the same world gives the same plan;
- permutation invariance: neither the order of the objects the state is built
  from, nor the order of ``snapshot.pods`` and ``snapshot.targets`` (with the
  hosting pods derived from the targets instead of the state's index), changes
  the plan;
- a Bind's ranking is by total descending then name, and totals are weighted sums.

What the generated worlds exercise, over 2,000 examples (the ``thorough`` profile;
``ci`` runs 60 per property)::

    HYPOTHESIS_PROFILE=thorough .venv/bin/pytest -q tests/pure/test_plan_properties.py \\
        -k oracle --hypothesis-show-statistics

Measured on this generator (2026-12-05; the generate phase of 2,000 examples,
percent of examples; a "tie" is a Bind whose two best pods have the same total,
so the name decides; "equal keys"/"equal preferred" are Binds in which two
feasible pods share a LeastLoaded key / a preferred raw score; "former pod" is a
world in which an active Run or a reservation is bound to another uid of a
candidate pod's name, so SPEC §1 leaves it out)::

                                        worlds()   worlds(cohort=True)
    Bind, >= 2 feasible pods              46.9 %        36.8 %
    Bind, 1 feasible pod                  12.9 %        16.1 %
    Wait: no available pod                13.3 %        11.6 %
    Wait: required affinity               16.6 %        26.0 %
    Wait: workspace                        6.4 %         6.5 %
    Wait: required anti-affinity           1.3 %         0.0 %
    Fail (InvalidResources)                1.0 %         1.0 %
    tie decided by name                   29.3 %        22.9 %
    equal LeastLoaded keys                34.8 %        26.8 %
    equal preferred scores                43.7 %        34.9 %
    a required term is seedable            5.0 %        65.1 %
    a candidate's former pod holds Runs   43.4 %        35.3 %
"""

from __future__ import annotations

import dataclasses

from hypothesis import event, given
from hypothesis import strategies as st

from kruntimes.pure.model.plan import Bind, Fail, Plan, Wait
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from tests.pure.ranking_world import World, worlds
from tests.pure.spec_oracle import OracleBind, OracleFail, OracleWait

__all__ = ["World", "worlds"]
"""Other planning properties (the batch filters, ``explain``) draw from these worlds too."""

MESSAGE_KINDS = {
    'waiting for available runtime pods for runtime "python"': "no available pod",
    'waiting for available runtime pods satisfying required Run affinity for runtime "python"': "affinity",
    'waiting for available runtime pods satisfying required Run anti-affinity for runtime "python"': "anti-affinity",
    'waiting for workspace "ws" placement for runtime "python"': "workspace",
}


def planned(world: World) -> Plan:
    return plan_cycle(world.snapshot()).unwrap()


def record(plan: Plan, facts: frozenset[str]) -> None:
    """Hypothesis events for the distribution the module docstring reports."""
    if isinstance(plan, Bind):
        event("Bind, 1 feasible pod" if len(plan.ranking) == 1 else "Bind, >= 2 feasible pods")
    elif isinstance(plan, Wait):
        event(f"Wait: {MESSAGE_KINDS.get(plan.message, plan.message)}")
    else:
        event(f"{type(plan).__name__}")
    for fact in sorted(facts):
        if isinstance(plan, Bind) or fact in ("a required term is seedable", "a candidate's former pod holds Runs"):
            event(fact)


@given(worlds())
def test_plan_cycle_decides_what_the_spec_oracle_decides(world: World) -> None:
    agrees_with_the_oracle(world)


@given(worlds(cohort=True))
def test_plan_cycle_seeds_a_cohort_as_the_spec_oracle_does(world: World) -> None:
    agrees_with_the_oracle(world)


def agrees_with_the_oracle(world: World) -> None:
    plan = planned(world)
    expected = world.oracle()
    record(plan, getattr(expected, "facts", frozenset()))
    if isinstance(expected, OracleFail):
        assert isinstance(plan, Fail) and plan.reason == expected.reason
    elif isinstance(expected, OracleWait):
        assert isinstance(plan, Wait), f"planned {plan}, the spec says wait: {expected}"
        assert (plan.message, plan.rejections, plan.reason) == (expected.message, expected.rejections, "Unschedulable")
    else:
        assert isinstance(expected, OracleBind)
        assert isinstance(plan, Bind), f"planned {plan}, the spec says bind: {expected}"
        assert (plan.pod, plan.pod_uid) == (expected.pod, expected.pod_uid)
        assert tuple(plan.ranking) == expected.ranking
        assert [(s.pod, tuple(s.by_plugin), s.total) for s in plan.scores] == list(expected.scores)
        assert plan.rejections == expected.rejections


@given(worlds())
def test_plan_cycle_is_deterministic(world: World) -> None:
    assert planned(world) == planned(world)


@given(worlds(), st.data())
def test_plan_is_invariant_under_permutation_of_objects_pods_and_targets(world: World, data: st.DataObject) -> None:
    expected = planned(world)
    objects = data.draw(st.permutations(world.objects))
    reordered = dataclasses.replace(world, objects=tuple(objects), reservations=tuple(data.draw(st.permutations(world.reservations))))
    assert planned(reordered) == expected
    snap = world.snapshot()
    shuffled = dataclasses.replace(
        snap,
        pods=tuple(data.draw(st.permutations(snap.pods))),
        targets=tuple(data.draw(st.permutations(tuple(snap.targets)))),
        hosts=None,
    )
    assert plan_cycle(shuffled).unwrap() == expected


@given(worlds())
def test_a_bind_ranks_by_total_then_name_and_totals_are_weighted_sums(world: World) -> None:
    plan = planned(world)
    if not isinstance(plan, Bind):
        return
    totals = {s.pod: s.total for s in plan.scores}
    assert plan.pod == plan.ranking[0] and totals[plan.pod] == max(totals.values())
    assert list(plan.ranking) == sorted(plan.ranking, key=lambda name: (-totals[name], name))
    weights = dict(DEFAULT_REGISTRY.weights)
    for score in plan.scores:
        assert all(0 <= value <= 100 for _, value in score.by_plugin)
        assert score.total == sum(value * weights[name] for name, value in score.by_plugin)
    candidates = len(world.snapshot().pods)
    assert sum(count for _, _, count in plan.rejections) == candidates - len(plan.ranking)


@given(worlds())
def test_a_wait_counts_every_pod_once_and_names_no_pod(world: World) -> None:
    plan = planned(world)
    if isinstance(plan, Wait):
        assert sum(count for _, _, count in plan.rejections) == len(world.snapshot().pods)
        assert plan.message in MESSAGE_KINDS
