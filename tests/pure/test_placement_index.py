"""Placement from the load index chooses exactly what filtering and scoring every pod chooses.

Worlds come from :mod:`tests.pure.ranking_world` (ties, multi-resource requests,
stale and unavailable pods, ledger reservations, required and preferred terms,
workspaces), optionally grown by many copies of their pods so that ``LeastLoaded``
ranks over more than 100 pods (where neighbouring ranks share a score) and load
classes hold many pods; profiles drop plugins, reorder them and change weights.
These are compared with the scan, the index's size limits lifted.

At the index's own scale (``MIN_PODS`` pods and more, its limits as they are), the
worlds of :mod:`tests.pure.large_world` are compared with the SPEC oracle
(:mod:`tests.pure.spec_oracle`); directed tests pin each decision of
``placement.place`` and of the index's chunks: a unit of several reserved pods, the
chunks skipped and those looked at, a chunk emptied by deletions, and each case left
to the scan.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import ClassVar, NamedTuple, final

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from kruntimes.pure.framework.batch import BatchFilter, Selection, rejected_as
from kruntimes.pure.framework.interface import FilterPlugin, ParkKind, PendingMessage, PodFilter, PodScorer, ScorePlugin
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, Registry, must
from kruntimes.pure.model.objects import NEVER_US, Object, PodSlot, Reservation, Run, RuntimePod, Snapshot, epoch_us
from kruntimes.pure.model.plan import Bind, CycleError, Plan, PodScore, Wait
from kruntimes.pure.placement import MAX_CLASSES, MIN_PODS, Placed, place, proven_for
from kruntimes.pure.planner import plan_cycle, precheck
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.availability import RuntimePodAvailability
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.plugins.preferred import PreferredRunAffinity
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.plugins.workspace import WorkspacePlacement
from kruntimes.pure.snapshot import CandidateSlots
from kruntimes.pure.state.cluster import EMPTY_STATE, NAIVE_PROBE, NO_PROBE, Event, apply, from_objects
from tests.conftest import examples, reached
from tests.builders import NOW, active_run, affinity_json, decoded_pod, decoded_run, decoded_workspace, term
from tests.pure.large_world import large_worlds, renamed
from tests.pure.ranking_world import NAMESPACE, RUNTIME, World, worlds
from tests.pure.spec_oracle import OracleBind
from tests.pure.test_plan_properties import matches_the_oracle

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


@settings(max_examples=examples(300))
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
    assert isinstance(full, Success)
    plan, chosen = placed
    expected = full.unwrap()
    event(f"{type(expected).__name__}, {len(snapshot.pods)} pods" if len(snapshot.pods) < 10 else f"{type(expected).__name__}, many pods")
    assert type(plan) is type(expected)
    if isinstance(expected, Wait):
        assert plan == expected
        return
    assert isinstance(plan, Bind) and isinstance(expected, Bind)
    assert (plan.pod, plan.pod_uid, plan.rejections) == (expected.pod, expected.pod_uid, expected.rejections)
    assert chosen == expected.scores[0]
    assert (len(plan.ranking), len(plan.scores)) == (len(expected.ranking), len(expected.scores))
    # Read later, the index's plan ranks every feasible pod as the scan does.
    assert tuple(plan.ranking) == tuple(expected.ranking) and tuple(plan.scores) == tuple(expected.scores)
    if len(expected.ranking) > 101 and len({row.by_plugin for row in expected.scores[:3]}) < 3:
        event("neighbouring ranks share a score")


@settings(max_examples=examples(100))
@given(grown())
def test_plan_cycle_plans_from_the_index_as_it_plans_by_scanning(world: World) -> None:
    snapshot = world.snapshot()
    assert plan_cycle(snapshot) == plan_cycle(scanned(snapshot))


@settings(max_examples=examples(100))
@given(grown(), st.data())
def test_the_load_index_after_events_is_the_index_built_at_once(world: World, data: st.DataObject) -> None:
    """Heartbeats (earlier and later), usage changes and pods coming and going (one by one,
    and a block of consecutive names, which empties whole chunks) keep the index as a
    bulk build has it, and each chunk's earliest heartbeat that of its pods."""
    objects = list(data.draw(st.permutations(world.objects)))
    state = EMPTY_STATE
    for obj in objects:
        state = apply(state, Event("ADDED", obj))
    pods = [o for o in objects if isinstance(o, RuntimePod)]
    gone = data.draw(st.lists(st.sampled_from(range(len(pods))), max_size=5, unique=True)) if pods else []
    ordered = sorted(range(len(pods)), key=lambda at: (pods[at].namespace, pods[at].runtime, pods[at].name))
    start = data.draw(st.integers(0, len(ordered)))
    block = ordered[start : start + data.draw(st.sampled_from([0, 40, 70]))]
    for at in dict.fromkeys(gone + block):
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
        assert got.probe_mins == tuple(map(earliest_heartbeat, got.chunks))
        assert got.slots() == want.slots()


def earliest_heartbeat(chunk: Iterable[PodSlot]) -> int:
    """What the index keeps per chunk: the earliest heartbeat (µs) of a pod that may be
    available; below every cutoff when a pod's is naive (judged alone); none: above all."""
    probes = [slot.pod.available_probe_us for slot in chunk]
    if None in probes:
        return NAIVE_PROBE
    return min((p for p in probes if p is not None and p != NEVER_US), default=NO_PROBE)


# --- at the index's own scale: the SPEC oracle --------------------------------------------------


class Decided(NamedTuple):
    snapshot: Snapshot
    plan: Plan
    placed: Placed | None
    """What the load index decided; ``None``: the cycle ended before the filters, or the scan decided."""


def decided_as_the_oracle_says(world: World) -> Decided:
    """The cycle's plan is the oracle's, and so is what the index computed itself: the
    chosen pod's scores and the count of feasible pods (the ranking is the scan's,
    computed when read)."""
    snapshot = world.snapshot()
    expected = world.oracle()
    plan = plan_cycle(snapshot).unwrap()
    matches_the_oracle(plan, expected)
    run = snapshot.run
    if run is None or precheck(snapshot) is not None:
        return Decided(snapshot, plan, None)
    placed = place(run, snapshot, DEFAULT_REGISTRY)
    if placed is not None and isinstance(expected, OracleBind):
        pod, by_plugin, total = expected.scores[0]
        assert placed.chosen == PodScore(pod, by_plugin, total)
    return Decided(snapshot, plan, placed)


INDEX_PATHS = (
    "the index decided",
    "the index decided: Bind",
    "the index decided: Wait",
    "the scan decided",
    "a unit of several reserved pods",
    "fresh chunks skipped, stale ones looked at",
    "a chunk emptied by deletions",
    "pods hosting targets judged alone",
    "the workspace's pod judged alone",
    "the top total tied among many pods: the name decides",
)
"""What the large worlds must reach at every profile's size (CI's included)."""


def index_paths(world: World, decided: Decided) -> set[str]:
    """Which of :data:`INDEX_PATHS` (and more) the world's cycle went through."""
    snapshot, plan, placed = decided
    pods = snapshot.pods
    if not isinstance(pods, CandidateSlots):
        return {"no candidate pod"}
    taken: set[str] = set()
    if placed is None:
        taken.add("the scan decided")
    else:
        taken |= {"the index decided", f"the index decided: {type(placed.plan).__name__}"}
        run = snapshot.run
        assert run is not None
        if run.affinity.all_terms() and snapshot.hosts and any(snapshot.hosts.values()):
            taken.add("pods hosting targets judged alone")
        workspace = snapshot.workspace
        if workspace is not None and workspace.bound_pod and pods.load_index.slot(workspace.bound_pod):
            taken.add("the workspace's pod judged alone")
    shifted = Counter(slot.load_class for _, slot in pods.moved.values())
    if shifted and max(shifted.values()) > 1:
        taken.add("a unit of several reserved pods")
    cutoff = epoch_us(snapshot.now - snapshot.config.stale_after())
    looked_at = {low < cutoff for low in pods.load_index.probe_mins}
    if looked_at == {True, False}:
        taken.add("fresh chunks skipped, stale ones looked at")
    if world.listed is not None:
        listed = from_objects(world.listed).load_index(NAMESPACE, RUNTIME)
        gone = {e.obj.name for e in world.events if e.type == "DELETED"}
        if listed is not None and any(gone.issuperset(names) for names in listed.names):
            taken.add("a chunk emptied by deletions")
    if isinstance(plan, Bind) and len(plan.ranking) > 100 and plan.scores[0].total == plan.scores[1].total:
        taken.add("the top total tied among many pods: the name decides")
    return taken


LARGE = settings(
    max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@LARGE
@given(large_worlds())
def test_the_index_plans_worlds_of_its_own_scale_as_the_spec_oracle_does(world: World) -> None:
    decided = decided_as_the_oracle_says(world)
    for path in sorted(index_paths(world, decided)):
        event(path)


def test_the_large_worlds_reach_every_path_of_the_index() -> None:
    seen = reached(large_worlds(), lambda world: index_paths(world, decided_as_the_oracle_says(world)), 20)
    assert not set(INDEX_PATHS) - set(seen), f"never reached: {sorted(set(INDEX_PATHS) - set(seen))}"


# --- directed: one test per decision of the index ----------------------------------------------

FOUR = decoded_pod("proto", capacity={"runs": "4"})
EIGHT = decoded_pod("proto", capacity={"runs": "8"})


def stale(prototype: RuntimePod, by: timedelta = timedelta(microseconds=1)) -> RuntimePod:
    """``prototype`` with its last heartbeat ``by`` beyond the default 15 s bound."""
    return dataclasses.replace(prototype, heartbeat_at=NOW - timedelta(seconds=15) - by)


def pods(first: int, stop: int, prototype: RuntimePod = FOUR) -> list[RuntimePod]:
    """Pods ``p<first>`` … ``p<stop - 1>`` (three digits: name order is number order)."""
    return [renamed(prototype, f"p{n:03d}") for n in range(first, stop)]


def reservation_of(run_name: str, pod: str) -> tuple[Object, Reservation]:
    """A Pending Run and its live reservation of one ``runs`` on ``pod``."""
    pending = decoded_run(run_name, requests={"runs": "1"})
    held = Reservation(
        namespace=NAMESPACE,
        run_uid=pending.uid,
        run_name=pending.name,
        resource_version=pending.resource_version,
        pod=pod,
        pod_uid=f"uid-pod-{NAMESPACE}-{pod}",
        requests=pending.requests,
        labels=pending.labels,
    )
    return pending, held


def planned(world: World) -> tuple[Plan, bool]:
    """The cycle's plan (the oracle's, checked) and whether the load index decided it."""
    decided = decided_as_the_oracle_says(world)
    return decided.plan, decided.placed is not None


def test_every_reserved_pod_of_one_load_class_is_ranked() -> None:
    """Reservations move three pods of one class into another together: one unit of three."""
    run = decoded_run("r")
    held = [reservation_of(f"q{n}", f"p{n:03d}") for n in (10, 20, 30)]
    world = World(run, (*pods(0, 130), *(pending for pending, _ in held), run), tuple(r for _, r in held))
    plan, by_index = planned(world)
    assert by_index and isinstance(plan, Bind)
    assert (plan.pod, len(plan.ranking)) == ("p000", 130)
    assert [s.pod for s in plan.scores[-3:]] == ["p010", "p020", "p030"]


def test_after_whole_chunks_of_pods_are_deleted_the_stale_pods_after_them_are_still_unavailable() -> None:
    """p064–p127 fill two chunks of the listed index and are deleted one by one; the
    stale block behind them (p160–p191, the less loaded class) must still be found."""
    run = decoded_run("r")
    listed = [*pods(0, 160), *map(stale, pods(160, 192, EIGHT)), *pods(192, 200, EIGHT)]
    deleted = [p for p in listed if "p064" <= p.name < "p128"]
    kept = [p for p in listed if p not in deleted]
    world = World(
        run, (*kept, run), (), listed=(*listed, run), events=tuple(Event("DELETED", p) for p in deleted)
    )
    plan, by_index = planned(world)
    assert by_index and isinstance(plan, Bind)
    assert (plan.pod, plan.rejections) == ("p192", (("RuntimePodAvailability", "RuntimePodUnavailable", 32),))


ROOMY = ("p000", "p031", "p032", "p063", "p100", "p150", "p199")
"""The pods with eight runs of room among 200 with four: the least loaded, first by name."""
STALE = ("p041", "p170")


def two_hundred_pods() -> list[RuntimePod]:
    made = [renamed(EIGHT if f"p{n:03d}" in ROOMY else FOUR, f"p{n:03d}") for n in range(200)]
    return [stale(p) if p.name in STALE else p for p in made]


@pytest.mark.parametrize(
    ("first", "stop"),
    [(0, 32), (0, 1), (31, 33), (32, 64), (40, 42), (63, 64), (96, 160), (150, 151), (168, 200), (199, 200)],
)
@pytest.mark.parametrize("arrival", ["listed", "one by one"])
def test_after_a_block_of_pods_is_deleted_the_cycle_binds_the_least_loaded_pod_left(
    first: int, stop: int, arrival: str
) -> None:
    """Pods ``p<first>`` … ``p<stop - 1>`` deleted (whole chunks, a chunk's first or last pod,
    one pod, pods across a chunk boundary; after a list, whose chunks hold 32 pods, or after
    pods added one by one, whose chunks split at 65): the index finds every pod left and none
    gone, and the cycle binds the least loaded pod left, as the oracle does."""
    run = decoded_run("r")
    every = two_hundred_pods()
    deleted = every[first:stop]
    kept = every[:first] + every[stop:]
    added = [every[(n * 37) % 200] for n in range(200)] if arrival == "one by one" else []
    listed: tuple[Object, ...] = (run,) if added else (*every, run)
    events = (*(Event("ADDED", p) for p in added), *(Event("DELETED", p) for p in deleted))
    world = World(run, (*kept, run), (), listed=listed, events=events)
    got, want = world.state().load_index(NAMESPACE, RUNTIME), from_objects(kept).load_index(NAMESPACE, RUNTIME)
    assert got is not None and want is not None
    assert (got.count, got.slots()) == (want.count, want.slots())
    names = [p.name for p in every]
    at = {slot.pod.name: (position, slot) for position, slot in enumerate(want.slots())}
    assert [p.name for p in kept] == list(at)
    assert [got.slot(name) for name in names] == [at[name][1] if name in at else None for name in names]
    assert got.located(names) == [at.get(name) for name in names]
    assert got.positions_by_name() == {name: position for name, (position, _) in at.items()}
    assert dict(got.classes.items()) == dict(want.classes.items())
    assert got.probe_mins == tuple(map(earliest_heartbeat, got.chunks))
    plan, by_index = planned(world)
    assert by_index and isinstance(plan, Bind)
    left = [name for name in ROOMY if not f"p{first:03d}" <= name < f"p{stop:03d}"]
    assert (plan.pod, len(plan.ranking)) == (left[0], len([p for p in kept if p.name not in STALE]))


def test_fresh_chunks_are_skipped_and_a_pod_stale_by_a_microsecond_is_still_found() -> None:
    run = decoded_run("r")
    all_pods = [stale(p) if p.name == "p100" else p for p in pods(0, 200)]
    world = World(run, (*all_pods, run), ())
    snapshot = world.snapshot()
    assert isinstance(snapshot.pods, CandidateSlots)
    cutoff = epoch_us(NOW - timedelta(seconds=15))
    assert sorted(low < cutoff for low in snapshot.pods.load_index.probe_mins) == [False] * 6 + [True]
    plan, by_index = planned(world)
    assert by_index and isinstance(plan, Bind)
    assert (plan.pod, len(plan.ranking)) == ("p000", 199)
    assert plan.rejections == (("RuntimePodAvailability", "RuntimePodUnavailable", 1),)


def loaded(pod: str, labels: dict[str, str], n: int) -> Object:
    return active_run(f"on-{pod}-{n}", pod, labels=labels)


def test_a_snapshot_without_the_pods_hosting_targets_is_planned_by_the_scan() -> None:
    """Only ``p000`` hosts a Run labelled ``app=db``, among ten pods loaded alike."""
    run = decoded_run("r", affinity=affinity_json(required=[term({"app": "db"})]))
    targets = [loaded(f"p{n:03d}", {"app": "db" if n == 0 else "web"}, 0) for n in range(10)]
    world = World(run, (*pods(0, 130), *targets, run), ())
    snapshot = dataclasses.replace(world.snapshot(), hosts=None)
    assert place(run, snapshot, DEFAULT_REGISTRY) is None
    plan = plan_cycle(snapshot).unwrap()
    matches_the_oracle(plan, world.oracle())
    assert isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p000", 1)


def test_a_pod_hosting_a_target_is_judged_apart_from_the_pods_loaded_alike() -> None:
    """``p000`` hosts the only Run labelled ``app=db``; ``p001``–``p009`` are as loaded (a Run
    labelled ``app=web`` each): only ``p000`` is feasible for a Run requiring ``app=db``."""
    run = decoded_run("r", affinity=affinity_json(required=[term({"app": "db"})]))
    targets = [loaded(f"p{n:03d}", {"app": "db" if n == 0 else "web"}, 0) for n in range(10)]
    plan, by_index = planned(World(run, (*pods(0, 130), *targets, run), ()))
    assert by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p000", 1)


def test_pods_advertising_different_fractional_runs_are_not_judged_alike() -> None:
    """``p000``–``p064`` advertise 2.5 runs, ``p065``–``p129`` 1.5: a Run requesting two fits
    only the first."""
    run = decoded_run("r", requests={"runs": "2"})
    larger, smaller = decoded_pod("proto", capacity={"runs": "2500m"}), decoded_pod("proto", capacity={"runs": "1500m"})
    plan, by_index = planned(World(run, (*pods(0, 65, larger), *pods(65, 130, smaller), run), ()))
    assert by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p000", 65)


def test_the_workspace_pod_is_judged_apart_from_the_pods_loaded_alike() -> None:
    run = decoded_run("r", workspace="ws")
    world = World(run, (*pods(0, 130), decoded_workspace("ws", bound_pod="p005"), run), ())
    plan, by_index = planned(world)
    assert by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p005", 1)


def test_a_run_whose_terms_match_on_more_than_a_quarter_of_the_pods_is_planned_by_the_scan() -> None:
    run = decoded_run("r", affinity=affinity_json(anti_required=[term({"app": "db"})]))
    targets = [loaded(f"p{n:03d}", {"app": "db"}, 0) for n in range(0, 130, 4)]  # 33 of 130
    plan, by_index = planned(World(run, (*pods(0, 130), *targets, run), ()))
    assert not by_index and isinstance(plan, Bind) and len(plan.ranking) == 130 - 33
    a_quarter = World(run, (*pods(0, 128), *targets[:32], run), ())  # 32 of 128
    assert planned(a_quarter)[1]


def test_more_load_classes_than_the_index_keeps_are_planned_by_the_scan() -> None:
    run = decoded_run("r")
    sizes = [decoded_pod("proto", capacity={"runs": str(n)}) for n in range(1, MAX_CLASSES + 2)]
    world = World(run, (*(renamed(sizes[n % len(sizes)], f"p{n:03d}") for n in range(MIN_PODS + 2)), run), ())
    plan, by_index = planned(world)
    assert not by_index and isinstance(plan, Bind) and plan.pod == "p064"  # runs: 65, the least loaded
    fewer = World(run, (*(renamed(sizes[n % MAX_CLASSES], f"p{n:03d}") for n in range(MIN_PODS + 2)), run), ())
    assert planned(fewer)[1]


def test_a_naive_clock_is_planned_by_the_scan() -> None:
    naive_now = NOW.replace(tzinfo=None)
    naive = [dataclasses.replace(p, heartbeat_at=naive_now - timedelta(seconds=3)) for p in pods(0, 130)]
    run = decoded_run("r")
    plan, by_index = planned(World(run, (*naive, run), (), now=naive_now))
    assert not by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p000", 130)


def test_fewer_pods_than_the_index_needs_are_planned_by_the_scan() -> None:
    run = decoded_run("r")
    plan, by_index = planned(World(run, (*pods(0, MIN_PODS - 1), run), ()))
    assert not by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p000", MIN_PODS - 1)
    assert planned(World(run, (*pods(0, MIN_PODS), run), ()))[1]


def test_reservations_on_more_than_a_quarter_of_the_pods_are_planned_by_the_scan() -> None:
    run = decoded_run("r")
    held = [reservation_of(f"q{n}", f"p{n:03d}") for n in range(0, 130, 4)]  # 33 of 130
    world = World(run, (*pods(0, 130), *(pending for pending, _ in held), run), tuple(r for _, r in held))
    plan, by_index = planned(world)
    assert not by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p001", 130)
    a_quarter = held[:32]  # 32 of 128
    world = World(run, (*pods(0, 128), *(pending for pending, _ in a_quarter), run), tuple(r for _, r in a_quarter))
    assert planned(world)[1]


def test_a_quarter_of_the_pods_stale_is_planned_by_the_scan() -> None:
    run = decoded_run("r")
    spread = [stale(p) if n % 4 == 0 else p for n, p in enumerate(pods(0, 130))]  # 33 stale
    plan, by_index = planned(World(run, (*spread, run), ()))
    assert not by_index and isinstance(plan, Bind) and (plan.pod, len(plan.ranking)) == ("p001", 130 - 33)
    a_quarter = [stale(p) if n % 4 == 0 else p for n, p in enumerate(pods(0, 128))]  # 32 of 128
    assert planned(World(run, (*a_quarter, run), ()))[1]


# --- a plugin that fails or breaks its contract: the cycle fails as the scan fails it ------------

BROKEN = CycleError("PluginError", "the plugin's store is unreachable")


def _is_eight(slot: PodSlot) -> bool:
    return slot.pod.capacity == EIGHT.capacity


@final
@dataclass(frozen=True, slots=True)
class _FaultyFilter:
    """A filter claiming the fast path whose prepare fails (``fault == "prepare"``) or that
    refuses the pods with room for eight runs for a reason it never declared."""

    fault: str
    name: ClassVar[str] = "Faulty"
    reasons: ClassVar[frozenset[str]] = frozenset({"Declared"})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {"Declared": "capacity"}
    fast_path: ClassVar[bool] = True

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        if self.fault == "prepare":
            return Failure(BROKEN)
        return Success(BatchFilter(self.judge, self.select))

    def judge(self, slot: PodSlot) -> str | None:
        return "Undeclared" if _is_eight(slot) else None

    def select(self, slots: Sequence[PodSlot]) -> Selection:
        return rejected_as("Undeclared", len(slots), [slot for slot in slots if not _is_eight(slot)])

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return reason


@final
@dataclass(frozen=True, slots=True)
class _FaultyScore:
    """A score plugin claiming the fast path whose prepare fails, that returns one raw score
    too few (and normalizes them to as many as there are pods) or one normalized score too
    few, or that scores the pods with room for eight runs above 100 or below 0."""

    fault: str
    name: ClassVar[str] = "Faulty"
    fast_path: ClassVar[bool] = True

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        if self.fault == "prepare":
            return Failure(BROKEN)
        short = self.fault == "raw"
        return Success(lambda slots: tuple(int(_is_eight(slot)) for slot in slots)[short:])

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        out = {"above": 101, "below": -1}.get(self.fault, 0)
        scores = tuple(out * value for value in raw)
        return {"raw": (*scores, 0), "normalized": scores[1:]}.get(self.fault, scores)


@pytest.mark.parametrize(
    "kind, fault",
    [("filter", "prepare"), ("filter", "reason"), ("score", "prepare"), ("score", "raw"), ("score", "normalized"), ("score", "above"), ("score", "below")],
)
def test_a_plugin_that_fails_or_breaks_its_contract_fails_the_cycle_as_the_scan_does(kind: str, fault: str) -> None:
    run = decoded_run("r")
    world = World(run, (*pods(0, 100), *pods(100, 130, EIGHT), run), ())
    snapshot = world.snapshot()
    registry = must(
        DEFAULT_REGISTRY.register_filter("Faulty", partial(_FaultyFilter, fault))
        if kind == "filter"
        else DEFAULT_REGISTRY.register_score("Faulty", 1, partial(_FaultyScore, fault))
    )
    assert proven_for(registry)
    full = plan_cycle(scanned(snapshot), registry)
    assert isinstance(full, Failure)
    assert plan_cycle(snapshot, registry) == full
