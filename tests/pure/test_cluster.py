"""The cluster state's indexes agree with the objects they index."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply, from_objects
from kruntimes.pure.model.objects import Object
from kruntimes.pure.model.objects import LabelSelector, Labels, Operator, Requirement, Run, RunKey, RuntimePod, Target
from kruntimes.pure.model.quantity import Amount
from tests.builders import active_run, decoded_pod, decoded_run, decoded_workspace


def added(*objects: Object) -> ClusterState:
    return reduce(lambda state, obj: apply(state, Event("ADDED", obj)), objects, EMPTY_STATE)


def selector(*requirements: Requirement) -> LabelSelector:
    return LabelSelector(tuple(requirements))


def is_in(key: str, *values: str) -> Requirement:
    return Requirement(key, "In", frozenset(values))


# --- runs, pods, workspaces ---------------------------------------------------------------


def test_runs_are_found_by_key_and_by_namespaced_uid() -> None:
    run = decoded_run("r", namespace="team-a", uid="u1")
    state = added(run)
    assert state.run(RunKey("team-a", "r")) == run
    assert state.run_by_uid("team-a", "u1") == run
    assert state.run_by_uid("team-b", "u1") is None
    assert state.run(RunKey("team-b", "r")) is None


def test_a_run_recreated_under_the_same_name_is_found_by_its_new_uid_only() -> None:
    state = added(decoded_run("r", uid="old"), decoded_run("r", uid="new"))
    assert state.run_by_uid("default", "old") is None
    assert state.run_by_uid("default", "new") is not None


def test_deleting_a_run_forgets_it() -> None:
    run = decoded_run("r")
    state = apply(added(run), Event("DELETED", run))
    assert state.run(run.key) is None
    assert state.run_by_uid("default", run.uid) is None
    assert state == EMPTY_STATE


def test_deleting_something_never_seen_changes_nothing() -> None:
    state = added(decoded_pod("a"))
    assert apply(state, Event("DELETED", decoded_run("ghost"))) is state
    assert apply(state, Event("DELETED", decoded_pod("ghost"))) is state


def test_pods_are_grouped_by_namespace_and_runtime_label() -> None:
    state = added(
        decoded_pod("a"),
        decoded_pod("b"),
        decoded_pod("c", runtime="node"),
        decoded_pod("a", namespace="other"),
    )
    assert {p.name for p in state.pods_of("default", "python")} == {"a", "b"}
    assert [p.name for p in state.pods_of("default", "node")] == ["c"]
    assert [p.namespace for p in state.pods_of("other", "python")] == ["other"]
    assert state.pods_of("default", "ruby") == ()


def test_deleting_a_pod_leaves_the_other_pods_of_its_runtime() -> None:
    a, b, c = decoded_pod("a"), decoded_pod("b"), decoded_pod("c", runtime="node")
    state = apply(added(a, b, c), Event("DELETED", a))
    assert [p.name for p in state.pods_of("default", "python")] == ["b"]
    state = apply(state, Event("MODIFIED", decoded_pod("b", runtime="node")))
    assert state.pods_of("default", "python") == ()
    assert [p.name for p in state.pods_of("default", "node")] == ["b", "c"]
    state = apply(state, Event("DELETED", c))
    assert [p.name for p in state.pods_of("default", "node")] == ["b"]


def test_pods_without_a_runtime_label_are_not_stored() -> None:
    state = added(decoded_pod("plain", runtime=None))
    assert state.pod("default", "plain") is None
    assert list(state.pods()) == []


def test_a_pod_losing_its_runtime_label_is_forgotten() -> None:
    state = added(decoded_pod("a"), decoded_pod("a", runtime=None))
    assert state.pod("default", "a") is None
    assert state.pods_of("default", "python") == ()


def test_a_pod_relabelled_to_another_runtime_moves_groups() -> None:
    state = added(decoded_pod("a"), decoded_pod("a", runtime="node"))
    assert state.pods_of("default", "python") == ()
    assert [p.name for p in state.pods_of("default", "node")] == ["a"]


def test_a_state_counts_and_lists_what_it_stores() -> None:
    """Runs, Runtime Pods and workspaces; a pod without a runtime label is not stored."""
    ws = decoded_workspace("w", bound_pod="a")
    run, pod = decoded_run("r"), decoded_pod("a")
    state = added(run, pod, decoded_pod("plain", runtime=None), ws, decoded_run("s"))
    assert len(state) == 4
    assert list(state.workspaces()) == [ws]
    assert list(state.pods()) == [pod]
    state = apply(apply(state, Event("DELETED", ws)), Event("DELETED", run))
    assert (len(state), list(state.workspaces())) == (2, [])
    assert len(EMPTY_STATE) == 0


def test_workspaces_are_stored_and_deleted() -> None:
    ws = decoded_workspace("w", bound_pod="a")
    state = added(ws)
    assert state.workspace("default", "w") == ws
    assert state.workspace("other", "w") is None
    assert apply(state, Event("DELETED", ws)).workspace("default", "w") is None


# --- usage ----------------------------------------------------------------------------------------


def test_active_runs_charge_their_requests_to_their_assigned_pod() -> None:
    state = added(
        decoded_pod("a", capacity={"cpu": "8"}),
        active_run("r1", "a", requests={"cpu": "2"}),
        active_run("r2", "a", requests={"cpu": "3", "runs": "2"}, phase="Scheduled"),
        active_run("r3", "b", phase="Ready"),
    )
    assert dict(state.usage("default", "a")) == {"cpu": 5, "runs": 3}
    assert dict(state.usage("default", "b")) == {"runs": 1}, "charged even though pod b is unknown"
    assert dict(state.usage("other", "a")) == {}


@pytest.mark.parametrize("phase", ["", "Pending", "Succeeded", "Failed", "Timeout", "Cancelled"])
def test_runs_outside_the_active_phases_charge_nothing(phase: str) -> None:
    state = added(decoded_run("r", phase=phase, assigned_pod="a"))
    assert dict(state.usage("default", "a")) == {}


def test_an_active_phase_without_an_assigned_pod_charges_nothing() -> None:
    state = added(decoded_run("r", phase="Running"))
    assert list(state.matching_targets("default", selector(Requirement("x", "DoesNotExist")))) == []


def test_a_run_requesting_only_runs_keeps_the_other_resources_its_pod_holds() -> None:
    state = added(decoded_pod("a"), active_run("r1", "a", requests={"cpu": "2"}), active_run("r2", "a"))
    assert dict(state.usage("default", "a")) == {"cpu": 2, "runs": 2}
    state = apply(state, Event("DELETED", active_run("r2", "a")))
    assert dict(state.usage("default", "a")) == {"cpu": 2, "runs": 1}


def test_an_active_run_whose_requests_change_charges_the_new_requests() -> None:
    state = added(decoded_pod("a"), active_run("r", "a", requests={"cpu": "2"}, labels={"zone": "blue"}))
    changed = active_run("r", "a", requests={"cpu": "3"}, labels={"zone": "blue"}, resource_version="2")
    state = apply(state, Event("MODIFIED", changed))
    assert dict(state.usage("default", "a")) == {"cpu": 3, "runs": 1}
    assert [dict(slot.usage) for slot in state.pod_slots("default", "python")] == [{"cpu": 3, "runs": 1}]


def test_a_run_finishing_releases_exactly_its_requests() -> None:
    state = added(
        active_run("r1", "a", requests={"cpu": "2"}),
        active_run("r2", "a", requests={"cpu": "3"}),
    )
    state = apply(state, Event("MODIFIED", decoded_run("r1", phase="Succeeded", assigned_pod="a")))
    assert dict(state.usage("default", "a")) == {"cpu": 3, "runs": 1}
    state = apply(state, Event("DELETED", active_run("r2", "a", requests={"cpu": "3"})))
    assert dict(state.usage("default", "a")) == {}, "no zero entries linger"


def test_moving_through_active_phases_does_not_double_count() -> None:
    state = added(active_run("r", "a", phase="Scheduled"), active_run("r", "a", phase="Running"))
    state = apply(state, Event("MODIFIED", active_run("r", "a", phase="Ready")))
    assert dict(state.usage("default", "a")) == {"runs": 1}


def test_an_invalid_active_run_charges_its_valid_entries_with_runs_defaulted() -> None:
    state = added(active_run("r", "a", requests={"cpu": "2", "memory": "1.5", "runs": "0"}))
    assert dict(state.usage("default", "a")) == {"cpu": 2, "runs": 1}


# --- a pod gone or replaced (SPEC §1: active means on that pod) ------------------------------

BLUE = selector(is_in("zone", "blue"))


def test_runs_bound_to_a_pod_replaced_under_the_same_name_count_nothing_on_the_new_pod() -> None:
    old = decoded_pod("a", uid="a-1", capacity={"runs": "2"})
    bound = [active_run(f"r{i}", "a", pod_uid="a-1", labels={"zone": "blue"}) for i in (1, 2)]
    state = added(old, *bound)
    assert dict(state.usage("default", "a")) == {"runs": 2}
    state = apply(state, Event("DELETED", old))
    state = apply(state, Event("ADDED", decoded_pod("a", uid="a-2", capacity={"runs": "2"})))
    assert dict(state.usage("default", "a")) == {}
    assert [dict(slot.usage) for slot in state.pod_slots("default", "python")] == [{}]
    assert state.matching_targets("default", BLUE) == ()
    assert state.matches_by_pod("default", BLUE) == {}
    assert all(state.run(run.key) == run for run in bound), "the Runs themselves are left as they are"


def test_a_pod_replaced_without_its_deletion_being_seen_frees_its_capacity_too() -> None:
    state = added(decoded_pod("a", uid="a-1"), active_run("r", "a", pod_uid="a-1", labels={"zone": "blue"}))
    state = apply(state, Event("MODIFIED", decoded_pod("a", uid="a-2")))
    assert dict(state.usage("default", "a")) == {}
    assert state.matching_targets("default", BLUE) == ()


def test_runs_bound_to_a_deleted_pod_count_again_when_that_very_pod_is_seen_again() -> None:
    pod = decoded_pod("a", uid="a-1")
    run = active_run("r", "a", pod_uid="a-1", labels={"zone": "blue"})
    state = apply(added(pod, run), Event("DELETED", pod))
    assert dict(state.usage("default", "a")) == {}
    assert state.matching_targets("default", BLUE) == ()
    state = apply(state, Event("ADDED", pod))  # a relist that had missed nothing after all
    assert dict(state.usage("default", "a")) == {"runs": 1}
    assert [t.run_uid for t in state.matching_targets("default", BLUE)] == [run.uid]
    assert state == added(pod, run)


def test_a_run_seen_before_its_pod_counts_once_the_pod_is_seen() -> None:
    run = active_run("r", "a", pod_uid="a-1", labels={"zone": "blue"})
    state = added(run)
    assert dict(state.usage("default", "a")) == {}
    state = apply(state, Event("ADDED", decoded_pod("a", uid="a-1")))
    assert dict(state.usage("default", "a")) == {"runs": 1}
    assert [dict(slot.usage) for slot in state.pod_slots("default", "python")] == [{"runs": 1}]
    assert len(state.matching_targets("default", BLUE)) == 1


def test_a_run_without_an_assigned_pod_uid_counts_on_whatever_pod_has_its_pod_name() -> None:
    state = added(decoded_pod("a", uid="a-1"), active_run("r", "a", labels={"zone": "blue"}))
    state = apply(state, Event("ADDED", decoded_pod("a", uid="a-2")))
    assert dict(state.usage("default", "a")) == {"runs": 1}
    assert len(state.matching_targets("default", BLUE)) == 1


def test_a_run_moved_onto_the_current_pod_counts_there() -> None:
    state = added(decoded_pod("a", uid="a-2"), active_run("r", "a", pod_uid="a-1", labels={"zone": "blue"}))
    assert dict(state.usage("default", "a")) == {}
    state = apply(state, Event("MODIFIED", active_run("r", "a", pod_uid="a-2", labels={"zone": "blue"})))
    assert dict(state.usage("default", "a")) == {"runs": 1}
    assert len(state.matching_targets("default", BLUE)) == 1


def test_exists_follows_the_runs_a_replaced_pod_turns_on_and_off() -> None:
    """The pod replaced under its name turns off the Run bound to its old uid and turns on the
    Run bound to its new one (the first with its value); a Run bound by name alone, with the
    value the Run turned off had, is still found by it, and one bound to a uid the pod has
    never had (seen first) stays off without stopping the others from turning. A selector of
    only negative requirements (which looks at every target) agrees."""
    zone = selector(Requirement("zone", "Exists"))
    untiered = selector(Requirement("tier", "DoesNotExist"))
    elsewhere = active_run("r0", "a", pod_uid="a-0", labels={"zone": "green"})
    old_bound = active_run("r1", "a", pod_uid="a-1", labels={"zone": "blue"})
    by_name = active_run("r2", "a", labels={"zone": "blue"})
    new_bound = active_run("r3", "a", pod_uid="a-2", labels={"zone": "red"})
    state = added(elsewhere, decoded_pod("a", uid="a-1"), old_bound, by_name, new_bound)

    def found(state: ClusterState) -> list[str]:
        uids = sorted(t.run_uid for t in state.matching_targets("default", zone))
        assert sorted(t.run_uid for t in state.matching_targets("default", untiered)) == uids
        return uids

    assert found(state) == sorted([old_bound.uid, by_name.uid])
    state = apply(state, Event("MODIFIED", decoded_pod("a", uid="a-2")))
    assert found(state) == sorted([by_name.uid, new_bound.uid])
    assert dict(state.usage("default", "a")) == {"runs": 2}
    state = apply(state, Event("DELETED", decoded_pod("a", uid="a-2")))
    assert found(state) == [by_name.uid]
    assert dict(state.usage("default", "a")) == {"runs": 1}


# --- pending index --------------------------------------------------------------------------------


def test_pending_runs_are_indexed_by_the_workspace_they_name() -> None:
    state = added(
        decoded_run("r1", workspace="ws"),
        decoded_run("r2", phase="Pending", workspace="ws"),
        decoded_run("r3", runtime="node", workspace="ws"),
        decoded_run("r4", namespace="other", workspace="ws"),
        decoded_run("r5", workspace="other-ws"),
        decoded_run("r6"),
        active_run("r7", "a"),
        decoded_run("r8", phase="Succeeded", workspace="ws"),
    )
    assert state.pending_naming("default", "ws") == {RunKey("default", n) for n in ("r1", "r2", "r3")}
    assert state.pending_naming("other", "ws") == {RunKey("other", "r4")}
    assert state.pending_naming("default", "other-ws") == {RunKey("default", "r5")}
    assert state.pending_naming("default", "none") == frozenset()


def test_a_backlog_naming_no_workspace_leaves_the_index_empty() -> None:
    state = added(*(decoded_run(f"r{i}") for i in range(50)))
    assert len(state._pending) == 0


def test_a_run_leaves_the_pending_index_when_scheduled_or_deleted() -> None:
    state = added(decoded_run("r1", workspace="ws"), decoded_run("r2", workspace="ws"))
    state = apply(state, Event("MODIFIED", active_run("r1", "a", phase="Scheduled")))
    state = apply(state, Event("DELETED", decoded_run("r2", workspace="ws")))
    assert state.pending_naming("default", "ws") == frozenset()


# --- affinity targets -------------------------------------------------------------------------------


def test_matching_targets_are_the_active_runs_of_the_namespace_whose_labels_match() -> None:
    state = added(
        active_run("blue-on-a", "a", labels={"zone": "blue", "tier": "gold"}),
        active_run("blue-on-b", "b", labels={"zone": "blue"}),
        active_run("red-on-a", "a", labels={"zone": "red"}),
        decoded_run("blue-pending", labels={"zone": "blue"}),
        active_run("blue-elsewhere", "a", namespace="other", labels={"zone": "blue"}),
    )
    found = state.matching_targets("default", selector(is_in("zone", "blue")))
    assert found == (
        Target("a", active_run("x", "a", labels={"zone": "blue", "tier": "gold"}).labels, "uid-run-default-blue-on-a"),
        Target("b", active_run("x", "b", labels={"zone": "blue"}).labels, "uid-run-default-blue-on-b"),
    )
    both = state.matching_targets("default", selector(is_in("zone", "blue"), Requirement("tier", "Exists")))
    assert [t.run_uid for t in both] == ["uid-run-default-blue-on-a"]
    negative = state.matching_targets("default", selector(Requirement("zone", "NotIn", frozenset({"blue"}))))
    assert [t.run_uid for t in negative] == ["uid-run-default-red-on-a"]


def test_a_run_leaving_a_pod_leaves_the_other_runs_with_its_labels_there_found() -> None:
    """Three Runs with one label on one pod; the middle one (by uid) finishes, then the first
    is deleted: the others with that label on that pod are still found, in uid order."""
    runs = [active_run(f"r{i}", "a", labels={"zone": "blue"}) for i in range(3)]
    blue = selector(is_in("zone", "blue"))
    state = added(decoded_pod("a"), *runs)
    finished = decoded_run("r1", labels={"zone": "blue"}, phase="Succeeded", assigned_pod="a", uid=runs[1].uid)
    state = apply(state, Event("MODIFIED", finished))
    assert [t.run_uid for t in state.matching_targets("default", blue)] == [runs[0].uid, runs[2].uid]
    assert {pod: [t.run_uid for t in held] for pod, held in state.matches_by_pod("default", blue).items()} == {
        "a": [runs[0].uid, runs[2].uid]
    }
    state = apply(state, Event("DELETED", runs[0]))
    assert [t.run_uid for t in state.matching_targets("default", blue)] == [runs[2].uid]


def test_a_relabelled_active_run_is_found_by_its_new_labels_only() -> None:
    state = added(
        active_run("r", "a", labels={"zone": "blue"}),
        active_run("r", "a", labels={"zone": "red"}),
    )
    assert state.matching_targets("default", selector(is_in("zone", "blue"))) == ()
    assert len(state.matching_targets("default", selector(is_in("zone", "red")))) == 1
    assert len(state.matching_targets("default", selector(Requirement("zone", "Exists")))) == 1


def test_exists_finds_every_value_of_the_key_and_forgets_values_no_target_has() -> None:
    blue = active_run("r1", "a", labels={"zone": "blue"})
    red = active_run("r2", "b", labels={"zone": "red"})
    state = added(blue, red, active_run("r3", "a", labels={"tier": "gold"}))
    exists = selector(Requirement("zone", "Exists"))
    assert sorted(t.run_uid for t in state.matching_targets("default", exists)) == [blue.uid, red.uid]
    state = apply(state, Event("DELETED", red))
    assert [t.run_uid for t in state.matching_targets("default", exists)] == [blue.uid]
    finished = decoded_run("r1", labels={"zone": "blue"}, phase="Succeeded", assigned_pod="a", uid=blue.uid)
    state = apply(state, Event("MODIFIED", finished))
    assert state.matching_targets("default", exists) == ()
    assert state.matching_targets("default", selector(is_in("zone", "blue"))) == ()
    assert state == from_objects(list(state.runs()))


def test_matching_targets_never_examines_runs_no_positive_requirement_names(monkeypatch: pytest.MonkeyPatch) -> None:
    unrelated = [active_run(f"other-{i}", "b", runtime="node", labels={"app": f"x{i}"}) for i in range(500)]
    state = from_objects([*unrelated, active_run("mine", "a", labels={"team": "t"})])
    examined = 0
    original = LabelSelector.matches

    def counting(self: LabelSelector, labels: Labels) -> bool:
        nonlocal examined
        examined += 1
        return original(self, labels)

    monkeypatch.setattr(LabelSelector, "matches", counting)
    wanted = selector(is_in("team", "t", "u"), Requirement("app", "DoesNotExist"))
    assert [t.run_uid for t in state.matching_targets("default", wanted)] == ["uid-run-default-mine"]
    assert examined == 1
    assert state.matching_targets("default", selector(Requirement("nothing", "Exists"))) == ()
    assert examined == 1


# --- properties ---------------------------------------------------------------------------------------

KEYS = ["zone", "tier", "app"]
VALUES = ["blue", "red", "gold"]
NAMESPACES = ["default", "other"]
PHASES = ["", "Pending", "Scheduled", "Running", "Ready", "Succeeded"]
WORKSPACE_NAMES = ["ws1", "ws2"]

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)


@st.composite
def runs_st(draw: st.DrawFn) -> Run:
    name = draw(st.sampled_from(["r1", "r2", "r3", "r4", "r5"]))
    pod = draw(st.sampled_from(["", "a", "b"]))
    # bound to one generation of its pod, or by name alone (a writer that leaves the uid out)
    generation = draw(st.sampled_from(["", "0", "1"]))
    return decoded_run(
        name,
        namespace=draw(st.sampled_from(NAMESPACES)),
        runtime=draw(st.sampled_from(["python", "node"])),
        labels=draw(labels_st),
        phase=draw(st.sampled_from(PHASES)),
        assigned_pod=pod,
        assigned_pod_uid=f"{pod}-generation-{generation}" if pod and generation else "",
        requests=draw(st.dictionaries(st.sampled_from(["runs", "cpu"]), st.sampled_from(["0", "1", "3", "1k"]))),
        uid=f"{name}-generation-{draw(st.integers(0, 1))}",  # recreated Runs get a new uid
        workspace=draw(st.sampled_from([None, *WORKSPACE_NAMES])),
    )


@st.composite
def pods_st(draw: st.DrawFn) -> RuntimePod:
    """Pods ``a`` and ``b`` in two generations (deleted and recreated under the name), now and
    then without the runtime label (not a Runtime Pod: as good as gone)."""
    name = draw(st.sampled_from(["a", "b"]))
    return decoded_pod(
        name,
        namespace=draw(st.sampled_from(NAMESPACES)),
        runtime=draw(st.sampled_from(["python", "python", "node", None])),
        uid=f"{name}-generation-{draw(st.integers(0, 1))}",
    )


@st.composite
def requirements_st(draw: st.DrawFn) -> Requirement:
    operator: Operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    values: frozenset[str] = frozenset()
    if operator in ("In", "NotIn"):
        values = frozenset(draw(st.sets(st.sampled_from(VALUES), min_size=1)))
    return Requirement(draw(st.sampled_from(KEYS)), operator, values)


selectors_st = st.lists(requirements_st(), min_size=1, max_size=3).map(lambda rs: LabelSelector(tuple(rs)))
events_st = st.lists(
    st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.one_of(runs_st(), runs_st(), pods_st())),
    max_size=25,
)


def fold(events: Iterable[tuple[str, Object]]) -> ClusterState:
    state = EMPTY_STATE
    for kind, obj in events:
        state = apply(state, Event("DELETED" if kind == "DELETED" else "ADDED", obj))
    return state


def on_its_pod(state: ClusterState, run: Run) -> bool:
    """SPEC §1, as written: active, and bound by name alone or to the uid its pod has now."""
    if not run.status.active:
        return False
    if not run.status.assigned_pod_uid:
        return True
    pod = state.pod(run.namespace, run.status.assigned_pod)
    return pod is not None and pod.uid == run.status.assigned_pod_uid


def brute_targets(state: ClusterState, namespace: str, wanted: LabelSelector) -> list[str]:
    return sorted(
        run.uid
        for run in state.runs()
        if run.namespace == namespace and on_its_pod(state, run) and wanted.matches(run.labels)
    )


@given(events_st, selectors_st)
def test_matching_targets_equals_a_brute_force_scan(events: list[tuple[str, Object]], wanted: LabelSelector) -> None:
    state = fold(events)
    for namespace in NAMESPACES:
        found = state.matching_targets(namespace, wanted)
        assert sorted(t.run_uid for t in found) == brute_targets(state, namespace, wanted)
        for target in found:
            run = state.run_by_uid(namespace, target.run_uid)
            assert run is not None and target.pod == run.status.assigned_pod


@given(events_st, selectors_st)
def test_matches_by_pod_groups_every_match_on_its_pod_lowest_uid_first(
    events: list[tuple[str, Object]], wanted: LabelSelector
) -> None:
    """The per-pod answer a snapshot reads: every match on its pod, in uid order; with
    ``first_only`` at least each pod's lowest-uid match comes first."""
    state = fold(events)
    for namespace in NAMESPACES:
        expected: dict[str, list[str]] = {}
        for run in sorted(state.runs(), key=lambda r: r.uid):
            if run.namespace == namespace and on_its_pod(state, run) and wanted.matches(run.labels):
                expected.setdefault(run.status.assigned_pod, []).append(run.uid)
        grouped = state.matches_by_pod(namespace, wanted)
        assert {pod: [t.run_uid for t in held] for pod, held in grouped.items()} == expected
        firsts = state.matches_by_pod(namespace, wanted, first_only=True)
        assert {pod: held[0].run_uid for pod, held in firsts.items()} == {p: u[0] for p, u in expected.items()}


@given(events_st)
def test_usage_and_pending_equal_a_brute_force_recount(events: list[tuple[str, Object]]) -> None:
    """Also across pods deleted and recreated under their names: a Run bound to another
    generation of its pod counts nowhere, and every candidate slot carries its pod's usage."""
    state = fold(events)
    for namespace in NAMESPACES:
        for pod in ["a", "b"]:
            expected: dict[str, Amount] = {}
            for run in state.runs():
                if run.namespace == namespace and on_its_pod(state, run) and run.status.assigned_pod == pod:
                    for name, amount in run.requests.items():
                        expected[name] = expected.get(name, 0) + amount
                        if not expected[name]:
                            del expected[name]
            assert dict(state.usage(namespace, pod)) == expected
        for runtime in ["python", "node"]:
            for slot in state.pod_slots(namespace, runtime):
                assert dict(slot.usage) == dict(state.usage(namespace, slot.pod.name))
        for workspace in WORKSPACE_NAMES:
            assert state.pending_naming(namespace, workspace) == {
                run.key
                for run in state.runs()
                if run.namespace == namespace and run.workspace is not None and run.workspace.name == workspace
                and run.status.pending
            }


@given(events_st)
def test_applying_events_builds_the_same_value_as_building_from_the_survivors(events: list[tuple[str, Object]]) -> None:
    state = fold(events)
    built = from_objects([*state.runs(), *state.pods()])
    assert built == state
    for namespace in NAMESPACES:
        for pod in ["a", "b"]:
            assert sorted(built.bound_to(namespace, pod)) == sorted(state.bound_to(namespace, pod))


@given(st.lists(runs_st(), max_size=15))
def test_from_objects_equals_applying_one_added_event_per_object(runs: list[Run]) -> None:
    assert from_objects(runs) == added(*runs)


def test_bulk_building_indexes_every_object() -> None:
    make: Callable[[int], Object] = lambda i: active_run(f"r{i}", f"p{i % 100}", labels={"app": f"a{i % 50}"})
    objects = [make(i) for i in range(5_000)]
    state = from_objects(objects)
    assert len(list(state.runs())) == 5_000
    assert len(state.matching_targets("default", selector(is_in("app", "a1")))) == 100


def test_the_fast_state_constructor_builds_the_same_frozen_value() -> None:
    import dataclasses

    from kruntimes.pure.state.cluster import _state

    state = added(active_run("r1", "a", labels={"zone": "blue"}), decoded_pod("a"))
    fields = [getattr(state, f.name) for f in dataclasses.fields(ClusterState)]
    rebuilt = _state(*fields)
    assert type(rebuilt) is ClusterState and rebuilt == state
    assert all(getattr(rebuilt, f.name) is value for f, value in zip(dataclasses.fields(ClusterState), fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rebuilt._runs = state._runs  # type: ignore[misc]


def test_the_fast_slot_constructor_builds_an_equal_pod_slot() -> None:
    from kruntimes.pure.state.cluster import _slot
    from kruntimes.pure.model.objects import PodSlot

    pod = decoded_pod("a")
    assert _slot(pod, {"runs": 1}) == PodSlot(pod, {"runs": 1})
    assert type(_slot(pod, {})) is PodSlot
