"""The status documents the scheduler writes for a plan (SPEC §6, §7).

Every write is the full set of status fields the scheduler owns (``StatusPatch``),
sent as a JSON merge patch on the ``runs/status`` subresource carrying the
observed ``resourceVersion``, so a concurrent writer yields 409, never a lost
update. Conditions follow ``meta.SetStatusCondition``: one condition per type,
``lastTransitionTime`` moves only when the status flips. Messages come from
:mod:`kruntimes.pure.model.messages` and never carry pod names (except the bind
condition's own pod), Run names or selector text.

This is a purely computational module with no side effects; ``effects.binder``
performs the writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, assert_never, final

from kruntimes.jsontext import dumps
from kruntimes.pure.model import messages
from kruntimes.pure.model.objects import CANCELLED, FAILED, PENDING, SCHEDULED, Condition, Run, RunStatus, first_condition
from kruntimes.pure.model.plan import Bind, Cancel, Delay, Fail, Plan, Skip, Wait
from kruntimes.pure.model.times import format_time

TRUE: Final = "True"
FALSE: Final = "False"


@final
@dataclass(frozen=True, slots=True)
class StatusPatch:
    """The full set of status fields the scheduler owns for one write.

    ``attempt`` is not among them: runtimed owns it, and a merge patch leaves it alone.
    """

    phase: str
    assigned_pod: str
    assigned_pod_uid: str
    message: str
    conditions: tuple[Condition, ...]
    completion_time: datetime | None


def set_condition(
    conditions: tuple[Condition, ...], type_: str, status: str, reason: str, message: str, now: datetime
) -> tuple[Condition, ...]:
    """``meta.SetStatusCondition``: the condition of ``type_`` set in place (or appended).

    ``lastTransitionTime`` is ``now`` unless the previous condition of that type
    had the same status and a time, which is then kept. Later duplicates of the
    type are dropped; every other condition is carried through untouched.
    """
    previous = first_condition(conditions, type_)
    since = now
    if previous is not None and previous.status == status and previous.last_transition_time is not None:
        since = previous.last_transition_time
    updated = Condition(type=type_, status=status, reason=reason, message=message, last_transition_time=since)
    if previous is None:
        return conditions + (updated,)
    result: list[Condition] = []
    placed = False
    for condition in conditions:
        if condition.type != type_:
            result.append(condition)
        elif not placed:
            result.append(updated)
            placed = True
    return tuple(result)


def bind_status(run: Run, pod: str, pod_uid: str, now: datetime) -> StatusPatch:
    """Scheduled on ``pod``: stale waiting message cleared, ``Scheduled``=True/``Assigned`` (SPEC §6)."""
    status = run.status
    return StatusPatch(
        phase=SCHEDULED,
        assigned_pod=pod,
        assigned_pod_uid=pod_uid,
        message="",
        conditions=set_condition(
            status.conditions,
            messages.CONDITION_SCHEDULED,
            TRUE,
            messages.REASON_ASSIGNED,
            messages.assigned_message(pod),
            now,
        ),
        completion_time=status.completion_time,
    )


def wait_status(run: Run, message: str, now: datetime) -> StatusPatch | None:
    """Pending with ``message`` and ``Scheduled``=False/``Unschedulable`` (SPEC §7).

    ``None`` when nothing would change: phase already ``Pending`` (an empty phase
    is written out), the same message, and a first ``Scheduled`` condition with
    the same status, reason and message.
    """
    status = run.status
    current = first_condition(status.conditions, messages.CONDITION_SCHEDULED)
    if (
        status.phase == PENDING
        and status.message == message
        and current is not None
        and current.status == FALSE
        and current.reason == messages.REASON_UNSCHEDULABLE
        and current.message == message
    ):
        return None
    return StatusPatch(
        phase=PENDING,
        assigned_pod=status.assigned_pod,
        assigned_pod_uid=status.assigned_pod_uid,
        message=message,
        conditions=set_condition(
            status.conditions, messages.CONDITION_SCHEDULED, FALSE, messages.REASON_UNSCHEDULABLE, message, now
        ),
        completion_time=status.completion_time,
    )


def terminal_status(run: Run, phase: str, reason: str, message: str, now: datetime) -> StatusPatch:
    """The one terminal helper (SPEC §7): phase, message, ``completionTime`` = now,
    ``Running``=False and ``Completed``=False with ``reason`` and ``message``;
    every other condition carried through untouched.
    """
    status = run.status
    conditions = set_condition(status.conditions, messages.CONDITION_RUNNING, FALSE, reason, message, now)
    conditions = set_condition(conditions, messages.CONDITION_COMPLETED, FALSE, reason, message, now)
    return StatusPatch(
        phase=phase,
        assigned_pod=status.assigned_pod,
        assigned_pod_uid=status.assigned_pod_uid,
        message=message,
        conditions=conditions,
        completion_time=now,
    )


def status_for(plan: Plan, run: Run, now: datetime) -> StatusPatch | None:
    """The write a plan asks for; ``None`` for ``Delay``, ``Skip`` and an unchanged ``Wait``."""
    if isinstance(plan, Bind):
        return bind_status(run, plan.pod, plan.pod_uid, now)
    if isinstance(plan, Wait):
        return wait_status(run, plan.message, now)
    if isinstance(plan, Fail):
        return terminal_status(run, FAILED, plan.reason, plan.message, now)
    if isinstance(plan, Cancel):
        return terminal_status(run, CANCELLED, plan.reason, plan.message, now)
    if isinstance(plan, (Delay, Skip)):
        return None
    assert_never(plan)


def _condition_json(condition: Condition) -> dict[str, object]:
    body: dict[str, object] = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
    }
    if condition.last_transition_time is not None:
        body["lastTransitionTime"] = format_time(condition.last_transition_time)
    if condition.last_probe_time is not None:
        body["lastProbeTime"] = format_time(condition.last_probe_time)
    return body


def _or_null(text: str) -> str | None:
    """An empty field is removed (merge-patch ``null``), as Go's ``omitempty`` leaves it absent."""
    return text or None


def patch_body(patch: StatusPatch, resource_version: str) -> str:
    """The JSON merge patch for ``runs/status``: ``{"metadata": {"resourceVersion"}, "status": {...}}``.

    The conditions list is complete (a merge patch replaces lists whole); times
    are RFC 3339 UTC with sub-second precision kept.
    """
    body = {
        "metadata": {"resourceVersion": resource_version},
        "status": {
            "phase": patch.phase,
            "assignedPod": _or_null(patch.assigned_pod),
            "assignedPodUID": _or_null(patch.assigned_pod_uid),
            "message": _or_null(patch.message),
            "conditions": [_condition_json(c) for c in patch.conditions],
            "completionTime": format_time(patch.completion_time) if patch.completion_time is not None else None,
        },
    }
    return dumps(body).decode()


def applied(run: Run, patch: StatusPatch, resource_version: str) -> Run:
    """``run`` as the informer observes it once the write succeeded at ``resource_version``."""
    return replace(
        run,
        resource_version=resource_version,
        status=RunStatus(
            phase=patch.phase,
            assigned_pod=patch.assigned_pod,
            assigned_pod_uid=patch.assigned_pod_uid,
            message=patch.message,
            attempt=run.status.attempt,
            conditions=patch.conditions,
            completion_time=patch.completion_time,
        ),
    )
