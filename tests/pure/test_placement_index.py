"""Placement from the load index chooses exactly what filtering and scoring every pod chooses.

Worlds come from :mod:`tests.pure.ranking_world` (ties, multi-resource requests,
stale and unavailable pods, ledger reservations, required and preferred terms,
workspaces), optionally grown by many copies of their pods so that ``LeastLoaded``
ranks over more than 100 pods (where neighbouring ranks share a score) and load
classes hold many pods; profiles drop plugins, reorder them and change weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st
from returns.result import Success

from kruntimes.pure.framework.interface import FilterPlugin, ScorePlugin
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, Registry, must
from kruntimes.pure.model.objects import RuntimePod, Snapshot
from kruntimes.pure.model.plan import Bind, Wait
from kruntimes.pure.placement import place
from kruntimes.pure.planner import plan_cycle, precheck
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.availability import RuntimePodAvailability
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.plugins.preferred import PreferredRunAffinity
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.plugins.workspace import WorkspacePlacement
from kruntimes.pure.snapshot import CandidateSlots
from kruntimes.pure.state.cluster import EMPTY_STATE, Event, apply, from_objects
from tests.pure.ranking_world import RUNTIME, World, worlds

FILTERS: tuple[tuple[str, Callable[[], FilterPlugin]], ...] = (
    ("RuntimePodAvailability", RuntimePodAvailability),
    ("RunAffinity", RunAffinity),
    ("WorkspacePlacement", WorkspacePlacement),
)


@st.composite
def registries(draw: st.DrawFn) -> Registry:
    if draw(st.integers(0, 2)) == 0:
        return DEFAULT_REGISTRY
    registry = EMPTY_REGISTRY
    for name, factory in draw(st.permutations(FILTERS)):
        if draw(st.integers(0, 4)):
            registry = must(registry.register_filter(name, factory))
    scores: list[tuple[str, Callable[[], ScorePlugin]]] = [
        ("PreferredRunAffinity", PreferredRunAffinity),
        ("LeastLoaded", LeastLoaded),
    ]
    for score_name, score_factory in draw(st.permutations(scores)):
        if draw(st.integers(0, 4)):
            weight = draw(st.sampled_from([1, 1, 2, 3, 7]))
            registry = must(registry.register_score(score_name, weight, score_factory))
    return registry


@st.composite
def grown(draw: st.DrawFn) -> World:
    """A world, maybe with up to 160 copies of its candidate pods (same capacity, health
    and heartbeat; names sorting before, between and after the originals)."""
    world = draw(worlds(cohort=draw(st.booleans())))
    copies = draw(st.sampled_from([0, 0, 3, 40, 160]))
    if not copies:
        return world
    pods = [o for o in world.objects if isinstance(o, RuntimePod) and o.runtime == RUNTIME and o.namespace == "default"]
    extra = []
    for i in range(copies):
        source = pods[i % len(pods)]
        name = f"{draw(st.sampled_from(['A', 'pc', 'z']))}{i:03d}"
        extra.append(dataclasses.replace(source, name=name, uid=f"uid-{name}"))
    return dataclasses.replace(world, objects=world.objects + tuple(extra))


def scanned(snapshot: Snapshot) -> Snapshot:
    """The same snapshot with its slots as a plain tuple: the planner scans it."""
    return dataclasses.replace(snapshot, pods=tuple(snapshot.pods))


@settings(max_examples=300)
@given(grown(), registries())
def test_the_index_chooses_the_pod_scores_and_rejections_of_the_full_scan(world: World, registry: Registry) -> None:
    snapshot = world.snapshot()
    run = snapshot.run
    if run is None or precheck(snapshot) is not None:
        event("ended before filtering")
        return
    assert isinstance(snapshot.pods, CandidateSlots)
    placed = place(run, snapshot, registry, max_classes=10**6, singled_out_share=0, min_pods=0)
    full = plan_cycle(scanned(snapshot), registry)
    if placed is None:
        event("scan only")
        assert not snapshot.pods or snapshot.now.tzinfo is None
        return
    assert isinstance(placed, Success) and isinstance(full, Success)
    plan, chosen = placed.unwrap()
    expected = full.unwrap()
    event(f"{type(expected).__name__}, {len(snapshot.pods)} pods" if len(snapshot.pods) < 10 else f"{type(expected).__name__}, many pods")
    assert type(plan) is type(expected)
    if isinstance(expected, Wait):
        assert plan == expected
        return
    assert isinstance(plan, Bind) and isinstance(expected, Bind)
    assert (plan.pod, plan.pod_uid, plan.rejections) == (expected.pod, expected.pod_uid, expected.rejections)
    assert chosen == expected.scores[0]
    assert len(plan.ranking) == len(expected.ranking)
    # Read later, the index's plan ranks every feasible pod as the scan does.
    assert tuple(plan.ranking) == tuple(expected.ranking) and tuple(plan.scores) == tuple(expected.scores)
    if len(expected.ranking) > 101 and len({row.by_plugin for row in expected.scores[:3]}) < 3:
        event("neighbouring ranks share a score")


@settings(max_examples=100)
@given(grown())
def test_plan_cycle_plans_from_the_index_as_it_plans_by_scanning(world: World) -> None:
    snapshot = world.snapshot()
    assert plan_cycle(snapshot) == plan_cycle(scanned(snapshot))


@settings(max_examples=100)
@given(grown(), st.data())
def test_the_load_index_after_events_is_the_index_built_at_once(world: World, data: st.DataObject) -> None:
    """Heartbeats (earlier and later), usage changes and pods coming and going keep the
    index as a bulk build has it."""
    objects = list(data.draw(st.permutations(world.objects)))
    state = EMPTY_STATE
    for obj in objects:
        state = apply(state, Event("ADDED", obj))
    pods = [o for o in objects if isinstance(o, RuntimePod)]
    gone = data.draw(st.lists(st.sampled_from(range(len(pods))), max_size=5, unique=True)) if pods else []
    for at in gone:
        state = apply(state, Event("DELETED", pods[at]))
        objects = [o for o in objects if o is not pods[at]]
    alive = [o for o in objects if isinstance(o, RuntimePod)]
    beats = data.draw(st.lists(st.sampled_from(range(len(alive))), max_size=5, unique=True)) if alive else []
    for at in beats:
        pod = alive[at]
        seconds = data.draw(st.sampled_from([-600, -1, 1, 5]))
        beat = dataclasses.replace(pod, heartbeat_at=None if pod.heartbeat_at is None else pod.heartbeat_at + timedelta(seconds=seconds))
        state = apply(state, Event("MODIFIED", beat))
        objects = [beat if o is pod else o for o in objects]
    built = from_objects(objects)
    for namespace, runtime in {(p.namespace, p.runtime) for p in pods if p.runtime}:
        got, want = state.load_index(namespace, runtime), built.load_index(namespace, runtime)
        if want is None:
            assert got is None
            continue
        assert got is not None
        assert dict(got.classes.items()) == dict(want.classes.items())
        assert min(got.probe_mins) == min(want.probe_mins)
        assert got.slots() == want.slots()
