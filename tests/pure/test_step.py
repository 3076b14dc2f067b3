"""The per-key transaction as data: a world in, the step's decision out (SPEC §3, §6, §7).

Each test feeds plain values (cluster state, ledger, key, now) to ``plan``/``decide``
/``transact`` and a write's outcome to ``settle`` (a read's to ``confirm``), and
checks what the effect layer would carry out: the ledger afterwards, the status
document, the Event and what the queue does next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, final

import pytest
from returns.result import Result, Success

from kruntimes.pure import step as steps
from kruntimes.pure.framework.interface import FilterPlugin, ParkKind, PendingMessage, PodFilter
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger, hold, reserve, without_namespace
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Condition, Object, PodSlot, Run, RunKey, Snapshot
from kruntimes.pure.model.plan import Bind, CycleError, Wait
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.state.cluster import ClusterState, Event, apply
from kruntimes.pure.step import (
    AWAIT_BIND_REQUEUE,
    Ambiguous,
    BackOff,
    Conflict,
    EventNote,
    Forget,
    Gone,
    Hold,
    Keep,
    Refused,
    Release,
    Park,
    RequeueAfter,
    Step,
    Written,
    confirm,
    decide,
    plan,
    settle,
    transact,
)
from tests.pure.test_framework import FixedScore, registry_with
from tests.builders import NOW, active_run, affinity_json, at, decoded_pod, decoded_run, term, world

KEY = RunKey("default", "r")


def bound(state: ClusterState, ledger: Ledger = EMPTY_LEDGER) -> Step:
    step = transact(state, ledger, KEY, NOW, DEFAULT_CONFIG)
    assert step.write is not None and step.write.purpose == "bind", step.settled
    return step


# --- decide: what each plan asks for ------------------------------------------------------------


def test_a_bind_reserves_the_chosen_pod_and_asks_for_the_scheduled_write() -> None:
    step = bound(world(decoded_pod("a"), decoded_run("r")))
    write = step.write
    assert write is not None
    assert (write.patch.phase, write.patch.assigned_pod, write.patch.message) == ("Scheduled", "a", "")
    assert write.patch.conditions == (Condition("Scheduled", "True", "Assigned", "assigned to runtime pod a", NOW),)
    reservation = step.ledger.get("default", write.run.uid)
    assert reservation is not None and (reservation.pod, reservation.resource_version) == ("a", "1")
    # the Event and the metrics are earned only by a write that lands
    assert step.settled.event is None and step.settled.sync is None


def test_a_wait_writes_the_pending_status_earns_failed_scheduling_and_parks_the_run_until_a_pod_fits() -> None:
    step = transact(world(decoded_run("r")), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert step.write is not None and step.write.purpose == "wait"
    assert step.write.patch.phase == "Pending"
    assert step.write.patch.message == 'waiting for available runtime pods for runtime "python"'
    assert step.write.patch.conditions == (Condition("Scheduled", "False", "Unschedulable", step.write.patch.message, NOW),)
    why = '0/0 Runtime Pods available: no Runtime Pod of runtime "python" in the namespace'
    assert step.settled == steps.Settled(
        "waiting", Park("unfit"), EventNote("Warning", "FailedScheduling", why), sync="no_pods"
    )
    assert step.ledger is EMPTY_LEDGER


def test_an_unchanged_wait_writes_nothing_but_still_earns_its_event() -> None:
    message = '0/0 Runtime Pods available: no Runtime Pod of runtime "python" in the namespace'
    first = transact(world(decoded_run("r")), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert first.write is not None
    written = world(_applied(first))
    again = transact(written, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert again.write is None
    assert again.settled.event == EventNote("Warning", "FailedScheduling", message)


@pytest.mark.parametrize(
    ("run", "reason", "event_type"),
    [
        (decoded_run("r", cancel=True), "Cancelled", "Normal"),
        (decoded_run("r", requests={"runs": "500m"}), "InvalidResources", "Warning"),
        (decoded_run("r", affinity={"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}), "InvalidAffinity", "Warning"),
    ],
    ids=["cancel", "invalid resources", "invalid affinity"],
)
def test_a_terminal_plan_writes_the_terminal_status_then_forgets_the_key(run: Run, reason: str, event_type: str) -> None:
    step = transact(world(decoded_pod("a"), run), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert step.write is not None and step.write.purpose == "terminal"
    assert step.write.patch.phase in ("Cancelled", "Failed") and step.write.patch.completion_time == NOW
    assert step.settled.outcome == "terminal" and step.settled.next == Forget()
    assert step.settled.event is not None and (step.settled.event.type, step.settled.event.reason) == (event_type, reason)
    # SPEC §11: only the invalid-affinity path counts as a selection error
    assert step.settled.sync == ("selection_error" if reason == "InvalidAffinity" else None)


@pytest.mark.parametrize("elapsed", [1.0, 1.5])
def test_a_run_inside_its_retry_back_off_is_delayed_and_nothing_is_written(elapsed: float) -> None:
    failed: dict[str, object] = {"type": "Running", "status": "False", "reason": "Retrying", "lastTransitionTime": at(-1)}
    run = decoded_run("r", phase="Pending", attempt=3, conditions=[failed])  # back-off 2 s, from 1 s ago
    now = NOW + timedelta(seconds=elapsed - 1.0)
    step = transact(world(decoded_pod("a"), run), EMPTY_LEDGER, KEY, now, DEFAULT_CONFIG)
    assert step.write is None
    assert step.settled == steps.Settled("delayed", RequeueAfter(2.0 - elapsed))
    assert steps.landing(step, Keep()) == ("", None)


@pytest.mark.parametrize(
    "objects",
    [(), (active_run("r", "a", phase="Running"),), (decoded_run("r", runtime=""),)],
    ids=["gone", "not pending", "no runtime"],
)
def test_a_run_the_cycle_has_nothing_to_do_for_is_forgotten(objects: tuple[Run, ...]) -> None:
    step = transact(world(decoded_pod("a"), *objects), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert step.write is None and step.settled == steps.Settled("skipped", Forget())


def test_a_run_awaiting_its_binds_observation_is_not_planned_again() -> None:
    state = world(decoded_pod("a"), decoded_run("r"))
    first = bound(state)
    again = transact(state, first.ledger, KEY, NOW, DEFAULT_CONFIG)
    assert again.write is None and again.ledger == first.ledger
    assert again.settled == steps.Settled("skipped", RequeueAfter(AWAIT_BIND_REQUEUE))
    assert steps.landing(again, Keep()) == ("a", None)


def test_a_cycle_error_backs_off_and_decides_nothing() -> None:
    registry = registry_with(FixedScore(101))  # a score plugin answering outside 0..100
    state = world(decoded_pod("a"), decoded_run("r"))
    step = transact(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG, registry)
    assert step.write is None and step.ledger is EMPTY_LEDGER
    assert (step.settled.outcome, step.settled.next, step.settled.sync) == ("cycle_error", BackOff(), "selection_error")
    assert step.settled.why == "ScoreError"


# --- decide: the reserve, against the latest ledger -----------------------------------------------


def test_a_reserve_that_lost_the_pod_to_another_worker_backs_off_and_writes_nothing() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    mine, theirs = decoded_run("r"), decoded_run("other")
    state = world(pod, mine, theirs)
    planned = plan(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert isinstance(planned.planned.unwrap(), Bind)
    # another worker's reservation lands between this plan and its compare-and-swap
    latest = transact(state, EMPTY_LEDGER, RunKey("default", "other"), NOW, DEFAULT_CONFIG).ledger
    step = decide(planned, state, latest)
    assert step.write is None and step.ledger == latest
    assert step.conflict is not None and step.conflict.reason == "NoRoom"
    # never RequeueAfter(0): a key that keeps losing the race backs off (SPEC §3.14)
    assert (step.settled.outcome, step.settled.next, step.settled.conflict) == ("reserve_conflict", BackOff(keep_claim=True), "reserve")
    assert step.settled.why == "NoRoom"


def test_a_required_anti_affinity_is_re_planned_inside_the_reserve() -> None:
    anti = affinity_json(anti_required=[term({"app": "db"})])
    mine = decoded_run("r", labels={"app": "db"}, affinity=anti)
    theirs = decoded_run("other", labels={"app": "db"}, affinity=anti)
    state = world(decoded_pod("a", capacity={"runs": "4"}), mine, theirs)
    planned = plan(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    latest = transact(state, EMPTY_LEDGER, RunKey("default", "other"), NOW, DEFAULT_CONFIG).ledger
    step = decide(planned, state, latest)
    assert isinstance(step.conflict, steps.AffinityChanged) and step.write is None
    assert step.settled.why == "AffinityChanged"


def test_a_stale_assigned_pod_on_a_pending_run_is_bound_like_any_pending_run() -> None:
    """A retry reset can leave ``assignedPod``; the reserve must not refuse it (that spun a worker)."""
    stale = decoded_run("r", phase="Pending", assigned_pod="b", attempt=1)
    step = bound(world(decoded_pod("a"), stale))
    assert step.write is not None and step.write.patch.assigned_pod == "a"


def test_a_pod_replaced_under_the_same_name_takes_new_runs_up_to_its_full_capacity() -> None:
    """Runs bound to the pod the name used to denote (SPEC §1) neither fill it nor repel
    anti-affine Runs from it; a reservation made for that pod holds nothing on it either."""
    replaced = [active_run(f"old{i}", "a", pod_uid="a-1", labels={"zone": "blue"}) for i in (1, 2)]
    reserved = decoded_run("q", labels={"zone": "blue"})
    planned_for_old = reserve(
        EMPTY_LEDGER, world(decoded_pod("a", uid="a-1", capacity={"runs": "3"}), reserved), reserved, "a", "a-1", NOW, DEFAULT_CONFIG
    ).unwrap()
    run = decoded_run("r", requests={"runs": "3"}, affinity=affinity_json(anti_required=[term({"zone": "blue"})]))
    state = world(decoded_pod("a", uid="a-2", capacity={"runs": "3"}), *replaced, reserved, run)
    step = bound(state, planned_for_old)
    assert step.write is not None
    assert (step.write.patch.assigned_pod, step.write.patch.assigned_pod_uid) == ("a", "a-2")
    assert step.ledger.get("default", reserved.uid) is not None, "the old reservation ends with its Run, not here"


def test_decide_on_the_very_values_it_planned_from_reuses_the_synced_ledger() -> None:
    state = world(decoded_pod("a"), decoded_run("r"))
    planned = plan(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert decide(planned, state, EMPTY_LEDGER) == transact(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)


def test_a_reservation_the_state_overtook_after_the_plan_no_longer_counts_at_the_reserve() -> None:
    """Planned while another Run's bind was reserved on the pod; by the compare-and-swap the
    informer shows that bind landed. Its usage counts once, as a Run on the pod, not again
    as a reservation, so the last room on the pod is still granted."""
    state = world(decoded_pod("a", capacity={"runs": "2"}), decoded_run("r"), decoded_run("other"))
    theirs = transact(state, EMPTY_LEDGER, RunKey("default", "other"), NOW, DEFAULT_CONFIG)
    assert theirs.write is not None and theirs.write.purpose == "bind"
    planned = plan(state, theirs.ledger, KEY, NOW, DEFAULT_CONFIG)
    observed = apply(state, Event("MODIFIED", _applied(theirs)))
    step = decide(planned, observed, theirs.ledger)
    assert step.conflict is None and step.write is not None and step.write.patch.assigned_pod == "a"
    assert step.ledger.get("default", theirs.write.run.uid) is None
    assert step.ledger.get("default", step.write.run.uid) is not None


def test_the_reserve_re_plans_with_the_registry_the_cycle_planned_with() -> None:
    """Without the RunAffinity filter a required anti-affinity constrains nothing, in the
    plan and in the reserve's re-plan alike."""
    anti = affinity_json(anti_required=[term({"app": "db"})])
    state = world(
        decoded_pod("a", capacity={"runs": "4"}),
        active_run("x", "a", labels={"app": "db"}),
        decoded_run("r", labels={"app": "db"}, affinity=anti),
    )
    assert isinstance(transact(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG).plan.unwrap(), Wait)
    registry = DEFAULT_REGISTRY.without("RunAffinity").unwrap()
    step = transact(state, EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG, registry)
    assert step.conflict is None and step.write is not None and step.write.patch.assigned_pod == "a"


# --- settle: a write's outcome ------------------------------------------------------------------------


def _applied(step: Step, version: str = "2") -> Run:
    from kruntimes.pure.status import applied

    assert step.write is not None
    return applied(step.write.run, step.write.patch, version)


def test_a_bind_that_landed_keeps_its_reservation_and_earns_scheduled() -> None:
    step = bound(world(decoded_pod("a"), decoded_run("r")))
    settled, change = settle(step, Written("2"))
    assert change == Keep() and steps.apply(step.ledger, change) == step.ledger
    assert settled == steps.Settled(
        "scheduled", Forget(), EventNote("Normal", "Scheduled", "assigned to runtime pod a"), sync="scheduled"
    )


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (Conflict(), steps.Settled("bind_conflict", BackOff(), conflict="bind", why="conflict")),
        (Refused(2.5), steps.Settled("write_failed", BackOff(2.5), why="failed")),
        (Refused(permanent=True), steps.Settled("write_failed", BackOff(), why="refused")),
        (Gone(), steps.Settled("gone", Forget(), why="run gone")),
    ],
    ids=["409", "429 with Retry-After", "403", "404"],
)
def test_a_bind_that_definitely_did_not_land_releases_its_reservation_at_once(
    outcome: steps.WriteOutcome, expected: steps.Settled
) -> None:
    step = bound(world(decoded_pod("a"), decoded_run("r")))
    settled, change = settle(step, outcome)
    assert settled == expected
    assert change == Release("default", step.snapshot.run.uid if step.snapshot.run else "")
    assert steps.apply(step.ledger, change) == EMPTY_LEDGER


def test_an_ambiguous_bind_past_its_deadline_is_looked_at_again_at_once() -> None:
    """The write can no longer land: the next cycle reads the Run without waiting."""
    step = bound(world(decoded_pod("a"), decoded_run("r")))
    settled, change = settle(step, Ambiguous(NOW - timedelta(seconds=5)))
    assert settled == steps.Settled("bind_uncertain", RequeueAfter(0.0), why="ambiguous")
    assert isinstance(change, Hold)
    settled, _ = settle(step, Ambiguous(NOW + timedelta(seconds=0.5), retry_after=2.0))
    assert settled.next == RequeueAfter(2.0)  # the server asked for longer than the deadline is away


def test_an_ambiguous_bind_holds_its_reservation_until_the_deadline() -> None:
    step = bound(world(decoded_pod("a"), decoded_run("r")))
    deadline = NOW + timedelta(seconds=60)
    settled, change = settle(step, Ambiguous(deadline))
    assert settled == steps.Settled("bind_uncertain", RequeueAfter(60.0), why="ambiguous")
    run = step.snapshot.run
    assert run is not None and change == Hold("default", run.uid, deadline)
    held = steps.apply(step.ledger, change)
    assert held.get("default", run.uid) == step.ledger.get("default", run.uid)
    assert held.held_until("default", run.uid) == deadline


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (Conflict(), steps.Settled("write_failed", BackOff(), why="conflict")),
        (Refused(1.5), steps.Settled("write_failed", BackOff(1.5), why="failed")),
        (Ambiguous(NOW), steps.Settled("write_failed", BackOff(), why="ambiguous")),
        (Gone(), steps.Settled("gone", Forget(), why="run gone")),
    ],
    ids=["409", "429", "5xx", "404"],
)
@pytest.mark.parametrize("purpose", ["wait", "terminal"])
def test_a_failed_wait_or_terminal_write_only_decides_the_requeue(
    outcome: steps.WriteOutcome, expected: steps.Settled, purpose: str
) -> None:
    run = decoded_run("r", cancel=True) if purpose == "terminal" else decoded_run("r")
    step = transact(world(run), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert step.write is not None and step.write.purpose == purpose
    settled, change = settle(step, outcome)
    assert change == Keep() and settled == expected


def test_a_wait_or_terminal_write_that_landed_earns_its_event() -> None:
    for run, reason in ((decoded_run("r"), "FailedScheduling"), (decoded_run("r", cancel=True), "Cancelled")):
        step = transact(world(run), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
        settled, change = settle(step, Written("2"))
        assert change == Keep() and settled.event is not None and settled.event.reason == reason


# --- after an ambiguous bind: the hold, the read, the informer ---------------------------------------


def _held(deadline_in: float) -> tuple[ClusterState, Ledger, Step]:
    state = world(decoded_pod("a", capacity={"runs": "1"}), decoded_run("r"), decoded_run("next"))
    step = bound(state)
    _, change = settle(step, Ambiguous(NOW + timedelta(seconds=deadline_in)))
    return state, steps.apply(step.ledger, change), step


def test_a_held_reservation_keeps_its_capacity_from_other_runs() -> None:
    state, ledger, _ = _held(30)
    other = transact(state, ledger, RunKey("default", "next"), NOW, DEFAULT_CONFIG)
    assert other.write is not None and isinstance(other.plan.unwrap(), Wait)


def test_before_the_deadline_the_key_waits_for_it_without_a_read() -> None:
    state, ledger, _ = _held(30)
    again = transact(state, ledger, KEY, NOW, DEFAULT_CONFIG)
    assert again.verify is None and again.settled.next == RequeueAfter(30.0)
    assert steps.landing(again, Keep()) == ("a", None)  # its room stays held on the pod


def test_after_the_deadline_the_step_asks_for_a_read_and_an_unchanged_run_is_released() -> None:
    state, ledger, first = _held(0)
    again = transact(state, ledger, KEY, NOW, DEFAULT_CONFIG)
    check = again.verify
    assert check is not None and check.resource_version == "1"
    # until the read is done the key comes back as a Run awaiting its bind would
    assert again.write is None and again.settled == steps.Settled("skipped", RequeueAfter(AWAIT_BIND_REQUEUE))
    run = first.snapshot.run
    assert run is not None
    settled, change = confirm(check, run)  # the read shows the Run still at the planned-from version
    assert settled == steps.Settled("released", RequeueAfter(0.0), why="not landed")
    assert steps.apply(again.ledger, change) == EMPTY_LEDGER


def test_a_read_showing_a_newer_version_keeps_the_hold_for_the_informer_to_settle() -> None:
    state, ledger, first = _held(0)
    check = transact(state, ledger, KEY, NOW, DEFAULT_CONFIG).verify
    assert check is not None
    landed = _applied(first, "7")
    settled, change = confirm(check, landed)
    assert change == Keep() and settled == steps.Settled("skipped", RequeueAfter(AWAIT_BIND_REQUEUE), why="landed")
    # written again and still Pending (a reset for retry) is a newer version all the same
    reset = decoded_run("r", resource_version="8", attempt=1)
    assert confirm(check, reset) == (settled, Keep())
    # the informer's event for that version hands the reservation off to actual usage
    observed = apply(state, Event("MODIFIED", landed))
    after = transact(observed, ledger, RunKey("default", "next"), NOW, DEFAULT_CONFIG)
    assert after.ledger == EMPTY_LEDGER and isinstance(after.plan.unwrap(), Wait)  # the pod is really full


@pytest.mark.parametrize(
    ("read", "expected", "released"),
    [
        (Gone(), steps.Settled("gone", Forget(), why="run gone"), True),
        (Refused(3.0), steps.Settled("skipped", BackOff(3.0), why="read failed"), False),
        (Ambiguous(NOW), steps.Settled("skipped", BackOff(), why="read failed"), False),
    ],
    ids=["gone", "read refused", "read failed"],
)
def test_a_read_that_proves_nothing_keeps_the_hold(read: steps.ReadOutcome, expected: steps.Settled, released: bool) -> None:
    state, ledger, _ = _held(0)
    check = transact(state, ledger, KEY, NOW, DEFAULT_CONFIG).verify
    assert check is not None
    settled, change = confirm(check, read)
    assert settled == expected and isinstance(change, Release) == released


def test_a_held_reservation_goes_when_the_run_is_seen_at_a_newer_version() -> None:
    """Someone wrote the Run after our bind was sent (a reset for retry): the bind can no longer
    land (its resourceVersion precondition fails), so the hold ends and the Run is planned anew."""
    state, ledger, first = _held(30)
    run = first.snapshot.run
    assert run is not None
    reset = decoded_run("r", resource_version="9", attempt=1)
    step = transact(apply(state, Event("MODIFIED", reset)), ledger, KEY, NOW, DEFAULT_CONFIG)
    assert step.write is not None and step.write.purpose == "bind"
    reservation = step.ledger.get("default", run.uid)
    assert reservation is not None and reservation.resource_version == "9"
    assert step.ledger.held_until("default", run.uid) is None


def test_a_read_showing_another_run_under_the_name_releases_the_hold() -> None:
    """The Run was deleted and created again: the bind was for the old one, whatever the new
    one's version, so the reservation goes and the new Run is planned afresh."""
    state, ledger, _ = _held(0)
    check = transact(state, ledger, KEY, NOW, DEFAULT_CONFIG).verify
    assert check is not None
    recreated = decoded_run("r", uid="another-r", resource_version="8")
    settled, change = confirm(check, recreated)
    assert (settled, change) == (steps.Settled("released", RequeueAfter(0.0), why="replaced"), Release("default", check.uid))


def test_a_namespace_given_up_takes_its_holds_with_it() -> None:
    """Taken over again later, the same Run is bound anew: that bind waits for the informer,
    not for a read on the deadline of the bind before."""
    state, ledger, first = _held(0)
    run = first.snapshot.run
    assert run is not None
    dropped = without_namespace(ledger, "default")
    assert dropped == EMPTY_LEDGER and dropped.held_until("default", run.uid) is None
    again = bound(state, dropped)  # its write lands (the ledger keeps the reservation as is)
    awaiting = transact(state, again.ledger, KEY, NOW, DEFAULT_CONFIG)
    assert awaiting.verify is None and awaiting.settled.next == RequeueAfter(AWAIT_BIND_REQUEUE)


def test_hold_without_a_reservation_changes_nothing() -> None:
    assert hold(EMPTY_LEDGER, "default", "nobody", NOW) is EMPTY_LEDGER


def test_the_failed_scheduling_event_says_why_each_group_of_pods_was_refused_with_counts_only() -> None:
    names = ("secret-a", "secret-b", "secret-c", "secret-d", "secret-e")
    busy = [active_run(f"busy-{p}", p) for p in names[:2]]
    pods = [decoded_pod(names[0], capacity={"runs": "1"}), decoded_pod(names[1], capacity={"runs": "1"}),
            decoded_pod(names[2], ready=False), decoded_pod(names[3], heartbeat_at=at(-600)),
            decoded_pod(names[4], capacity={"runs": "3"})]
    busy.append(active_run("busy-e", names[4], requests={"runs": "2"}))
    big = decoded_run("r", requests={"runs": "2"})
    step = transact(world(*pods, *busy, big), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    event = step.settled.event
    assert event is not None and event.reason == "FailedScheduling"
    assert event.message == "0/5 Runtime Pods available: 2 too small (runs), 1 full (runs), 1 not ready, 1 stale heartbeat"
    assert "secret" not in event.message
    # the status keeps upstream's text; the breakdown is the Event's
    assert step.write is not None and step.write.patch.message == 'waiting for available runtime pods for runtime "python"'


# --- where a Wait parks the Run, and where a cycle leaves its room -----------------------------------

_NEEDS_DB = affinity_json(required=[term({"app": "db"})])
# the world (besides Run r), Run r's spec -> the Park its Wait decides
PARKS: list[tuple[str, tuple[Object, ...], dict[str, object], Park]] = [
    ("no pod of its runtime", (), {}, Park("unfit")),
    ("a pod too small ever to hold it", (decoded_pod("a", capacity={"cpu": "1"}),), {"requests": {"cpu": "2"}}, Park("unfit")),
    (
        "a pod that could hold it, full",
        (decoded_pod("a", capacity={"cpu": "2"}), active_run("x", "a", requests={"cpu": "2"})),
        {"requests": {"cpu": "2"}},
        Park("capacity"),
    ),
    ("an available pod its required affinity refuses", (decoded_pod("a"),), {"affinity": _NEEDS_DB}, Park("constraints")),
    ("a required affinity, no pod available", (decoded_pod("a", ready=False),), {"affinity": _NEEDS_DB}, Park("unfit", blind=True)),
    ("a workspace, no pod available", (decoded_pod("a", ready=False),), {"workspace": "ws"}, Park("unfit", blind=True)),
    ("no constraint, no pod available", (decoded_pod("a", ready=False),), {}, Park("unfit")),
    ("a required affinity, the only pod's heartbeat stale", (decoded_pod("a", heartbeat_at=at(-3600)),), {"affinity": _NEEDS_DB}, Park("capacity", blind=True)),
]


@pytest.mark.parametrize(("case", "objects", "spec", "expected"), PARKS, ids=[row[0] for row in PARKS])
def test_a_wait_parks_the_run_in_the_group_of_the_change_that_could_place_it(
    case: str, objects: tuple[Object, ...], spec: dict[str, object], expected: Park
) -> None:
    step = transact(world(*objects, decoded_run("r", **spec)), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)  # type: ignore[arg-type]  # the builder's keywords
    assert isinstance(step.plan.unwrap(), Wait), case
    assert step.settled.next == expected, case


@final
@dataclass(frozen=True, slots=True)
class Fence:
    """Refuses the pods whose name starts with ``prefix`` (reason ``Fenced``), a refusal only a
    change of the Run's constraints can lift."""

    name: str
    prefix: str

    reasons: ClassVar[frozenset[str]] = frozenset({"Fenced"})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {"Fenced": "constraints"}
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        def pod_filter(slot: PodSlot) -> str | None:
            return "Fenced" if slot.pod.name.startswith(self.prefix) else None

        return Success(pod_filter)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return "the pod is fenced"


def _fence(fence: Fence) -> Callable[[], FilterPlugin]:
    return lambda: fence


def test_a_wait_on_custom_filters_parks_as_they_declare_and_counts_their_reason_in_the_event() -> None:
    registry: Registry = DEFAULT_REGISTRY
    for fence in (Fence("FenceA", "a-"), Fence("FenceB", "b-")):
        registry = registry.register_filter(fence.name, _fence(fence)).unwrap()
    pods = (decoded_pod("a-1"), decoded_pod("a-2"), decoded_pod("b-1"), decoded_pod("c-1", ready=False))
    step = transact(world(*pods, decoded_run("r")), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG, registry)
    assert isinstance(step.plan.unwrap(), Wait)
    # the two filters' refusals for one reason are counted together
    why = "0/4 Runtime Pods available: 3 Fenced, 1 not ready"
    expected = steps.Settled("waiting", Park("constraints"), EventNote("Warning", "FailedScheduling", why), sync="no_pods")
    assert step.settled == expected


@pytest.mark.parametrize(
    ("outcome", "landed", "freed"),
    [(Written("2"), "a", False), (Conflict(), "", True), (Gone(), "", True), (Ambiguous(NOW + timedelta(seconds=60)), "a", False)],
    ids=["landed", "409", "404", "uncertain"],
)
def test_a_bind_leaves_its_room_on_its_pod_unless_it_definitely_did_not_land(
    outcome: steps.WriteOutcome, landed: str, freed: bool
) -> None:
    step = bound(world(decoded_pod("a"), decoded_run("r")))
    _, change = settle(step, outcome)
    where, given_back = steps.landing(step, change)
    assert where == landed
    assert given_back == (step.ledger.get("default", step.write.run.uid) if freed and step.write else None)


def test_a_cycle_that_reserved_nothing_lands_nowhere_and_gives_nothing_back() -> None:
    step = transact(world(decoded_run("r")), EMPTY_LEDGER, KEY, NOW, DEFAULT_CONFIG)
    assert steps.landing(step, Keep()) == ("", None)
