"""Planning one snapshot: SPEC §3 steps 2–12, from the rules that end a cycle early to the chosen pod.

``precheck`` applies the rules that decide before any plugin runs (gone, not
Pending, no runtime, cancelled, invalid, retry back-off, awaiting a bind's
observation); ``plan_cycle`` then runs the registry's filters and scores
(``framework.runtime``) and turns their answer into a ``Plan``. Reserving the
chosen pod and writing the status are the step's business
(``kruntimes.pure.step``), not planning's.

This is a purely computational module with no side effects.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from returns.result import Failure, Result, Success

from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.framework.runtime import run_filters, run_scores, wait_message
from kruntimes.pure.model import messages
from kruntimes.pure.model.objects import Run, Snapshot, first_condition
from kruntimes.pure.model.plan import Bind, Cancel, CycleError, Delay, Fail, Plan, Skip, Wait, ranked_views
from kruntimes.pure.placement import fast_plan
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY

__all__ = [
    "DEFAULT_RETRY_BASE",
    "MAX_RETRY_BACKOFF",
    "plan_cycle",
    "precheck",
    "retry_backoff",
    "retry_due",
]

DEFAULT_RETRY_BASE: Final = timedelta(seconds=1)
MAX_RETRY_BACKOFF: Final = timedelta(seconds=60)
_MAX_SHIFT: Final = 40
"""2**40 µs is far beyond the 60 s cap, so larger exponents need no arithmetic."""
_MAX_RETRY_MICROS: Final = MAX_RETRY_BACKOFF // timedelta(microseconds=1)


def retry_backoff(run: Run) -> timedelta:
    """base × 2^max(attempt − 2, 0), capped at 60 s; base = ``retryPolicy.backoff`` or 1 s (SPEC §3.6)."""
    base = run.retry_backoff
    if base is None or base <= timedelta(0):
        base = DEFAULT_RETRY_BASE
    shift = min(max(run.status.attempt - 2, 0), _MAX_SHIFT)
    # Capped in integer microseconds: a long base shifted left overflows timedelta.
    return timedelta(microseconds=min((base // timedelta(microseconds=1)) << shift, _MAX_RETRY_MICROS))


def retry_due(run: Run) -> datetime | None:
    """When a retried Run may be scheduled again, or ``None`` when no delay applies.

    Applies to a Pending Run (empty phase counts) with ``attempt > 1`` whose first
    ``Running`` condition is ``False``; without a ``lastTransitionTime`` there is
    nothing to wait from (upstream reads a zero time), so no delay.
    """
    if not run.status.pending or run.status.attempt <= 1:
        return None
    running = first_condition(run.status.conditions, messages.CONDITION_RUNNING)
    if running is None or running.status != "False" or running.last_transition_time is None:
        return None
    return running.last_transition_time + retry_backoff(run)


def precheck(snapshot: Snapshot) -> Plan | None:
    """SPEC §3 steps 2–7, in order; ``None`` when the Run goes on to filtering.

    Placement of ``spec_error`` (a malformed spec field other than requests and
    affinity, reason ``InvalidSpec``): right after ``cancelRequested``. An empty
    runtime ends the cycle (``Skip("no runtime")``, SPEC order: before cancel)
    *only when the spec is well formed*: a runtime that is empty because the spec
    or the field is malformed is a symptom of that ``spec_error``, so such a Run
    still reaches cancel and then ``Fail("InvalidSpec")``.
    """
    run = snapshot.run
    if run is None:
        return Skip("not found")
    if not run.status.pending:
        return Skip("not pending")
    if run.runtime == "" and run.spec_error is None:
        return Skip("no runtime")
    if run.cancel_requested:
        return Cancel()
    if run.spec_error is not None:
        return Fail(messages.REASON_INVALID_SPEC, run.spec_error)
    if run.requests_error is not None:
        return Fail(messages.REASON_INVALID_RESOURCES, run.requests_error)
    if run.affinity_error is not None:
        return Fail(messages.REASON_INVALID_AFFINITY, messages.invalid_affinity_message(run.affinity_error))
    due = retry_due(run)
    if due is not None and due > snapshot.now:
        return Delay((due - snapshot.now).total_seconds())
    if snapshot.reservation is not None:
        return Skip("awaiting bind observation")
    return None


def plan_cycle(snapshot: Snapshot, registry: Registry = DEFAULT_REGISTRY) -> Result[Plan, CycleError]:
    """Decide what to do with ``snapshot.run`` (SPEC §3 steps 2–12).

    A purely computational function with no side effects: the same snapshot and
    registry always give the same plan, whatever the order of ``snapshot.pods``
    and ``snapshot.targets``, and whether it comes from the load index or the scan.
    """
    early = precheck(snapshot)
    if early is not None:
        return Success(early)
    run = snapshot.run
    assert run is not None  # precheck answers Skip("not found") otherwise
    # The same plan from the state's load index when the profile and snapshot allow
    # it (kruntimes.pure.placement); else every pod is filtered and scored.
    fast = fast_plan(run, snapshot, registry)
    if fast is not None:
        return fast
    filtered = run_filters(run, snapshot, registry)
    if not isinstance(filtered, Success):
        return Failure(filtered.failure())
    outcome = filtered.unwrap()
    if not outcome.feasible:
        return Success(Wait(wait_message(run, registry, outcome.rejections), outcome.rejections))
    scored = run_scores(run, snapshot, registry, outcome.feasible)
    if not isinstance(scored, Success):
        return Failure(scored.failure())
    best = scored.unwrap()
    ranking, scores = ranked_views(best.table)
    return Success(
        Bind(
            pod=best.best.pod.name,
            pod_uid=best.best.pod.uid,
            ranking=ranking,
            scores=scores,
            rejections=outcome.rejections,
        )
    )
