"""What one cycle sees (SPEC §3.8): its pods with actual + assumed usage, its targets, its workspace."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.model.plan import Bind
from kruntimes.pure.state.cluster import ClusterState, Event, apply, from_objects
from kruntimes.pure.ledger import sync, EMPTY_LEDGER, Ledger, reserve
from kruntimes.pure.model.objects import DEFAULT_CONFIG, LabelSelector, Labels, Run, RunKey, SchedulerConfig, Snapshot
from kruntimes.pure.persistent.pdict import pdict
from kruntimes.pure.snapshot import take
from tests.builders import (
    NOW,
    Json,
    active_run,
    affinity_json,
    decoded_pod,
    decoded_run,
    decoded_workspace,
    expression,
    term,
    world,
)


LABEL_SETS = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["db", "web", "gold"]), max_size=2)
SELECTOR_TERMS = [
    term({"app": "db"}),
    term({"app": "web"}),
    term({"tier": "gold"}),
    term({"app": "web", "tier": "gold"}),
    term(expressions=[expression("app", "Exists")]),
    term(expressions=[expression("tier", "NotIn", ["gold"])]),
]


def snap(state: ClusterState, name: str, ledger: Ledger = EMPTY_LEDGER, namespace: str = "default") -> Snapshot:
    """The snapshot a cycle for the Run plans from: the step syncs the namespace, then takes it."""
    return take(state, sync(ledger, state, namespace), RunKey(namespace, name), NOW, DEFAULT_CONFIG)


def reserved(ledger: Ledger, state: ClusterState, run: Run, pod: str) -> Ledger:
    return reserve(ledger, state, run, pod, f"uid-pod-{run.namespace}-{pod}", NOW, DEFAULT_CONFIG).unwrap()


BLUE_AFFINITY = affinity_json(preferred=[(1, term({"zone": "blue"}))])


@pytest.mark.parametrize(
    "run",
    [None, active_run("r", "a"), decoded_run("r", phase="Succeeded"), decoded_run("r", runtime="")],
    ids=["absent", "active", "finished", "no runtime"],
)
def test_a_run_the_cycle_will_not_plan_gets_no_pods(run: Run | None) -> None:
    """It still gets its key, the time, the configuration and the reservation the ledger holds for it."""
    state = world(decoded_pod("a"), *([run] if run is not None else []))
    pending = decoded_run("r")
    ledger = reserved(EMPTY_LEDGER, world(decoded_pod("a"), pending), pending, "a")
    config = SchedulerConfig(heartbeat_stale_after=timedelta(seconds=30))
    snapshot = take(state, ledger, RunKey("default", "r"), NOW, config)
    assert snapshot.run == run
    assert snapshot.pods == ()
    assert snapshot.targets == ()
    assert (snapshot.key, snapshot.now, snapshot.config) == (RunKey("default", "r"), NOW, config)
    assert snapshot.reservation == (None if run is None else ledger.get("default", pending.uid))
    assert run is None or snapshot.reservation is not None


def test_the_cycle_judges_heartbeats_by_the_configuration_it_was_given() -> None:
    """A heartbeat 20 s old is fresh under a 30 s bound (stale under the default 15 s)."""
    pod = replace(decoded_pod("a"), heartbeat_at=NOW - timedelta(seconds=20))
    state = world(pod, decoded_run("r"))
    patient = SchedulerConfig(heartbeat_stale_after=timedelta(seconds=30))
    plan = plan_cycle(take(state, EMPTY_LEDGER, RunKey("default", "r"), NOW, patient)).unwrap()
    assert isinstance(plan, Bind) and plan.pod == "a"


def test_candidates_are_the_pods_of_the_runs_namespace_and_runtime() -> None:
    state = world(
        decoded_run("r"),
        decoded_pod("a"),
        decoded_pod("b"),
        decoded_pod("c", runtime="node"),
        decoded_pod("d", namespace="other"),
        decoded_pod("e", runtime=None),
    )
    snapshot = snap(state, "r")
    assert sorted(slot.pod.name for slot in snapshot.pods) == ["a", "b"]
    assert snapshot.now == NOW and snapshot.config == DEFAULT_CONFIG
    assert snapshot.key == RunKey("default", "r")


def test_usage_is_actual_plus_reserved() -> None:
    r1, r2 = decoded_run("r1", requests={"cpu": "2"}), decoded_run("r2")
    state = world(
        decoded_pod("a", capacity={"cpu": "8", "runs": "9"}),
        decoded_pod("b", capacity={"cpu": "8"}),
        active_run("busy", "a", requests={"cpu": "1"}),
        active_run("node-run", "a", runtime="node", requests={"cpu": "1"}),
        r1,
        r2,
    )
    ledger = reserved(EMPTY_LEDGER, state, r1, "a")
    usage = {slot.pod.name: dict(slot.usage) for slot in snap(state, "r2", ledger).pods}
    # Runs of any runtime share the pod they are assigned to.
    assert usage == {"a": {"cpu": 4, "runs": 3}, "b": {}}


@pytest.mark.parametrize("pods", [2, 9], ids=["few pods", "many pods"])
def test_a_run_bound_to_a_reserved_pod_after_the_reservation_adds_to_its_usage(pods: int) -> None:
    """Among few pods and among many (where the snapshot reads the reserved pod's slot alone)."""
    r1, r2 = decoded_run("r1", requests={"cpu": "2"}), decoded_run("r2")
    state = world(*(decoded_pod(f"p{n}", capacity={"cpu": "8", "runs": "9"}) for n in range(pods)), r1, r2)
    ledger = reserved(EMPTY_LEDGER, state, r1, "p0")
    state = apply(state, Event("ADDED", active_run("busy", "p0", requests={"cpu": "1"})))
    usage = {slot.pod.name: dict(slot.usage) for slot in snap(state, "r2", ledger).pods}
    assert usage["p0"] == {"cpu": 3, "runs": 2}


def test_targets_are_the_active_runs_matching_one_of_the_runs_terms() -> None:
    state = world(
        decoded_run("r", affinity=affinity_json(required=[term({"zone": "blue"})], anti_required=[term({"noisy": "yes"})])),
        decoded_pod("a"),
        active_run("blue", "a", labels={"zone": "blue"}),
        active_run("noisy", "a", labels={"noisy": "yes"}),
        active_run("red", "a", labels={"zone": "red"}),
        active_run("blue-other-ns", "a", namespace="other", labels={"zone": "blue"}),
        decoded_run("blue-pending", labels={"zone": "blue"}),
    )
    assert sorted(t.run_uid for t in snap(state, "r").targets) == ["uid-run-default-blue", "uid-run-default-noisy"]


def test_a_run_without_affinity_needs_no_targets() -> None:
    state = world(decoded_run("r"), decoded_pod("a"), active_run("blue", "a", labels={"zone": "blue"}))
    assert snap(state, "r").targets == ()


def test_reservations_of_the_namespace_are_assumed_targets_but_never_the_runs_own() -> None:
    run = decoded_run("r", affinity=BLUE_AFFINITY, labels={"zone": "blue"})
    peer = decoded_run("peer", labels={"zone": "blue"})
    red = decoded_run("red", labels={"zone": "red"})
    state = world(decoded_pod("a", capacity={"runs": "9"}), run, peer, red)
    ledger = reduce(lambda led, r: reserved(led, state, r, "a"), [run, peer, red], EMPTY_LEDGER)
    snapshot = snap(state, "r", ledger)
    assert [(t.run_uid, t.pod, t.assumed) for t in snapshot.targets] == [("uid-run-default-peer", "a", True)]
    assert snapshot.reservation == ledger.get("default", run.uid)


def test_a_reservation_made_by_pod_name_alone_is_a_target_on_that_pod() -> None:
    run = decoded_run("r", affinity=BLUE_AFFINITY)
    peer = decoded_run("peer", labels={"zone": "blue"})
    state = world(decoded_pod("a", capacity={"runs": "9"}), run, peer)
    held = reserved(EMPTY_LEDGER, state, peer, "a").get("default", peer.uid)
    assert held is not None
    ledger = Ledger(pdict({"default": pdict({peer.uid: replace(held, pod_uid="")})}))
    assert [(t.run_uid, t.pod, t.assumed) for t in snap(state, "r", ledger).targets] == [("uid-run-default-peer", "a", True)]


@pytest.mark.parametrize("on_a", ["x1", "x2"])
@pytest.mark.parametrize("every_target", [False, True])
def test_two_active_runs_sharing_a_uid_are_one_target_on_the_first_pod_by_name(on_a: str, every_target: bool) -> None:
    run = decoded_run("r", affinity=BLUE_AFFINITY)
    runs = [active_run(name, "a" if name == on_a else "b", labels={"zone": "blue"}, uid="dup") for name in ("x1", "x2")]
    other = active_run("y", "c", labels={"zone": "blue"})
    state = world(decoded_pod("a"), decoded_pod("b"), decoded_pod("c"), run, *runs, other)
    snapshot = take(state, EMPTY_LEDGER, run.key, NOW, DEFAULT_CONFIG, every_target=every_target)
    assert [(t.run_uid, t.pod) for t in snapshot.targets] == [("dup", "a"), (other.uid, "c")]


@pytest.mark.parametrize(
    "selector",
    [term({"zone": "blue"}), term({"zone": "blue", "tier": "gold"}), term(expressions=[expression("zone", "NotIn", ["red"])])],
)
def test_every_target_keeps_each_matching_run_on_a_pod(selector: Json) -> None:
    run = decoded_run("r", affinity=affinity_json(preferred=[(1, selector)]))
    on_a = [active_run(name, "a", labels={"zone": "blue", "tier": "gold"}) for name in ("x1", "x2")]
    state = world(decoded_pod("a"), run, *on_a)
    every = take(state, EMPTY_LEDGER, run.key, NOW, DEFAULT_CONFIG, every_target=True)
    assert [t.run_uid for t in every.targets] == [r.uid for r in on_a]
    assert [t.run_uid for t in snap(state, "r").targets] == [on_a[0].uid]  # one per pod and selector


def test_a_run_both_bound_and_observed_is_one_active_target() -> None:
    run = decoded_run("r", affinity=BLUE_AFFINITY)
    peer = decoded_run("peer", labels={"zone": "blue"})
    state = world(decoded_pod("a"), run, peer)
    ledger = reserved(EMPTY_LEDGER, state, peer, "a")
    state = apply(state, Event("MODIFIED", active_run("peer", "a", labels={"zone": "blue"}, resource_version="2")))
    targets = snap(state, "r", ledger).targets
    assert [(t.run_uid, t.assumed) for t in targets] == [("uid-run-default-peer", False)]


def test_the_referenced_workspace_is_included() -> None:
    state = world(
        decoded_run("r", workspace="ws"),
        decoded_pod("a"),
        decoded_workspace("ws", bound_pod="a"),
        decoded_workspace("other"),
        decoded_workspace("ws", namespace="elsewhere"),
    )
    assert snap(state, "r").workspace == decoded_workspace("ws", bound_pod="a")
    assert snap(world(decoded_run("r", workspace="missing")), "r").workspace is None


def test_a_missing_pod_or_finished_run_in_the_ledger_does_not_leak_into_usage() -> None:
    run, gone = decoded_run("r"), decoded_run("gone")
    state = world(decoded_pod("a"), run, gone)
    ledger = reserved(EMPTY_LEDGER, state, gone, "a")
    state = apply(state, Event("DELETED", gone))
    assert [dict(slot.usage) for slot in snap(state, "r", ledger).pods] == [{}]


def test_snapshot_cost_does_not_grow_with_unrelated_active_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    run = decoded_run(
        "r",
        affinity=affinity_json(
            required=[term({"app": "web"})],
            preferred=[(1, term(expressions=[expression("tier", "In", ["gold", "silver"])]))],
            anti_required=[term(expressions=[expression("app", "Exists"), expression("debug", "DoesNotExist")])],
        ),
    )
    related = [active_run(f"web-{i}", "a", labels={"app": "web"}) for i in range(3)]
    unrelated = [
        active_run(f"other-{i}", f"n{i % 7}", runtime="node", labels={"team": f"t{i % 13}", "job": str(i)})
        for i in range(5_000)
    ]
    small = from_objects([run, decoded_pod("a"), *related])
    large = from_objects([run, decoded_pod("a"), *related, *unrelated])
    calls = 0
    original = LabelSelector.matches

    def counting(self: LabelSelector, labels: Labels) -> bool:
        nonlocal calls
        calls += 1
        return original(self, labels)

    monkeypatch.setattr(LabelSelector, "matches", counting)
    small_snapshot = snap(small, "r")
    small_calls, calls = calls, 0
    large_snapshot = snap(large, "r")
    assert calls == small_calls
    assert large_snapshot.targets == small_snapshot.targets
    assert [t.run_uid for t in large_snapshot.targets] == ["uid-run-default-web-0"]  # one per pod: the lowest uid
    every = take(large, EMPTY_LEDGER, RunKey("default", "r"), NOW, DEFAULT_CONFIG, every_target=True)
    assert len(every.targets) == 3


@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), LABEL_SETS), max_size=24),
    st.lists(st.sampled_from(SELECTOR_TERMS), max_size=2),
    st.lists(st.tuples(st.integers(1, 100), st.sampled_from(SELECTOR_TERMS)), max_size=2),
    st.lists(st.sampled_from(SELECTOR_TERMS), max_size=2),
    st.lists(st.tuples(st.integers(1, 100), st.sampled_from(SELECTOR_TERMS)), max_size=2),
    LABEL_SETS,
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), LABEL_SETS), max_size=3),
)
def test_one_target_per_pod_and_selector_plans_exactly_as_every_target(
    active: list[tuple[str, dict[str, str]]],
    required: list[dict[str, object]],
    preferred: list[tuple[int, dict[str, object]]],
    anti_required: list[dict[str, object]],
    anti_preferred: list[tuple[int, dict[str, object]]],
    own_labels: dict[str, str],
    in_flight: list[tuple[str, dict[str, str]]],
) -> None:
    """Affinity is decided by which pods host a match (SPEC §4–§5), so the reduced
    snapshot gives the very plan, scores and ranking included, of the full one."""
    run = decoded_run(
        "r",
        labels=own_labels,
        affinity=affinity_json(
            required=required, preferred=preferred, anti_required=anti_required, anti_preferred=anti_preferred
        ),
    )
    pods = [decoded_pod(name, capacity={"runs": "30"}) for name in ("a", "b", "c", "d")]
    runs = [active_run(f"t{i}", pod, labels=labels) for i, (pod, labels) in enumerate(active)]
    pending = [decoded_run(f"p{i}", labels=labels) for i, (_, labels) in enumerate(in_flight)]
    state = from_objects([run, *pods, *runs, *pending])
    ledger = EMPTY_LEDGER
    for reserved_run, (pod, _) in zip(pending, in_flight):
        ledger = reserved(ledger, state, reserved_run, pod)
    key = RunKey("default", "r")
    reduced = take(state, ledger, key, NOW, DEFAULT_CONFIG)
    every = take(state, ledger, key, NOW, DEFAULT_CONFIG, every_target=True)
    ids = [(t.pod, t.run_uid, t.assumed) for t in reduced.targets]
    assert set(ids) <= {(t.pod, t.run_uid, t.assumed) for t in every.targets} and len(set(ids)) == len(ids)
    full_plan = plan_cycle(every)
    reduced_plan = plan_cycle(reduced)
    assert reduced_plan == full_plan
    # The hosting pods handed to the plugins are what the targets say, and a snapshot
    # without them (read back from a cycle log) plans the same.
    for taken in (reduced, every):
        assert taken.hosts is not None and set(taken.hosts) == {t.selector for t in run.affinity.all_terms()}
        for chosen, hosting in taken.hosts.items():
            assert hosting == {t.pod for t in every.targets if chosen.matches(t.labels)}
    assert plan_cycle(replace(reduced, hosts=None, targets=tuple(reduced.targets))) == full_plan
    full, small = full_plan.value_or(None), reduced_plan.value_or(None)
    if isinstance(full, Bind) and isinstance(small, Bind):
        assert tuple(small.scores) == tuple(full.scores) and tuple(small.ranking) == tuple(full.ranking)
