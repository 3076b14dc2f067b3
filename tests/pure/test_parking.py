"""The parking lot's decisions, one table row a case: what the lot holds, what happened, what
it decides (``pure.parking``; the lot that keeps them is tested in tests/effects)."""

from __future__ import annotations

import pytest

from kruntimes.pure.model.objects import EMPTY_RESOURCES, Resources, frozen_resources
from kruntimes.pure.model.quantity import parse_quantity
from kruntimes.pure.parking import RECHECK_SECONDS, Slot, admission_groups, displaced, keeps_claim, now_fits, overdue, refused, served
from kruntimes.pure.queueing import ParkReason
from kruntimes.pure.step import BackOff, Forget, Next, Park, RequeueAfter


def _resources(**amounts: str) -> Resources:
    parsed = {name: parse_quantity(amount) for name, amount in sorted(amounts.items())}
    return frozen_resources({name: amount for name, amount in parsed.items() if amount is not None})


# started, last event for its runtime, last label change in its namespace, group -> queued again at once
IN_FLIGHT: list[tuple[str, int, int, int, ParkReason, bool]] = [
    ("no event since the cycle started", 5, 3, 4, "capacity", False),
    ("an event for its runtime during the cycle", 5, 6, -1, "capacity", True),
    ("an event for its runtime before the cycle", 5, 5, -1, "unfit", False),
    ("a label change in its namespace, waiting on constraints", 5, -1, 6, "constraints", True),
    ("a label change in its namespace, waiting for room", 5, -1, 6, "capacity", False),
    ("a label change in its namespace, waiting for a pod that fits", 5, -1, 6, "unfit", False),
    ("no counter taken (a cycle the lot did not see start), any event", -1, 0, -1, "capacity", True),
    ("no counter taken and no event ever", -1, -1, -1, "constraints", False),
]


@pytest.mark.parametrize(("case", "started", "runtime_event", "namespace_event", "reason", "expected"), IN_FLIGHT)
def test_a_run_is_queued_again_instead_of_parked_when_an_event_it_reads_came_during_its_cycle(
    case: str, started: int, runtime_event: int, namespace_event: int, reason: ParkReason, expected: bool
) -> None:
    assert refused(started, runtime_event, namespace_event, reason) is expected, case


def test_a_pod_that_appeared_or_grew_offers_its_room_to_the_runs_no_pod_could_hold_and_freed_room_does_not() -> None:
    assert admission_groups(grown=True) == ("capacity", "constraints", "unfit")
    assert admission_groups(grown=False) == ("capacity", "constraints")


# pod capacity, the request parked unfit -> it waits for room from now on
FIT: list[tuple[str, Resources, Resources, bool]] = [
    ("the pod holds it empty", _resources(cpu="4", memory="8Gi"), _resources(cpu="2", memory="8Gi"), True),
    ("one resource too small", _resources(cpu="4", memory="4Gi"), _resources(cpu="2", memory="8Gi"), False),
    ("a resource the pod does not have", _resources(cpu="4"), _resources(cpu="1", gpu="1"), False),
    ("an empty request", _resources(cpu="1"), EMPTY_RESOURCES, True),
]


@pytest.mark.parametrize(("case", "capacity", "requests", "expected"), FIT)
def test_a_run_parked_unfit_waits_for_room_once_a_pod_of_its_runtime_could_hold_it_empty(
    case: str, capacity: Resources, requests: Resources, expected: bool
) -> None:
    assert now_fits(capacity, requests) is expected, case


# last admission of its group (None: never), parked since, now -> planned again by the safety net
NET = RECHECK_SECONDS
SAFETY_NET: list[tuple[str, float | None, float, float, bool]] = [
    ("never admitted, parked for the whole interval", None, 100.0, 100.0 + NET, True),
    ("never admitted, parked for less", None, 100.0, 100.0 + NET - 0.5, False),
    ("admitted long ago, parked for the whole interval", 10.0, 100.0, 100.0 + NET, True),
    ("admitted within the interval: its turn comes in order", 100.0 + NET - 1, 100.0, 100.0 + NET, False),
    ("admitted exactly one interval ago", 100.0, 100.0, 100.0 + NET, True),
]


@pytest.mark.parametrize(("case", "admitted_at", "since", "now", "expected"), SAFETY_NET)
def test_the_safety_net_re_plans_a_run_parked_a_whole_interval_in_a_group_that_admitted_nobody_as_long(
    case: str, admitted_at: float | None, since: float, now: float, expected: bool
) -> None:
    assert (not served(admitted_at, now, NET) and overdue(since, now, NET)) is expected, case


A, B, C = "a", "b", "c"
POD_1: Slot = ("ns", "pod-1")
POD_2: Slot = ("ns", "pod-2")
# the Run, the room it was admitted for, the room it landed on, who claimed that room -> whose claim moves
CLAIMS: list[tuple[str, Slot | None, Slot, tuple[str, ...], str | None]] = [
    ("landed where admitted", POD_1, POD_1, (A, B), None),
    ("not admitted (planned on its own event)", None, POD_1, (B,), None),
    ("landed on a room another admitted Run counted on", POD_2, POD_1, (B, C), B),
    ("landed on a room only it had claimed", POD_2, POD_1, (A,), None),
    ("landed on a room nobody claimed", POD_2, POD_1, (), None),
    ("the first other claimant moves, in claim order", POD_2, POD_1, (A, C, B), C),
]


@pytest.mark.parametrize(("case", "admitted_for", "landed_on", "claimants", "expected"), CLAIMS)
def test_a_run_that_took_room_another_admitted_run_counted_on_hands_that_run_the_room_it_was_admitted_for(
    case: str, admitted_for: Slot | None, landed_on: Slot, claimants: tuple[str, ...], expected: str | None
) -> None:
    assert displaced(A, admitted_for, landed_on, claimants) == expected, case


NEXTS: list[tuple[Next, bool]] = [
    (BackOff(keep_claim=True), True),
    (BackOff(at_least=1.0, keep_claim=True), True),
    (BackOff(), False),
    (Forget(), False),
    (RequeueAfter(0.0), False),
    (Park("capacity"), False),
]


@pytest.mark.parametrize(("next_", "expected"), NEXTS)
def test_only_a_back_off_for_the_room_it_lost_keeps_the_run_s_claim_past_its_cycle(next_: Next, expected: bool) -> None:
    assert keeps_claim(next_) is expected
