"""Which Pending Runs an event wakes (SPEC §8)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from functools import reduce

import pytest

from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, EventType, apply
from kruntimes.pure.model.objects import Object
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Run, RunKey, RuntimePod
from kruntimes.pure.wakeups import Wakeup, wakeups
from tests.pure.builders import NOW, active_run, at, decoded_pod, decoded_run, decoded_workspace


def world(*objects: Object) -> ClusterState:
    return reduce(lambda state, obj: apply(state, Event("ADDED", obj)), objects, EMPTY_STATE)


def woken(state: ClusterState, kind: EventType, obj: Object, now_offset: float = 0) -> tuple[Wakeup, ...]:
    event = Event(kind, obj)
    return wakeups(state, apply(state, event), event, NOW + timedelta(seconds=now_offset), DEFAULT_CONFIG)


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


PYTHON_WAITERS = (key("w1"), key("w2"))


# --- the Run's own events ------------------------------------------------------------------


def test_a_created_pending_run_wakes_itself() -> None:
    assert woken(EMPTY_STATE, "ADDED", decoded_run("r")) == (Wakeup((key("r"),), None),)


def test_an_updated_pending_run_wakes_itself_only(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_run("w1", resource_version="2")) == (Wakeup((key("w1"),), None),)


def test_a_run_moving_between_active_phases_wakes_nothing(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a", phase="Scheduled")))
    assert woken(state, "MODIFIED", active_run("r", "a", phase="Running")) == ()


def test_a_new_active_run_wakes_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", active_run("r", "a")) == ()


# --- capacity released ---------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Timeout", "Cancelled"])
def test_a_run_finishing_wakes_the_pending_runs_of_its_namespace_and_runtime(waiting: ClusterState, phase: str) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    assert woken(state, "MODIFIED", decoded_run("r", phase=phase, assigned_pod="a")) == (
        Wakeup(PYTHON_WAITERS, "capacity_released"),
    )


def test_deleting_an_active_run_releases_capacity(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    assert woken(state, "DELETED", active_run("r", "a")) == (Wakeup(PYTHON_WAITERS, "capacity_released"),)


def test_deleting_an_active_run_the_state_never_saw_still_releases_capacity(waiting: ClusterState) -> None:
    assert woken(waiting, "DELETED", active_run("r", "a")) == (Wakeup(PYTHON_WAITERS, "capacity_released"),)


def test_deleting_a_pending_or_finished_run_wakes_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "DELETED", decoded_run("w1")) == ()
    state = apply(waiting, Event("ADDED", decoded_run("done", phase="Succeeded")))
    assert woken(state, "DELETED", decoded_run("done", phase="Succeeded")) == ()


def test_a_run_reset_to_pending_wakes_itself_and_the_others_but_not_itself_twice(waiting: ClusterState) -> None:
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    assert woken(state, "MODIFIED", decoded_run("r", phase="Pending", resource_version="3")) == (
        Wakeup((key("r"),), None),
        Wakeup(PYTHON_WAITERS, "capacity_released"),
    )


def test_capacity_released_with_nobody_waiting_wakes_nothing() -> None:
    state = world(active_run("r", "a"))
    assert woken(state, "DELETED", active_run("r", "a")) == ()


# --- runtime pods -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changed",
    [
        decoded_pod("a", phase="Failed"),
        decoded_pod("a", deleting=True),
        decoded_pod("a", ready=False),
        decoded_pod("a", ready=None),
        decoded_pod("a", heartbeat_status="False"),
        decoded_pod("a", heartbeat_at=at(-60)),
        decoded_pod("a", capacity={"runs": "4"}),
        decoded_pod("a", capacity={"cpu": "2"}),
        decoded_pod("a", uid="recreated"),
    ],
    ids=["phase", "deletion", "ready false", "ready missing", "heartbeat false", "heartbeat stale", "runs", "cpu", "uid"],
)
def test_a_runtime_pod_change_that_matters_wakes_its_runtimes_pending_runs(
    waiting: ClusterState, changed: RuntimePod
) -> None:
    assert woken(waiting, "MODIFIED", changed) == (Wakeup(PYTHON_WAITERS, "runtime_pod"),)


def test_a_runtime_pod_created_or_deleted_wakes_its_runtimes_pending_runs(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_pod("b")) == (Wakeup(PYTHON_WAITERS, "runtime_pod"),)
    assert woken(waiting, "DELETED", decoded_pod("a")) == (Wakeup(PYTHON_WAITERS, "runtime_pod"),)


def test_a_heartbeat_that_only_moves_the_probe_time_of_a_fresh_pod_wakes_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_pod("a", heartbeat_at=at(5), resource_version="2"), now_offset=5) == ()


def test_a_heartbeat_that_makes_a_stale_pod_fresh_wakes(waiting: ClusterState) -> None:
    # Probed at NOW; at NOW+20 s it was stale; the new probe makes it fresh again.
    assert woken(waiting, "MODIFIED", decoded_pod("a", heartbeat_at=at(20)), now_offset=20) == (
        Wakeup(PYTHON_WAITERS, "runtime_pod"),
    )


def test_a_heartbeat_on_a_pod_that_stays_stale_wakes_nothing(waiting: ClusterState) -> None:
    state = apply(waiting, Event("MODIFIED", decoded_pod("a", heartbeat_at=at(-100))))
    assert woken(state, "MODIFIED", decoded_pod("a", heartbeat_at=at(-90))) == ()


def test_a_relabelled_pod_wakes_both_runtimes(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_pod("a", runtime="node")) == (
        Wakeup(PYTHON_WAITERS, "runtime_pod"),
        Wakeup((key("w-node"),), "runtime_pod"),
    )


def test_a_pod_losing_its_runtime_label_counts_as_deleted(waiting: ClusterState) -> None:
    assert woken(waiting, "MODIFIED", decoded_pod("a", runtime=None)) == (Wakeup(PYTHON_WAITERS, "runtime_pod"),)


def test_pods_without_a_runtime_label_wake_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_pod("plain", runtime=None)) == ()


def test_pods_of_another_namespace_wake_only_that_namespace(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_pod("a", namespace="other")) == (
        Wakeup((key("w-other", "other"),), "runtime_pod"),
    )


def test_workspace_events_wake_nothing(waiting: ClusterState) -> None:
    assert woken(waiting, "ADDED", decoded_workspace("ws")) == ()


def test_pending_runs_are_found_through_the_index_not_a_scan(
    waiting: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_scans(self: ClusterState) -> Iterator[Run]:
        raise AssertionError("wakeups scanned every Run")

    monkeypatch.setattr(ClusterState, "runs", no_scans)
    assert woken(waiting, "ADDED", decoded_pod("b")) == (Wakeup(PYTHON_WAITERS, "runtime_pod"),)
    state = apply(waiting, Event("ADDED", active_run("r", "a")))
    assert woken(state, "DELETED", active_run("r", "a")) == (Wakeup(PYTHON_WAITERS, "capacity_released"),)
