"""One scheduling cycle for one dequeued Run key (SPEC §3), and what the queue does next.

The cycle reads the two atoms, plans with the pure core, performs at most one
reservation swap and one status write, and returns a ``Next`` value saying how
the key goes back to the queue; the worker loop (``runner``) applies it. So
the cycle itself never touches the queue, and tests drive it key by key.

    observe   ledger ← observe(ledger, run); ledger ← sync(ledger, state, ns)
    snapshot  take(state, ledger, key, now, config)          (ledger read before state)
    plan      plan_cycle(snapshot, registry)  → cycle log record
    Bind      ledger.swap_result(reserve(...))  — the single atomic swap
              → Binder.write(bind status carrying the planned resourceVersion)
              ok: keep the reservation (the informer's observation hands it off)
              409: release, count a bind conflict, requeue · 404: release, drop
              other: release, back off
    Wait      write Pending only if it changed, FailedScheduling (deduplicated), requeue in 30 s
    Fail/Cancel   terminal status write
    Delay     requeue after the Run's retry back-off
    Skip      awaiting bind observation → requeue in 1 s (its informer event comes sooner)
    error     CycleError → selection_error, back off

Why the ledger is read before the cluster state: every reservation in a ledger
was granted against a state at least as old as any state read after it, so the
snapshot's ``sync`` never drops a live reservation just because the state it
was given predates the Run it holds capacity for (the reserve step re-checks
against the latest values anyway, so this is about not planning twice).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Literal, TypeAlias, assert_never

from returns.pipeline import is_successful
from returns.result import Failure, Result

from kruntimes.effects.atom import Atom
from kruntimes.effects.binder import Binder, WriteFailure
from kruntimes.effects.cyclelog_writer import CycleLogWriter
from kruntimes.effects.events import EventRecorder
from kruntimes.effects.metrics import SchedulerMetrics
from kruntimes.pure.state.cluster import ClusterState
from kruntimes.pure.readers.cyclelog import CycleRecord
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import Ledger, ReserveConflict, observe, release, reserve, sync
from kruntimes.pure.model.messages import REASON_INVALID_AFFINITY
from kruntimes.pure.model.objects import Run, RunKey, SchedulerConfig
from kruntimes.pure.model.plan import Bind, Cancel, CycleError, Delay, Fail, Plan, Skip, Wait
from kruntimes.pure.snapshot import take
from kruntimes.pure.status import status_for

log = logging.getLogger(__name__)

AWAIT_BIND_REQUEUE: Final = 1.0
"""A Run whose bind succeeded but is not observed yet is looked at again after 1 s; the
informer's event for the bind normally wakes (or ends) it much sooner."""

# --- what the queue does with the key next ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Forget:
    """Done with the key: reset its back-off and do not requeue (a new event will add it)."""


@dataclass(frozen=True, slots=True)
class RequeueAfter:
    """Queue the key again after ``seconds`` (0: at once); resets its back-off."""

    seconds: float


@dataclass(frozen=True, slots=True)
class BackOff:
    """Queue the key after its per-key exponential back-off, but not sooner than ``at_least``."""

    at_least: float = 0.0


Next: TypeAlias = Forget | RequeueAfter | BackOff


@dataclass(frozen=True, slots=True)
class AffinityChanged:
    """Reserve refused: re-planned against the latest ledger, the chosen pod no longer
    satisfies the Run's required (anti-)affinity (another worker's reservation changed it)."""

    reason: Literal["AffinityChanged"] = "AffinityChanged"
    message: str = "the run's required affinity no longer holds on the chosen runtime pod"

Outcome: TypeAlias = Literal[
    "scheduled",
    "waiting",
    "terminal",
    "delayed",
    "skipped",
    "reserve_conflict",
    "bind_conflict",
    "gone",
    "write_failed",
    "cycle_error",
    "not_leader",
]


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did (for the worker's logs and for tests)."""

    key: RunKey
    outcome: Outcome
    next: Next
    plan: Result[Plan, CycleError] | None = None
    pod: str = ""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SchedulingCycle:
    """Runs SPEC §3 for one key against the two atoms. Safe to call from N threads at once
    for *different* keys (the work queue never hands one key to two workers)."""

    def __init__(
        self,
        state: Atom[ClusterState],
        ledger: Atom[Ledger],
        binder: Binder,
        metrics: SchedulerMetrics,
        *,
        config: SchedulerConfig,
        registry: Registry = DEFAULT_REGISTRY,
        events: EventRecorder | None = None,
        cycle_log: CycleLogWriter | None = None,
        may_write: Callable[[], bool] = lambda: True,
        now: Callable[[], datetime] = _utcnow,
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

    def run(self, key: RunKey) -> CycleResult:
        """One cycle for ``key``; timed into ``sync_duration_seconds`` whatever happens."""
        started = self._timer()
        try:
            return self._cycle(key)
        finally:
            self._metrics.observe_sync_duration(self._timer() - started)

    # --- the steps ---

    def _cycle(self, key: RunKey) -> CycleResult:
        current = self._state.get().run(key)
        if current is not None:  # SPEC §3.1
            seen = current
            self._ledger.swap(lambda ledger: observe(ledger, seen))
        self._ledger.swap(lambda ledger: sync(ledger, self._state.get(), key.namespace))
        ledger = self._ledger.get()
        state = self._state.get()
        now = self._now()
        snapshot = take(state, ledger, key, now, self._config)
        planned = plan_cycle(snapshot, self._registry)
        if self._cycle_log is not None:
            self._cycle_log.write(CycleRecord(snapshot, self._weights, planned, self._filters))
        if not is_successful(planned):
            error = planned.failure()
            self._metrics.count_sync("selection_error")
            log.error("scheduling cycle failed", extra={"run": str(key), "reason": error.reason, "error": error.message})
            return CycleResult(key, "cycle_error", BackOff(), planned)
        plan = planned.unwrap()
        run = snapshot.run
        if run is None or isinstance(plan, Skip):
            return self._skip(key, plan, planned)
        if isinstance(plan, Bind):
            return self._bind(key, run, plan, planned, now)
        if isinstance(plan, Wait):
            return self._wait(key, run, plan, planned, now)
        if isinstance(plan, (Fail, Cancel)):
            return self._terminal(key, run, plan, planned, now)
        if isinstance(plan, Delay):
            return CycleResult(key, "delayed", RequeueAfter(max(plan.seconds, 0.0)), planned)
        assert_never(plan)

    def _skip(self, key: RunKey, plan: Plan, planned: Result[Plan, CycleError]) -> CycleResult:
        if isinstance(plan, Skip) and plan.why == "awaiting bind observation":
            return CycleResult(key, "skipped", RequeueAfter(AWAIT_BIND_REQUEUE), planned)
        return CycleResult(key, "skipped", Forget(), planned)

    def _bind(self, key: RunKey, run: Run, plan: Bind, planned: Result[Plan, CycleError], now: datetime) -> CycleResult:
        self._metrics.count_rejections(plan.rejections)
        if not self._may_write():
            return CycleResult(key, "not_leader", Forget(), planned)
        reserved = self._ledger.swap_result(lambda ledger: self._reserve(ledger, key, run, plan, now))
        if not is_successful(reserved):
            conflict = reserved.failure()
            self._metrics.count_conflict("reserve")
            log.info(
                "reservation lost; planning again",
                extra={"run": str(key), "pod": plan.pod, "reason": conflict.reason},
            )
            return CycleResult(key, "reserve_conflict", RequeueAfter(0.0), planned, plan.pod)
        patch = status_for(plan, run, now)
        assert patch is not None  # a Bind always writes
        try:
            written = self._binder.write(run, patch) if self._may_write() else None
        except BaseException:
            self._release(run)
            raise
        if written is None:
            self._release(run)
            return CycleResult(key, "not_leader", Forget(), planned, plan.pod)
        if is_successful(written):
            self._metrics.count_sync("scheduled")
            if run.creation_timestamp is not None:
                self._metrics.observe_queue_duration((now - run.creation_timestamp).total_seconds())
            if self._events is not None:
                self._events.scheduled(run, plan.pod)
            log.debug("bound run", extra={"run": str(key), "pod": plan.pod})  # one per bind: metrics and Events count them
            return CycleResult(key, "scheduled", Forget(), planned, plan.pod)
        self._release(run)
        failure = written.failure()
        if failure.kind == "conflict":
            self._metrics.count_conflict("bind")
            log.info("bind conflict; planning again", extra={"run": str(key), "pod": plan.pod})
            return CycleResult(key, "bind_conflict", BackOff(), planned, plan.pod)
        return self._write_failed(key, failure, planned, "bind", plan.pod)

    def _reserve(
        self, ledger: Ledger, key: RunKey, run: Run, plan: Bind, now: datetime
    ) -> Result[Ledger, ReserveConflict | AffinityChanged]:
        """The function swapped into the ledger atom: pure in ``ledger`` and the latest state.

        ``ledger.reserve`` re-checks capacity and the pod; a Run with *required*
        (anti-)affinity also re-plans against the same ledger value, so two
        workers cannot both seed a cohort on different pods, or put two
        mutually anti-affine Runs on one pod, from snapshots that did not see
        each other's reservation: the second compare-and-swap sees the first.
        """
        latest = self._state.get()
        affinity = run.affinity
        if affinity.required or affinity.anti_required:
            again = plan_cycle(take(latest, ledger, key, now, self._config), self._registry)
            replanned = again.value_or(None)
            if not isinstance(replanned, Bind) or plan.pod not in replanned.ranking:
                return Failure(AffinityChanged())
        return reserve(ledger, latest, run, plan.pod, plan.pod_uid, now, self._config)

    def _release(self, run: Run) -> None:
        self._ledger.swap(lambda ledger: release(ledger, run.namespace, run.uid))

    def _wait(self, key: RunKey, run: Run, plan: Wait, planned: Result[Plan, CycleError], now: datetime) -> CycleResult:
        self._metrics.count_sync("no_pods")
        self._metrics.count_no_pods()
        self._metrics.count_rejections(plan.rejections)
        if not self._may_write():
            return CycleResult(key, "not_leader", Forget(), planned)
        patch = status_for(plan, run, now)
        if patch is not None:
            written = self._binder.write(run, patch)
            if not is_successful(written):
                return self._write_failed(key, written.failure(), planned, "wait")
        if self._events is not None:
            self._events.failed_scheduling(run, plan.message)
        log.debug("run waits", extra={"run": str(key), "wait_message": plan.message})
        return CycleResult(key, "waiting", RequeueAfter(plan.requeue_after), planned)

    def _terminal(
        self, key: RunKey, run: Run, plan: Fail | Cancel, planned: Result[Plan, CycleError], now: datetime
    ) -> CycleResult:
        if isinstance(plan, Fail) and plan.reason == REASON_INVALID_AFFINITY:
            # SPEC §11: upstream's selection-failure path; it is counted as one.
            self._metrics.count_sync("selection_error")
        if not self._may_write():
            return CycleResult(key, "not_leader", Forget(), planned)
        patch = status_for(plan, run, now)
        assert patch is not None
        written = self._binder.write(run, patch)
        if not is_successful(written):
            return self._write_failed(key, written.failure(), planned, "terminal")
        if self._events is not None:
            self._events.deduplicated(run, "Normal" if isinstance(plan, Cancel) else "Warning", plan.reason, plan.message)
        log.info("run finished by the scheduler", extra={"run": str(key), "reason": plan.reason})
        return CycleResult(key, "terminal", Forget(), planned)

    def _write_failed(
        self, key: RunKey, failure: WriteFailure, planned: Result[Plan, CycleError], what: str, pod: str = ""
    ) -> CycleResult:
        fields = {"run": str(key), "write": what, "error": str(failure.error)}
        if failure.kind == "not_found":
            log.info("run gone before its status was written", extra=fields)
            return CycleResult(key, "gone", Forget(), planned, pod)
        if failure.kind == "conflict":
            log.info("status write conflict; planning again", extra=fields)
            return CycleResult(key, "write_failed", BackOff(), planned, pod)
        if failure.kind == "permanent":
            log.error("status write refused; will retry with back-off", extra=fields)
        else:
            log.warning("status write failed; will retry with back-off", extra=fields)
        return CycleResult(key, "write_failed", BackOff(failure.retry_after or 0.0), planned, pod)
