"""Laws of ``plan_cycle``, checked on generated worlds (hypothesis).

- determinism: the same snapshot gives the same plan;
- permutation invariance: the order of ``snapshot.pods`` and ``snapshot.targets`` changes nothing;
- a Bind's pod passes every filter, has the maximum total, and the ranking is exactly the
  feasible pods by total descending then name ascending;
- a Wait counts one rejection per pod and says one of the four §7 messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot, Target, Workspace
from kruntimes.pure.model.plan import Bind, Wait
from tests.pure.builders import affinity_json, at, decoded_run, decoded_workspace, term
from tests.pure.planning_world import plan, slot, snapshot, target

POD_NAMES = ["pod-a", "pod-b", "pod-c", "pod-d", "pod-e", "Pod-F", "pod-aa"]
LABELS = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["db", "web", "gold"]), max_size=2)
TERMS = [term({"app": "db"}), term({"app": "web"}), term({"tier": "gold"})]
MESSAGES = {
    'waiting for available runtime pods for runtime "python"',
    'waiting for available runtime pods satisfying required Run affinity for runtime "python"',
    'waiting for available runtime pods satisfying required Run anti-affinity for runtime "python"',
    'waiting for workspace "ws" placement for runtime "python"',
}


@st.composite
def pod_slots(draw: st.DrawFn, name: str) -> PodSlot:
    capacity = {"runs": str(draw(st.integers(1, 4)))}
    if draw(st.booleans()):
        capacity["cpu"] = draw(st.sampled_from(["1", "2", "3", "1500m"]))
    usage = {"runs": draw(st.integers(0, 4)), "cpu": draw(st.integers(0, 2))}
    return slot(
        name,
        capacity,
        usage,
        ready=draw(st.sampled_from([True, True, True, False])),
        heartbeat_at=at(-draw(st.sampled_from([0, 5, 15, 16]))),
    )


@st.composite
def runs(draw: st.DrawFn) -> Run:
    weighted = st.lists(st.tuples(st.integers(1, 100), st.sampled_from(TERMS)), max_size=2)
    return decoded_run(
        "r",
        labels=draw(LABELS),
        requests={"runs": str(draw(st.integers(1, 2))), "cpu": str(draw(st.integers(0, 1)))},
        affinity=affinity_json(
            required=draw(st.lists(st.sampled_from(TERMS), max_size=2)),
            preferred=draw(weighted),
            anti_required=draw(st.lists(st.sampled_from(TERMS), max_size=1)),
            anti_preferred=draw(weighted),
        ),
        workspace=draw(st.sampled_from([None, None, "ws"])),
    )


@dataclass(frozen=True)
class World:
    run: Run
    pods: tuple[PodSlot, ...]
    targets: tuple[Target, ...]
    workspace: Workspace | None

    def snapshot(self) -> Snapshot:
        return snapshot(self.run, self.pods, self.targets, self.workspace)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    names = draw(st.lists(st.sampled_from(POD_NAMES), unique=True, max_size=len(POD_NAMES)))
    pods = tuple(draw(pod_slots(name)) for name in names)
    targets = tuple(
        target(pod, labels, uid=f"t{i}", assumed=assumed)
        for i, (pod, labels, assumed) in enumerate(
            draw(st.lists(st.tuples(st.sampled_from(POD_NAMES + ["elsewhere"]), LABELS, st.booleans()), max_size=6))
        )
    )
    workspace = draw(
        st.sampled_from(
            [
                None,
                decoded_workspace("ws", bound_pod="pod-b"),
                decoded_workspace("ws", phase="Pending"),
                decoded_workspace("ws", phase="Lost"),
            ]
        )
    )
    return World(draw(runs()), pods, targets, workspace)


@given(worlds())
def test_plan_cycle_is_deterministic(world: World) -> None:
    assert plan(world.snapshot()) == plan(world.snapshot())


@given(worlds(), st.data())
def test_plan_is_invariant_under_permutation_of_pods_and_targets(world: World, data: st.DataObject) -> None:
    pods = data.draw(st.permutations(world.pods))
    targets = data.draw(st.permutations(world.targets))
    shuffled = World(world.run, tuple(pods), tuple(targets), world.workspace)
    assert plan(shuffled.snapshot()) == plan(world.snapshot())


def feasible_names(world: World) -> set[str]:
    snap = world.snapshot()
    filters = [entry.plugin.prepare(world.run, snap).unwrap() for entry in DEFAULT_REGISTRY.filters]
    return {s.pod.name for s in world.pods if all(f is None or f(s) is None for f in filters)}


@given(worlds())
def test_a_bind_picks_a_feasible_pod_with_the_maximum_total(world: World) -> None:
    result = plan(world.snapshot())
    feasible = feasible_names(world)
    if not isinstance(result, Bind):
        assert isinstance(result, Wait)
        assert not feasible
        return
    assert result.pod in feasible
    assert set(result.ranking) == feasible and len(result.ranking) == len(feasible)
    totals = {s.pod: s.total for s in result.scores}
    assert totals[result.pod] == max(totals.values())
    assert list(result.ranking) == sorted(result.ranking, key=lambda name: (-totals[name], name))
    for score in result.scores:
        assert all(0 <= value <= 100 for _, value in score.by_plugin)
        weights = dict(DEFAULT_REGISTRY.weights)
        assert score.total == sum(value * weights[name] for name, value in score.by_plugin)
    assert sum(count for _, _, count in result.rejections) == len(world.pods) - len(feasible)


@given(worlds())
def test_a_wait_counts_every_pod_once_and_names_no_pod(world: World) -> None:
    result = plan(world.snapshot())
    if isinstance(result, Wait):
        assert sum(count for _, _, count in result.rejections) == len(world.pods)
        assert result.message in MESSAGES
