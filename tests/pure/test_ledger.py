"""The assumed-reservation ledger (SPEC §6): handoff, sync, compare-and-swap reserve, release."""

from __future__ import annotations

from datetime import timedelta
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.pipeline import is_successful
from returns.result import Result

from kruntimes.pure.state.cluster import ClusterState, Event, apply
from kruntimes.pure.ledger import (
    EMPTY_LEDGER,
    Ledger,
    ReserveConflict,
    ReserveConflictReason,
    hold,
    observe,
    release,
    reserve,
    reserved_usage,
    sync,
)
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Reservation, Run, RunKey
from kruntimes.pure.model.plan import Bind
from kruntimes.pure.persistent.pdict import pdict
from kruntimes.pure.snapshot import take
from kruntimes.pure.step import plan
from tests.builders import NOW, active_run, affinity_json, at, decoded_pod, decoded_run, term, world


def granted(ledger: Ledger, state: ClusterState, run: Run, pod: str = "a") -> Ledger:
    result = reserve(ledger, state, run, pod, f"uid-pod-{run.namespace}-{pod}", NOW, DEFAULT_CONFIG)
    assert is_successful(result), result
    return result.unwrap()


def conflict_reason(result: Result[Ledger, ReserveConflict]) -> ReserveConflictReason:
    assert not is_successful(result), result
    return result.swap().unwrap().reason


def usage_seen_by(state: ClusterState, ledger: Ledger, key: RunKey, pod: str) -> dict[str, object]:
    """The usage a cycle for ``key`` would plan against on ``pod`` (the step syncs, then snapshots)."""
    snapshot = plan(state, ledger, key, NOW, DEFAULT_CONFIG).snapshot
    return {name: amount for slot in snapshot.pods if slot.pod.name == pod for name, amount in slot.usage.items()}


# --- reserve -------------------------------------------------------------------------------


def test_a_granted_reservation_records_what_the_cycle_planned_from() -> None:
    run = decoded_run("r", labels={"zone": "blue"}, requests={"cpu": "2"}, resource_version="7")
    state = world(decoded_pod("a", capacity={"cpu": "4"}), run)
    ledger = granted(EMPTY_LEDGER, state, run)
    assert ledger.get("default", run.uid) == Reservation(
        namespace="default",
        run_uid=run.uid,
        run_name="r",
        resource_version="7",
        pod="a",
        pod_uid="uid-pod-default-a",
        requests=run.requests,
        labels=run.labels,
    )
    assert len(ledger) == 1
    assert ledger.in_namespace("default") == (ledger.get("default", run.uid),)
    assert dict(reserved_usage(ledger, "default", "a")) == {"cpu": 2, "runs": 1}
    assert dict(reserved_usage(ledger, "default", "b")) == {}


def test_a_ledger_names_the_namespaces_that_hold_reservations_in_order() -> None:
    zeta, alpha = decoded_run("r", namespace="zeta"), decoded_run("r", namespace="alpha")
    state = world(decoded_pod("a", namespace="zeta"), decoded_pod("a", namespace="alpha"), zeta, alpha)
    ledger = granted(granted(EMPTY_LEDGER, state, zeta), state, alpha)
    assert ledger.namespaces() == ("alpha", "zeta")
    assert release(ledger, "alpha", alpha.uid).namespaces() == ("zeta",)
    assert EMPTY_LEDGER.namespaces() == ()


def test_capacity_taken_by_a_concurrent_reservation_is_a_conflict() -> None:
    first, second = decoded_run("r1"), decoded_run("r2")
    state = world(decoded_pod("a", capacity={"runs": "1"}), first, second)
    ledger = granted(EMPTY_LEDGER, state, first)
    result = reserve(ledger, state, second, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)
    assert conflict_reason(result) == "NoRoom"


def test_reservations_and_actual_usage_add_up_against_capacity() -> None:
    run = decoded_run("r", requests={"cpu": "2"})
    state = world(
        decoded_pod("a", capacity={"cpu": "4", "runs": "9"}),
        active_run("busy", "a", requests={"cpu": "1"}),
        run,
    )
    other = decoded_run("other", requests={"cpu": "1"})
    state = apply(state, Event("ADDED", other))
    ledger = granted(EMPTY_LEDGER, state, other)
    assert is_successful(reserve(ledger, state, run, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)), "1+1+2 = 4 fits"
    bigger = decoded_run("bigger", requests={"cpu": "3"})
    state = apply(state, Event("ADDED", bigger))
    assert conflict_reason(reserve(ledger, state, bigger, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)) == "NoRoom"


def test_a_replaced_pod_is_a_conflict() -> None:
    run = decoded_run("r")
    state = world(decoded_pod("a", uid="new-uid"), run)
    assert conflict_reason(reserve(EMPTY_LEDGER, state, run, "a", "old-uid", NOW, DEFAULT_CONFIG)) == "PodReplaced"


def test_a_reservation_made_for_a_replaced_pod_holds_nothing_on_the_new_pod() -> None:
    first, second, waiting = decoded_run("r1", labels={"zone": "blue"}), decoded_run("r2"), decoded_run("r4")
    old = decoded_pod("a", uid="a-1", capacity={"runs": "1"})
    ledger = reserve(EMPTY_LEDGER, world(old, first), first, "a", "a-1", NOW, DEFAULT_CONFIG).unwrap()
    new = decoded_pod("a", uid="a-2", capacity={"runs": "1"})
    state = apply(apply(world(old, first, second, waiting), Event("DELETED", old)), Event("ADDED", new))
    assert usage_seen_by(state, ledger, second.key, "a") == {}
    assert dict(reserved_usage(ledger, "default", "a", pod_uid="a-2")) == {}
    assert dict(reserved_usage(ledger, "default", "a", pod_uid="a-1")) == {"runs": 1}
    both = reserve(ledger, state, second, "a", "a-2", NOW, DEFAULT_CONFIG).unwrap()
    assert usage_seen_by(state, both, waiting.key, "a") == {"runs": 1}  # the second one's only
    anti = decoded_run("r3", affinity=affinity_json(anti_required=[term({"zone": "blue"})]))
    assert tuple(take(apply(state, Event("ADDED", anti)), ledger, anti.key, NOW, DEFAULT_CONFIG).targets) == ()
    assert ledger.get("default", first.uid) is not None, "its Run's fate ends it (sync), not the pod's"


def test_when_the_new_pods_reservation_goes_the_one_left_for_the_former_pod_holds_nothing_on_it() -> None:
    """The new pod's own reservation is released while one made for the pod it replaced stays:
    the pod has all its room again, and the next Run is bound there."""
    first, second, waiting = decoded_run("r1"), decoded_run("r2"), decoded_run("r3")
    old = decoded_pod("a", uid="a-1", capacity={"runs": "1"})
    ledger = reserve(EMPTY_LEDGER, world(old, first), first, "a", "a-1", NOW, DEFAULT_CONFIG).unwrap()
    new = decoded_pod("a", uid="a-2", capacity={"runs": "1"})
    state = apply(apply(world(old, first, second, waiting), Event("DELETED", old)), Event("ADDED", new))
    both = reserve(ledger, state, second, "a", "a-2", NOW, DEFAULT_CONFIG).unwrap()
    left = release(both, "default", second.uid)
    assert [r.run_uid for r in left.in_namespace("default")] == [first.uid]
    assert usage_seen_by(state, left, waiting.key, "a") == {}
    planned = plan(state, left, waiting.key, NOW, DEFAULT_CONFIG).planned.unwrap()
    assert isinstance(planned, Bind) and planned.pod == "a"


def test_a_reservation_made_for_the_pod_name_alone_holds_room_on_the_pod_of_that_name() -> None:
    """As one read back without a pod uid does (a scenario's reservation on a pod it does not list),
    beside those made for the pod's uid."""
    old, new, waiting = decoded_run("old"), decoded_run("new"), decoded_run("waiting")
    name_alone = Reservation("default", old.uid, "old", old.resource_version, "a", "", old.requests, old.labels)
    state = world(decoded_pod("a", capacity={"runs": "3"}), old, new, waiting)
    ledger = Ledger(pdict({"default": pdict({old.uid: name_alone})}))
    assert usage_seen_by(state, ledger, waiting.key, "a") == {"runs": 1}
    assert usage_seen_by(state, granted(ledger, state, new), waiting.key, "a") == {"runs": 2}


def test_a_deleted_or_relabelled_pod_is_a_conflict() -> None:
    run = decoded_run("r")
    assert conflict_reason(reserve(EMPTY_LEDGER, world(run), run, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)) == (
        "PodGone"
    )
    state = world(decoded_pod("a", runtime="node"), run)
    assert conflict_reason(reserve(EMPTY_LEDGER, state, run, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)) == "PodGone"


@pytest.mark.parametrize(
    "pod",
    [
        decoded_pod("a", ready=False),
        decoded_pod("a", phase="Pending"),
        decoded_pod("a", deleting=True),
        decoded_pod("a", heartbeat_at=at(-16)),
        decoded_pod("a", heartbeat_status="False"),
    ],
    ids=["unready", "not running", "being deleted", "stale heartbeat", "heartbeat false"],
)
def test_an_unavailable_pod_is_a_conflict(pod: object) -> None:
    run = decoded_run("r")
    state = world(pod, run)  # type: ignore[arg-type]
    assert conflict_reason(reserve(EMPTY_LEDGER, state, run, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)) == (
        "PodUnavailable"
    )


def test_availability_is_judged_at_the_reserve_instant() -> None:
    run = decoded_run("r")
    state = world(decoded_pod("a", heartbeat_at=at(0)), run)
    later = NOW + timedelta(seconds=16)
    assert conflict_reason(reserve(EMPTY_LEDGER, state, run, "a", "uid-pod-default-a", later, DEFAULT_CONFIG)) == (
        "PodUnavailable"
    )


def test_a_run_that_already_holds_a_reservation_cannot_reserve_again() -> None:
    run = decoded_run("r")
    state = world(decoded_pod("a", capacity={"runs": "5"}), decoded_pod("b", capacity={"runs": "5"}), run)
    ledger = granted(EMPTY_LEDGER, state, run)
    assert conflict_reason(reserve(ledger, state, run, "b", "uid-pod-default-b", NOW, DEFAULT_CONFIG)) == (
        "AlreadyReserved"
    )


@pytest.mark.parametrize(
    ("planned", "latest"),
    [
        (decoded_run("r", resource_version="1"), decoded_run("r", resource_version="2")),
        (decoded_run("r"), active_run("r", "b")),
        (decoded_run("r", phase="Succeeded"), decoded_run("r", phase="Succeeded")),
        (decoded_run("r"), None),
    ],
    ids=["changed since planning", "assigned meanwhile", "not pending", "deleted"],
)
def test_a_run_no_longer_pending_at_the_planned_version_cannot_reserve(planned: Run, latest: Run | None) -> None:
    state = world(decoded_pod("a"), *([latest] if latest is not None else []))
    assert conflict_reason(reserve(EMPTY_LEDGER, state, planned, "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)) == (
        "RunChanged"
    )


def test_conflict_messages_name_no_pod_or_run() -> None:
    run = decoded_run("secret-run")
    state = world(decoded_pod("secret-pod", capacity={"runs": "1"}), active_run("x", "secret-pod"), run)
    result = reserve(EMPTY_LEDGER, state, run, "secret-pod", "uid-pod-default-secret-pod", NOW, DEFAULT_CONFIG)
    assert "secret" not in result.swap().unwrap().message


# --- handoff ------------------------------------------------------------------------------------


def test_bound_then_observed_counts_usage_once() -> None:
    run = decoded_run("r", resource_version="5")
    waiting = decoded_run("next")
    state = world(decoded_pod("a", capacity={"runs": "3"}), run, waiting)
    ledger = granted(EMPTY_LEDGER, state, run)
    # Bind succeeded; the informer has not shown it yet: the reservation holds the slot.
    assert usage_seen_by(state, ledger, waiting.key, "a") == {"runs": 1}
    # The informer shows the assignment: actual usage takes over, not added on top.
    state = apply(state, Event("MODIFIED", active_run("r", "a", phase="Scheduled", resource_version="6")))
    assert usage_seen_by(state, ledger, waiting.key, "a") == {"runs": 1}
    assert len(sync(ledger, state, "default")) == 0
    assert observe(ledger, active_run("r", "a", phase="Scheduled", resource_version="6")) == EMPTY_LEDGER


def test_a_pending_observation_at_the_planned_version_keeps_the_reservation() -> None:
    run = decoded_run("r", resource_version="5")
    state = world(decoded_pod("a"), run)
    ledger = granted(EMPTY_LEDGER, state, run)
    assert sync(ledger, state, "default") is ledger


def test_a_pending_observation_at_another_version_drops_the_reservation() -> None:
    run = decoded_run("r", resource_version="5")
    state = world(decoded_pod("a"), run)
    ledger = granted(EMPTY_LEDGER, state, run)
    reset = decoded_run("r", resource_version="9", phase="Pending", attempt=2)
    assert sync(ledger, apply(state, Event("MODIFIED", reset)), "default") == EMPTY_LEDGER


@pytest.mark.parametrize(
    "observed",
    [
        None,
        decoded_run("r", phase="Failed", resource_version="5"),
        active_run("r", "a", phase="Scheduled", resource_version="6"),
    ],
    ids=["deleted", "not pending", "assigned"],
)
def test_sync_drops_reservations_the_state_has_overtaken(observed: Run | None) -> None:
    run = decoded_run("r", resource_version="5")
    state = world(decoded_pod("a"), run)
    ledger = granted(EMPTY_LEDGER, state, run)
    later = apply(state, Event("DELETED", run) if observed is None else Event("MODIFIED", observed))
    assert sync(ledger, later, "default") == EMPTY_LEDGER


def test_sync_drops_a_reservation_whose_uid_now_belongs_to_another_name() -> None:
    run = decoded_run("r", uid="u", resource_version="5")
    state = world(decoded_pod("a"), run)
    ledger = granted(EMPTY_LEDGER, state, run)
    renamed = apply(apply(state, Event("DELETED", run)), Event("ADDED", decoded_run("s", uid="u", resource_version="5")))
    assert sync(ledger, renamed, "default") == EMPTY_LEDGER


def test_observe_keeps_a_reservation_while_the_run_shows_pending_and_unassigned() -> None:
    run = decoded_run("r")
    ledger = granted(EMPTY_LEDGER, world(decoded_pod("a"), run), run)
    assert observe(ledger, run) is ledger
    assert observe(ledger, decoded_run("r", phase="Succeeded")) == EMPTY_LEDGER
    assert observe(ledger, decoded_run("r", resource_version="99")) == EMPTY_LEDGER
    assert observe(EMPTY_LEDGER, run) is EMPTY_LEDGER


def test_a_stale_assigned_pod_on_a_pending_run_is_not_an_assignment() -> None:
    """A retry reset can leave ``assignedPod`` on a Pending Run: it is planned like any Pending Run,
    it can reserve, and neither sync nor observe takes the stale field for its bind (SPEC §1)."""
    stale = decoded_run("r", phase="Pending", assigned_pod="a", resource_version="5")
    state = world(decoded_pod("a"), stale)
    ledger = granted(EMPTY_LEDGER, state, stale)
    assert ledger.get("default", stale.uid) is not None
    assert sync(ledger, state, "default") is ledger
    assert observe(ledger, stale) is ledger


# --- namespaces ----------------------------------------------------------------------------------


def test_one_namespaces_sync_and_snapshot_never_touch_another_namespaces_reservations() -> None:
    theirs = decoded_run("r", namespace="team-b", resource_version="3")
    mine = decoded_run("mine", namespace="team-a")
    state = world(decoded_pod("a", namespace="team-b"), decoded_pod("a", namespace="team-a"), theirs, mine)
    ledger = granted(EMPTY_LEDGER, state, theirs)
    # team-b's Run vanished from the state (e.g. a relist in progress); team-a's work must not touch it.
    gone = apply(state, Event("DELETED", theirs))
    assert sync(ledger, gone, "team-a") is ledger
    snapshot = take(gone, ledger, mine.key, NOW, DEFAULT_CONFIG)
    assert [dict(slot.usage) for slot in snapshot.pods] == [{}]
    assert ledger.get("team-b", theirs.uid) is not None
    assert sync(ledger, gone, "team-b") == EMPTY_LEDGER


def test_same_uid_in_two_namespaces_are_two_reservations() -> None:
    a = decoded_run("r", namespace="x", uid="same")
    b = decoded_run("r", namespace="y", uid="same")
    state = world(decoded_pod("a", namespace="x"), decoded_pod("a", namespace="y"), a, b)
    ledger = granted(granted(EMPTY_LEDGER, state, a), state, b)
    assert len(ledger) == 2
    assert release(ledger, "x", "same").get("y", "same") is not None


# --- release ----------------------------------------------------------------------------------------


def test_release_forgets_exactly_one_reservation() -> None:
    """The other reservation on the same pod keeps holding its room there."""
    r1, r2, waiting = decoded_run("r1"), decoded_run("r2"), decoded_run("waiting")
    state = world(decoded_pod("a", capacity={"runs": "3"}), r1, r2, waiting)
    ledger = granted(granted(EMPTY_LEDGER, state, r1), state, r2)
    after = release(ledger, "default", r1.uid)
    assert after.get("default", r1.uid) is None
    assert after.get("default", r2.uid) is not None
    assert usage_seen_by(state, after, waiting.key, "a") == {"runs": 1}
    assert release(after, "default", r1.uid) is after


@given(
    st.lists(st.sampled_from(["r1", "r2", "r3", "r4"]), unique=True, max_size=4),
    st.sampled_from(["r1", "r2", "r3", "r4"]),
)
def test_reserve_then_release_is_the_identity(held: list[str], extra: str) -> None:
    runs = {name: decoded_run(name) for name in ["r1", "r2", "r3", "r4"]}
    state = world(decoded_pod("a", capacity={"runs": "10"}), *runs.values())
    ledger = reduce(lambda led, name: granted(led, state, runs[name]), held, EMPTY_LEDGER)
    result = reserve(ledger, state, runs[extra], "a", "uid-pod-default-a", NOW, DEFAULT_CONFIG)
    if extra in held:
        assert not is_successful(result)
    else:
        assert release(result.unwrap(), "default", runs[extra].uid) == ledger


def test_a_hold_lasts_as_long_as_its_own_reservation_whatever_else_is_reserved_or_forgotten() -> None:
    """A bind with an unknown outcome keeps its reservation to the deadline of its read (SPEC §6):
    other Runs reserving or being released, here or in another namespace, do not cut it short."""
    held, other, later = decoded_run("held", namespace="x"), decoded_run("other", namespace="x"), decoded_run("later", namespace="x")
    elsewhere = decoded_run("elsewhere", namespace="y")
    pods = (decoded_pod("a", namespace="x", capacity={"runs": "3"}), decoded_pod("a", namespace="y"))
    state = world(*pods, held, other, later, elsewhere)
    deadline = NOW + timedelta(seconds=30)
    ledger = hold(granted(granted(granted(EMPTY_LEDGER, state, held), state, other), state, elsewhere), "x", held.uid, deadline)
    ledger = granted(ledger, state, later)
    assert ledger.held_until("x", held.uid) == deadline
    ledger = release(ledger, "x", other.uid)
    assert ledger.held_until("x", held.uid) == deadline
    ledger = release(ledger, "y", elsewhere.uid)  # y's last reservation
    assert ledger.held_until("x", held.uid) == deadline
    assert release(ledger, "x", held.uid).held_until("x", held.uid) is None

