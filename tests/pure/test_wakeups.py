"""What a watch event signals to the waiting Runs (SPEC §8): the event's facts, not a scan."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from kruntimes.pure.model.objects import DEFAULT_CONFIG, Object, Run, RunKey, RuntimePod
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, EventType, apply
from kruntimes.pure.wakeups import Activate, Room, Signal, Targets, signals
from tests.builders import NOW, active_run, at, decoded_pod, decoded_run, decoded_workspace, world


def woken(state: ClusterState, kind: EventType, obj: Object, now_offset: float = 0) -> tuple[Signal, ...]:
    event = Event(kind, obj)
    return signals(state, apply(state, event), event, NOW + timedelta(seconds=now_offset), DEFAULT_CONFIG)


def key(name: str, namespace: str = "default") -> RunKey:
    return RunKey(namespace, name)


@pytest.fixture
def waiting() -> ClusterState:
    """Two Pending python Runs, one Pending node Run, one Pending python Run elsewhere."""
    return world(
        decoded_run("w1"),
        decoded_run("w2", phase="Pending"),
        decoded_run("w-node", runtime="node"),
        decoded_run("w-other", namespace="other"),
        decoded_pod("a"),
    )


def room(pod: str = "a", source: str = "capacity_released", runtime: str = "python", namespace: str = "default", grown: bool = False) -> Room:
    return Room(namespace, runtime, pod, source, grown)  # type: ignore[arg-type]  # a test's literal


# --- the Run's own events ------------------------------------------------------------------


def test_a_created_pending_run_wakes_itself() -> None:
    assert woken(EMPTY_STATE, "ADDED", decoded_run("r")) == (Activate(key("r")),)


def test_a_pending_run_changed_in_what_its_decision_reads_wakes_itself_only(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_run("w1", resource_version="2", cancel=True)) == (Activate(key("w1")),)


def test_the_schedulers_own_waiting_status_write_wakes_nothing(waiting: ClusterState) -> None:
    """Only the message, the Scheduled condition and the version moved: planning it again
    would end in the same Wait (each waiting Run would cost two cycles)."""
    message = 'waiting for available runtime pods for runtime "python"'
    condition: dict[str, object] = {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": message,
                 "lastTransitionTime": at(0)}
    written = decoded_run("w1", resource_version="2", phase="Pending", message=message, conditions=[condition])
    assert woken(waiting, "MODIFIED", written) == ()


def test_a_run_moving_between_active_phases_wakes_nothing(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a", phase="Scheduled")))
    assert woken(state, "MODIFIED", active_run("r", "a", phase="Running")) == ()


def test_a_new_active_run_is_a_new_affinity_target(waiting: ClusterState) -> None:
    run = active_run("r", "a", labels={"app": "db"})
    assert woken(waiting, "ADDED", run) == (Targets("default", (run.labels,)),)


# --- capacity released ---------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Timeout", "Cancelled"])
def test_a_run_finishing_frees_room_on_its_pod_and_removes_a_target(waiting: ClusterState, phase: str) -> None:
    run = active_run("r", "a", labels={"app": "db"})
    state = apply(waiting, Event("ADDED", run))
    assert woken(state, "MODIFIED", decoded_run("r", phase=phase, assigned_pod="a", labels={"app": "db"})) == (
        room(), Targets("default", (run.labels,)),
    )


def test_deleting_an_active_run_frees_room(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    assert woken(state, "DELETED", active_run("r", "a"))[0] == room()


def test_deleting_an_active_run_the_state_never_saw_still_frees_room(waiting: ClusterState) -> None:
    assert woken(waiting, "DELETED", active_run("r", "a"))[0] == room()


def test_deleting_a_pending_or_finished_run_wakes_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "DELETED", decoded_run("w1")) == ()
    state = apply(waiting, Event("ADDED", decoded_run("done", phase="Succeeded")))
    assert woken(state, "DELETED", decoded_run("done", phase="Succeeded")) == ()


def test_a_run_reset_to_pending_wakes_itself_and_frees_its_room(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    got = woken(state, "MODIFIED", decoded_run("r", phase="Pending", resource_version="3"))
    assert got[:2] == (Activate(key("r")), room())


# --- runtime pods -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before",
    [
        decoded_pod("a", phase="Failed"),
        decoded_pod("a", deleting=True),
        decoded_pod("a", ready=False),
        decoded_pod("a", heartbeat_status="False"),
        decoded_pod("a", heartbeat_at=at(-60)),
        decoded_pod("a", capacity={"runs": "1"}),
        decoded_pod("a", uid="recreated"),
    ],
    ids=["phase", "deletion", "ready false", "heartbeat false", "heartbeat stale", "capacity", "uid"],
)
def test_a_runtime_pod_that_becomes_available_or_changes_offers_room(before: RuntimePod) -> None:
    state = world(decoded_run("w1"), before)
    assert woken(state, "MODIFIED", decoded_pod("a", capacity={"runs": "4"})) == (room(source="runtime_pod", grown=True),)


def test_a_runtime_pod_created_offers_room_and_a_deleted_one_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_pod("b")) == (room("b", source="runtime_pod", grown=True),)
    assert woken(waiting, "DELETED", decoded_pod("a")) == ()


def test_a_pod_that_becomes_unavailable_offers_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_pod("a", ready=False)) == ()


def test_a_heartbeat_that_only_moves_the_probe_time_of_a_fresh_pod_wakes_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_pod("a", heartbeat_at=at(5), resource_version="2"), now_offset=5) == ()


def test_a_heartbeat_that_makes_a_stale_pod_fresh_offers_room(waiting: ClusterState) -> None:
    # Probed at NOW; at NOW+20 s it was stale; the new probe makes it fresh again.
    assert woken(waiting, "MODIFIED", decoded_pod("a", heartbeat_at=at(20)), now_offset=20) == (
        room(source="runtime_pod", grown=True),
    )


def test_a_heartbeat_on_a_pod_that_stays_stale_wakes_nothing(waiting: ClusterState) -> None:
    state = apply(waiting, Event("MODIFIED", decoded_pod("a", heartbeat_at=at(-100))))
    assert woken(state, "MODIFIED", decoded_pod("a", heartbeat_at=at(-90))) == ()


def test_a_relabelled_pod_offers_room_to_its_new_runtime(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_pod("a", runtime="node")) == (
        room(source="runtime_pod", runtime="node", grown=True),
    )


def test_pods_without_a_runtime_label_wake_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_pod("plain", runtime=None)) == ()


def test_pods_of_another_namespace_offer_room_in_that_namespace(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_pod("a", namespace="other")) == (
        room(source="runtime_pod", namespace="other", grown=True),
    )


def test_workspace_events_signal_nothing_here(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_workspace("ws")) == ()


def test_signals_never_scan_the_runs(waiting: ClusterState, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_scans(self: ClusterState) -> Iterator[Run]:
        raise AssertionError("signals scanned every Run")

    monkeypatch.setattr(ClusterState, "runs", no_scans)
    monkeypatch.setattr(ClusterState, "pending_naming", lambda *_: (_ for _ in ()).throw(AssertionError("looked up")))
    assert woken(waiting, "ADDED", decoded_pod("b")) == (room("b", source="runtime_pod", grown=True),)
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    assert woken(state, "DELETED", active_run("r", "a"))[0] == room()


# --- a pod gone or replaced (SPEC §1) ------------------------------------------------------


def test_a_pod_deleted_under_its_runs_signals_their_labels_as_targets_gone() -> None:
    pod = decoded_pod("a", uid="a-1")
    state = world(pod, active_run("r1", "a", pod_uid="a-1", labels={"zone": "blue"}), active_run("r2", "a", labels={"zone": "red"}))
    assert woken(state, "DELETED", pod) == (Targets("default", ({"zone": "blue"},)),)  # r2 counts by its name alone


def test_a_pod_replaced_under_its_name_signals_the_targets_gone_and_its_room() -> None:
    state = world(decoded_pod("a", uid="a-1"), active_run("r1", "a", pod_uid="a-1", labels={"zone": "blue"}))
    assert woken(state, "MODIFIED", decoded_pod("a", uid="a-2")) == (
        Targets("default", ({"zone": "blue"},)),
        room(source="runtime_pod", grown=True),
    )


def test_a_run_on_a_replaced_pod_finishing_frees_no_room_and_no_target() -> None:
    state = world(decoded_pod("a", uid="a-2"), active_run("r1", "a", pod_uid="a-1", labels={"zone": "blue"}))
    finished = decoded_run("r1", labels={"zone": "blue"}, phase="Succeeded", assigned_pod="a", assigned_pod_uid="a-1")
    assert woken(state, "MODIFIED", finished) == ()


# --- what a Run's own event changed ---------------------------------------------------------------


def test_an_active_run_relabelled_on_its_pod_signals_its_old_and_new_labels_as_targets(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a", labels={"app": "db"})))
    relabelled = active_run("r", "a", labels={"app": "web"}, resource_version="2")
    assert woken(state, "MODIFIED", relabelled) == (Targets("default", ({"app": "db"}, {"app": "web"})),)


def test_a_finished_run_reset_to_pending_wakes_itself(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", decoded_run("done", phase="Succeeded")))
    assert woken(state, "MODIFIED", decoded_run("done", resource_version="2")) == (Activate(key("done")),)


def test_a_retried_run_whose_running_condition_moved_wakes_itself(waiting: ClusterState) -> None:
    """The retry backoff counts from the ``Running`` condition's transition (SPEC §3): only the
    ``Scheduled`` condition is the scheduler's own waiting write."""

    def retried(since: float, version: str) -> Run:
        running: dict[str, object] = {"type": "Running", "status": "False", "reason": "Error", "lastTransitionTime": at(since)}
        return decoded_run("again", attempt=2, conditions=[running], resource_version=version)

    state = apply(waiting, Event("ADDED", retried(-60, "1")))
    assert woken(state, "MODIFIED", retried(0, "2")) == (Activate(key("again")),)


# --- a pod's uid under its name -------------------------------------------------------------------


def test_a_heartbeat_on_a_pod_with_runs_on_it_signals_no_targets() -> None:
    state = world(decoded_pod("a", uid="a-1"), active_run("r1", "a", pod_uid="a-1", labels={"zone": "blue"}))
    assert woken(state, "MODIFIED", decoded_pod("a", uid="a-1")) == ()


def test_a_pod_seen_again_after_its_deletion_turns_its_runs_back_into_targets() -> None:
    pod = decoded_pod("a", uid="a-1")
    state = apply(world(pod, active_run("r1", "a", pod_uid="a-1", labels={"zone": "blue"})), Event("DELETED", pod))
    assert woken(state, "ADDED", pod) == (Targets("default", ({"zone": "blue"},)), room(source="runtime_pod", grown=True))


def test_a_replaced_pod_names_the_labels_its_runs_share_once() -> None:
    blue = {"zone": "blue"}
    state = world(decoded_pod("a", uid="a-1"), active_run("r1", "a", pod_uid="a-1", labels=blue), active_run("r2", "a", pod_uid="a-1", labels=blue))
    assert woken(state, "DELETED", decoded_pod("a", uid="a-1")) == (Targets("default", (blue,)),)
