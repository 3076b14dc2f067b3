"""One scheduling cycle for one dequeued Run key: the pure step, carried out.

Every decision is the pure step's (``kruntimes.pure.step``); this module only
performs what the step returns, in order, and reports what happened:

    plan      step.plan(state, ledger, key, now)            (ledger read before state)
              → the cycle log record; rejection counts
    decide    ledger.swap_with(step.decide(planned, latest state, ·))
              — the single atomic swap: the reservation is granted against the
              ledger value the swap hands it, or refused (a reserve conflict)
    write     Binder.write(step.write)       only while this replica may write
    settle    step.settle(step, outcome) → ledger change (keep, hold, release),
              the Event, the metrics, the requeue
    verify    an ambiguous bind past its deadline: Binder.read → step.confirm

So the cycle never touches the queue: it returns a :class:`CycleResult` whose
``next`` the worker loop (``runner``) applies, and tests drive it key by key.

Leadership is checked before the reserve and again right before any write: a
replica that lost its Lease while planning writes nothing and gives back the
reservation it had just taken (``not_leader``; its queue is being shut down).

Why the ledger is read before the cluster state: every reservation in a ledger
was granted against a state at least as old as any state read after it, so the
step's ``sync`` never drops a live reservation just because the state it was
given predates the Run it holds capacity for (the reserve re-checks against the
latest values anyway, so this is about not planning twice).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol

from returns.result import Result

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.cyclelog_writer import CycleLogWriter
from kruntimes.effects.events import RunEvents
from kruntimes.kubeclient.kube import ApiError
from kruntimes.kubeclient.throttle import Throttle
from kruntimes.effects.metrics import SchedulerMetrics
from kruntimes.pure import step as steps
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.ledger import Ledger
from kruntimes.pure.model.objects import Reservation, Run, RunKey, SchedulerConfig
from kruntimes.pure.model.plan import Bind, CycleError, Plan, Wait
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.readers.cyclelog import CycleRecord
from kruntimes.pure.state.cluster import ClusterState
from kruntimes.pure.step import (
    Ambiguous,
    EventNote,
    Forget,
    Next,
    Outcome,
    ReadOutcome,
    Settled,
    StatusWrite,
    Step,
    WriteOutcome,
    Written,
)

log = logging.getLogger(__name__)

NOT_LEADER: Final = Settled("not_leader", Forget())
CONFIRM_WARN_INTERVAL: Final = 60.0
"""Seconds between warnings about reads that could not settle an unknown bind outcome."""


class StatusBinder(Protocol):
    """What a cycle needs of ``binder.Binder``: tests drive the cycle with a scripted one."""

    @property
    def last_error(self) -> ApiError | None:
        """The last failed request's error, for log lines and the failed-confirm count."""
        ...

    def write(self, write: StatusWrite) -> WriteOutcome: ...

    def read(self, key: RunKey) -> ReadOutcome: ...

    def deadline(self) -> datetime:
        """When a write sent now can no longer land."""
        ...


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did, for the worker loop (``next``), its logs and tests."""

    key: RunKey
    settled: Settled
    step: Step | None = None
    """``None`` only when the cycle stopped before planning (never today; kept for hooks)."""
    written: str = ""
    """The Run's new resourceVersion when this cycle's wait-message write landed (the Run
    stays Pending): its next cycle must plan from that version, not from the one before."""
    change: steps.LedgerChange = steps.KEEP
    """What the cycle did to the ledger after its step (settling a write or a read)."""

    @property
    def outcome(self) -> Outcome:
        return self.settled.outcome

    @property
    def next(self) -> Next:
        return self.settled.next

    @property
    def run(self) -> Run | None:
        """The Run as the cycle planned it (what a ``Park`` parks)."""
        return None if self.step is None else self.step.snapshot.run

    @property
    def landed(self) -> str:
        """The pod the Run's reservation sits on after the cycle (``""``: none)."""
        return "" if self.step is None else steps.landing(self.step, self.change)[0]

    @property
    def freed(self) -> Reservation | None:
        """The reservation the cycle gave back: its pod has that room again."""
        return None if self.step is None else steps.landing(self.step, self.change)[1]

    @property
    def plan(self) -> Result[Plan, CycleError] | None:
        return None if self.step is None else self.step.plan

    @property
    def pod(self) -> str:
        write = None if self.step is None else self.step.write
        return write.patch.assigned_pod if write is not None and write.purpose == "bind" else ""



class SchedulingCycle:
    """Carries out the pure step for one key against the two atoms. Safe to call from N
    threads at once for *different* keys (the work queue never hands one key to two workers)."""

    def __init__(
        self,
        state: Atom[ClusterState],
        ledger: Atom[Ledger],
        binder: StatusBinder,
        metrics: SchedulerMetrics,
        *,
        config: SchedulerConfig,
        registry: Registry = DEFAULT_REGISTRY,
        events: RunEvents | None = None,
        cycle_log: CycleLogWriter | None = None,
        may_write: Callable[[str], bool] = lambda namespace: True,
        now: Callable[[], datetime] = utcnow,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._state = state
        self._ledger = ledger
        self._binder = binder
        self._metrics = metrics
        self._config = config
        self._registry = registry
        self._weights = registry.weights
        self._filters = tuple(entry.name for entry in registry.filters)
        self._events = events
        self._cycle_log = cycle_log
        self._may_write = may_write
        self._now = now
        self._timer = timer
        self._confirm_warnings = Throttle(CONFIRM_WARN_INTERVAL, timer)

    def run(self, key: RunKey) -> CycleResult:
        """One cycle for ``key``; timed into ``sync_duration_seconds`` whatever happens."""
        started = self._timer()
        try:
            return self._cycle(key)
        finally:
            self._metrics.observe_sync_duration(self._timer() - started)

    def _cycle(self, key: RunKey) -> CycleResult:
        ledger = self._ledger.get()
        planned = steps.plan(self._state.get(), ledger, key, self._now(), self._config, self._registry)
        if self._cycle_log is not None:
            self._cycle_log.write(CycleRecord(planned.snapshot, self._weights, planned.planned, self._filters))
        decided = planned.planned.value_or(None)
        if isinstance(decided, (Bind, Wait)):
            self._metrics.count_rejections(decided.rejections)
        if isinstance(decided, Bind) and not self._may_write(key.namespace):
            return self._finish(key, None, NOT_LEADER)
        step = self._ledger.swap_with(lambda latest: _pair(steps.decide(planned, self._state.get(), latest, self._registry)))
        if step.verify is not None:
            return self._verify(step, step.verify)
        write = step.write
        if write is None:
            if step.settled.event is not None and not self._may_write(key.namespace):
                return self._finish(key, step, NOT_LEADER)
            return self._finish(key, step, step.settled)
        if not self._may_write(key.namespace):
            if write.purpose == "bind":
                released = steps.Release(write.run.namespace, write.run.uid)
                self._change(released)
                return self._finish(key, step, NOT_LEADER, released)
            return self._finish(key, step, NOT_LEADER)
        try:
            outcome = self._binder.write(write)
        except Exception:
            # Whether the request left is unknown: treated as the outcome that could do harm.
            log.exception("status write raised; treating its outcome as unknown", extra={"run": str(key)})
            outcome = Ambiguous(self._binder.deadline())
        except BaseException:
            self._change(steps.settle(step, Ambiguous(self._binder.deadline()))[1])
            raise
        settled, change = steps.settle(step, outcome)
        self._change(change)
        if isinstance(outcome, Written) and write.purpose == "bind" and write.run.creation_timestamp is not None:
            self._metrics.observe_queue_duration((step.snapshot.now - write.run.creation_timestamp).total_seconds())
        result = self._finish(key, step, settled, change)
        if isinstance(outcome, Written) and write.purpose == "wait" and outcome.resource_version:
            return replace(result, written=outcome.resource_version)
        return result

    def _verify(self, step: Step, check: steps.Verify) -> CycleResult:
        """An ambiguous bind's deadline passed: one read decides whether its reservation goes."""
        if not self._may_write(step.key.namespace):
            return self._finish(step.key, step, NOT_LEADER)
        settled, change = steps.confirm(check, self._binder.read(check.key))
        self._change(change)
        error = self._binder.last_error
        if settled.why == "read failed" and error is not None:
            # the reservation stays while such reads fail (a write that may have landed counts as
            # landed), so one that keeps failing (a 403: no get on runs) holds the slot for good
            self._metrics.count_confirm_failure(error.kind)
            held = self._confirm_warnings.allow()
            if held is not None:
                log.warning(
                    "cannot read a Run to settle a bind whose outcome is unknown; its reservation is kept until a read succeeds",
                    extra={"run": str(step.key), "error": str(error), "kind": error.kind, "unlogged_since_last": held},
                )
        return self._finish(step.key, step, settled, change)

    def _change(self, change: steps.LedgerChange) -> None:
        if not isinstance(change, steps.Keep):
            self._ledger.swap(lambda ledger: steps.apply(ledger, change))

    def _finish(
        self, key: RunKey, step: Step | None, settled: Settled, change: steps.LedgerChange = steps.KEEP
    ) -> CycleResult:
        """Count, record and log what the step came to (``change``: what it did to the ledger)."""
        metrics = self._metrics
        metrics.count_outcome(settled.outcome)
        if settled.sync is not None:
            metrics.count_sync(settled.sync)
            if settled.sync == "no_pods":
                metrics.count_no_pods()
        if settled.conflict is not None:
            metrics.count_conflict(settled.conflict)
        if settled.event is not None and step is not None and self._may_write(key.namespace):
            self._record(step, settled.event)  # a term that ended during the write records nothing
        _log(key, step, settled, self._binder)
        return CycleResult(key, settled, step, change=change)

    def _record(self, step: Step, note: EventNote) -> None:
        events, run, write = self._events, step.snapshot.run, step.write
        if events is None or run is None:
            return
        if note.reason == steps.REASON_SCHEDULED and write is not None:
            events.scheduled(run, write.patch.assigned_pod)
        else:
            events.about_run(run, note.type, note.reason, note.message)


def _pair(step: Step) -> tuple[Ledger, Step]:
    return step.ledger, step


def _log(key: RunKey, step: Step | None, settled: Settled, binder: StatusBinder) -> None:
    outcome = settled.outcome
    fields: dict[str, object] = {"run": str(key)}
    if settled.why:
        fields["reason"] = settled.why
    if outcome in ("write_failed", "bind_uncertain", "gone") and binder.last_error is not None:
        fields["error"] = str(binder.last_error)
    if outcome == "cycle_error" and step is not None:
        error = step.plan.failure()
        log.error("scheduling cycle failed", extra={**fields, "error": error.message})
    elif outcome == "reserve_conflict":
        log.info("reservation lost; planning again", extra=fields)
    elif outcome == "bind_conflict":
        log.info("bind conflict; planning again", extra=fields)
    elif outcome == "bind_uncertain":
        log.warning("bind outcome unknown; holding its reservation until it is known", extra=fields)
    elif outcome == "released":
        log.info("an unknown bind outcome was settled by a read", extra=fields)
    elif outcome == "gone":
        log.info("run gone before its status was written", extra=fields)
    elif outcome == "write_failed":
        if settled.why == "refused":
            log.error("status write refused; will retry with back-off", extra=fields)
        else:
            log.warning("status write failed; will retry with back-off", extra=fields)
    elif outcome == "terminal":
        log.info("run finished by the scheduler", extra=fields)
    elif outcome == "scheduled":
        log.debug("bound run", extra=fields)  # one per bind: metrics and Events count them
