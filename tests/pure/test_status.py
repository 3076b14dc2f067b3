"""The status documents: bind, wait, terminal, the merge patch, and the Run as observed after it (SPEC §6, §7)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.model.objects import Condition, Run
from kruntimes.pure.model.plan import Bind, Cancel, Delay, Fail, Plan, Skip, Wait
from kruntimes.pure.status import (
    StatusPatch,
    applied,
    bind_status,
    patch_body,
    status_for,
    terminal_status,
    wait_status,
)
from tests.builders import NOW, NOW_TEXT, at, decoded_run, run_json

LATER = NOW + timedelta(seconds=90)
WAITING = 'waiting for available runtime pods for runtime "python"'


def conditions_of(run: Run) -> dict[str, Condition]:
    return {c.type: c for c in run.status.conditions}


# --- bind ---------------------------------------------------------------------------------------


def test_bind_schedules_assigns_clears_the_message_and_sets_scheduled_true() -> None:
    run = decoded_run("r", message=WAITING, conditions=[{"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": WAITING, "lastTransitionTime": at(-60)}])
    patch = bind_status(run, "p1", "uid-p1", NOW)
    assert patch == StatusPatch(
        phase="Scheduled",
        assigned_pod="p1",
        assigned_pod_uid="uid-p1",
        message="",
        conditions=(Condition("Scheduled", "True", "Assigned", "assigned to runtime pod p1", NOW),),
        completion_time=None,
    )


def test_bind_keeps_the_transition_time_when_scheduled_was_already_true() -> None:
    run = decoded_run("r", conditions=[{"type": "Scheduled", "status": "True", "reason": "Assigned", "message": "assigned to runtime pod old", "lastTransitionTime": at(-60)}])
    (condition,) = bind_status(run, "p1", "uid-p1", NOW).conditions
    assert condition.last_transition_time == NOW - timedelta(seconds=60)
    assert condition.message == "assigned to runtime pod p1"


def test_bind_carries_other_conditions_in_place() -> None:
    run = decoded_run(
        "r",
        conditions=[
            {"type": "Running", "status": "False", "reason": "Retry", "message": "m", "lastTransitionTime": at(-5)},
            {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": WAITING, "lastTransitionTime": at(-60)},
            {"type": "Custom", "status": "True", "reason": "X", "message": "y"},
        ],
    )
    types = [c.type for c in bind_status(run, "p1", "u", NOW).conditions]
    assert types == ["Running", "Scheduled", "Custom"]
    assert bind_status(run, "p1", "u", NOW).conditions[0] == run.status.conditions[0]


# --- wait ---------------------------------------------------------------------------------------


def test_wait_writes_pending_the_message_and_scheduled_false() -> None:
    patch = wait_status(decoded_run("r"), WAITING, NOW)
    assert patch == StatusPatch(
        phase="Pending",
        assigned_pod="",
        assigned_pod_uid="",
        message=WAITING,
        conditions=(Condition("Scheduled", "False", "Unschedulable", WAITING, NOW),),
        completion_time=None,
    )


def test_wait_writes_nothing_when_nothing_changes() -> None:
    run = applied(decoded_run("r"), wait_status(decoded_run("r"), WAITING, NOW) or pytest.fail(), "2")
    assert wait_status(run, WAITING, LATER) is None


def test_wait_writes_an_empty_phase_out_as_pending() -> None:
    run = decoded_run("r", message=WAITING, conditions=[{"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": WAITING, "lastTransitionTime": NOW_TEXT}])
    patch = wait_status(run, WAITING, LATER)
    assert patch is not None and patch.phase == "Pending"
    assert patch.conditions[0].last_transition_time == NOW


def test_wait_with_a_new_message_keeps_the_transition_time_of_a_false_condition() -> None:
    first = applied(decoded_run("r"), wait_status(decoded_run("r"), WAITING, NOW) or pytest.fail(), "2")
    other = 'waiting for workspace "ws" placement for runtime "python"'
    patch = wait_status(first, other, LATER)
    assert patch is not None
    assert patch.message == other
    assert patch.conditions == (Condition("Scheduled", "False", "Unschedulable", other, NOW),)


def test_wait_after_a_true_condition_moves_the_transition_time() -> None:
    run = decoded_run("r", phase="Pending", message=WAITING, conditions=[{"type": "Scheduled", "status": "True", "reason": "Assigned", "message": "assigned to runtime pod p1", "lastTransitionTime": at(-60)}])
    patch = wait_status(run, WAITING, NOW)
    assert patch is not None and patch.conditions[0].last_transition_time == NOW


@pytest.mark.parametrize("field", ["reason", "message", "status"])
def test_wait_rewrites_a_condition_that_differs_in_any_field(field: str) -> None:
    condition: dict[str, object] = {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": WAITING, "lastTransitionTime": NOW_TEXT}
    condition[field] = "other"
    run = decoded_run("r", phase="Pending", message=WAITING, conditions=[condition])
    assert wait_status(run, WAITING, LATER) is not None


# --- terminal --------------------------------------------------------------------------------------


def test_terminal_sets_phase_message_completion_time_and_two_false_conditions() -> None:
    run = decoded_run(
        "r",
        conditions=[
            {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": WAITING, "lastTransitionTime": at(-60)},
            {"type": "Running", "status": "True", "reason": "Started", "message": "", "lastTransitionTime": at(-30)},
        ],
    )
    patch = terminal_status(run, "Failed", "InvalidResources", 'resource request "cpu" must be a non-negative integer', NOW)
    message = 'resource request "cpu" must be a non-negative integer'
    assert patch == StatusPatch(
        phase="Failed",
        assigned_pod="",
        assigned_pod_uid="",
        message=message,
        conditions=(
            run.status.conditions[0],
            Condition("Running", "False", "InvalidResources", message, NOW),
            Condition("Completed", "False", "InvalidResources", message, NOW),
        ),
        completion_time=NOW,
    )


def test_terminal_keeps_the_transition_time_of_a_condition_already_false() -> None:
    run = decoded_run("r", conditions=[{"type": "Running", "status": "False", "reason": "Retry", "message": "m", "lastTransitionTime": at(-30)}])
    patch = terminal_status(run, "Cancelled", "Cancelled", "cancelled by user", NOW)
    running, completed = patch.conditions
    assert running == Condition("Running", "False", "Cancelled", "cancelled by user", NOW - timedelta(seconds=30))
    assert completed == Condition("Completed", "False", "Cancelled", "cancelled by user", NOW)


# --- status_for -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "phase"),
    [
        (Bind("p1", "uid-p1", ("p1",), (), ()), "Scheduled"),
        (Wait(WAITING, ()), "Pending"),
        (Fail("InvalidAffinity", "invalid run affinity: x"), "Failed"),
        (Cancel(), "Cancelled"),
        (Delay(3.0), None),
        (Skip("not pending"), None),
    ],
)
def test_status_for_each_plan(plan: Plan, phase: str | None) -> None:
    patch = status_for(plan, decoded_run("r"), NOW)
    assert (patch.phase if patch is not None else None) == phase


def test_status_for_a_cancel_uses_the_terminal_helper() -> None:
    run = decoded_run("r")
    assert status_for(Cancel(), run, NOW) == terminal_status(run, "Cancelled", "Cancelled", "cancelled by user", NOW)


# --- the wire ---------------------------------------------------------------------------------------------


def test_patch_body_is_a_merge_patch_with_the_resource_version_and_full_conditions() -> None:
    patch = bind_status(decoded_run("r", message=WAITING), "p1", "uid-p1", NOW.replace(microsecond=250))
    assert json.loads(patch_body(patch, "41")) == {
        "metadata": {"resourceVersion": "41"},
        "status": {
            "phase": "Scheduled",
            "assignedPod": "p1",
            "assignedPodUID": "uid-p1",
            "message": None,
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "Assigned",
                    "message": "assigned to runtime pod p1",
                    "lastTransitionTime": "2024-05-01T12:00:00.000250Z",
                }
            ],
            "completionTime": None,
        },
    }


def merge(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


@pytest.mark.parametrize(
    "make",
    [
        lambda run: bind_status(run, "p1", "uid-p1", NOW),
        lambda run: wait_status(run, WAITING, NOW),
        lambda run: terminal_status(run, "Failed", "InvalidSpec", "spec must be an object", NOW.replace(microsecond=7)),
    ],
    ids=["bind", "wait", "terminal"],
)
def test_applied_is_what_the_informer_decodes_after_the_patch(make: Callable[[Run], StatusPatch | None]) -> None:
    body = run_json(
        "r",
        attempt=3,
        message="old",
        conditions=[{"type": "Running", "status": "False", "reason": "Retry", "message": "m", "lastTransitionTime": at(-5)}],
    )
    run = decode_run(body).unwrap()
    patch = make(run)
    assert patch is not None
    written = merge(body, json.loads(patch_body(patch, "99")))
    assert applied(run, patch, "99") == decode_run(written).unwrap()
    assert applied(run, patch, "99").status.attempt == 3


# --- what each write carries ------------------------------------------------------------------------


def test_a_duplicate_condition_of_the_written_type_is_dropped() -> None:
    duplicate: dict[str, object] = {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": "m", "lastTransitionTime": at(-5)}
    run = decoded_run("r", conditions=[duplicate, {**duplicate, "message": "older"}])
    patch = bind_status(run, "p1", "uid-p1", NOW)
    assert [(c.type, c.status) for c in patch.conditions] == [("Scheduled", "True")]


@pytest.mark.parametrize(
    "make",
    [lambda run: bind_status(run, "p1", "uid-p1", NOW), lambda run: wait_status(run, WAITING, NOW)],
    ids=["bind", "wait"],
)
def test_a_bind_or_wait_keeps_the_completion_time_it_found(make: Callable[[Run], StatusPatch | None]) -> None:
    run = decoded_run("r", phase="Failed")
    run = dataclasses.replace(run, status=dataclasses.replace(run.status, completion_time=LATER))
    patch = make(run)
    assert patch is not None and patch.completion_time == LATER


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (Bind("p1", "uid-p1", ("p1",), (), ()), lambda run: bind_status(run, "p1", "uid-p1", LATER)),
        (Wait(WAITING, ()), lambda run: wait_status(run, WAITING, LATER)),
        (
            Fail("InvalidAffinity", "invalid run affinity: x"),
            lambda run: terminal_status(run, "Failed", "InvalidAffinity", "invalid run affinity: x", LATER),
        ),
    ],
    ids=["bind", "wait", "fail"],
)
def test_status_for_writes_the_plans_reason_at_the_given_time(
    plan: Plan, expected: Callable[[Run], StatusPatch | None]
) -> None:
    run = decoded_run("r")
    assert status_for(plan, run, LATER) == expected(run)


def test_patch_body_keeps_a_conditions_last_probe_time() -> None:
    probed: dict[str, object] = {
        "type": "Running",
        "status": "True",
        "reason": "Started",
        "message": "m",
        "lastTransitionTime": at(-5),
        "lastProbeTime": at(-1),
    }
    run = decoded_run("r", conditions=[probed])
    written = json.loads(patch_body(bind_status(run, "p1", "uid-p1", NOW), "41"))
    assert written["status"]["conditions"][0] == probed
