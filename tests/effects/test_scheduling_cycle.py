"""``SchedulingCycle.run(key)`` driven key by key: a world in, the effects a user sees out.

Each test builds a cluster state with the shared builders (tests/builders.py), runs one (or a few)
cycles against a scripted binder, a recording Event recorder, a real
``SchedulerMetrics`` and a leadership switch, then checks what the worker loop
is told to do (``CycleResult.outcome`` / ``.next``), what the ledger holds,
what status was written, which Event was recorded and which metric moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar, Final, final

import pytest
from returns.result import Failure, Result, Success

from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.cyclelog_writer import CycleLogWriter
from kruntimes.effects.events import RunEvents
from kruntimes.kubeclient.events import EventSettings, EventType
from kruntimes.kubeclient.kube import MERGE_PATCH, ApiError, JSONObject
from kruntimes.effects.metrics import SchedulerMetrics
from kruntimes.effects.scheduling import CycleResult, SchedulingCycle
from kruntimes.pure import ledger as ledgers
from kruntimes.pure.framework.interface import PodScorer, keep_scores
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger
from kruntimes.pure.model import messages
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Reservation, Run, RunKey, Snapshot
from kruntimes.pure.model.plan import Bind, CycleError
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.readers.cyclelog import CycleRecord
from kruntimes.pure.state.cluster import ClusterState, Event, apply, from_objects
from kruntimes.pure.model.objects import Object
from kruntimes.pure.step import (
    AffinityChanged,
    Ambiguous,
    BackOff,
    Conflict,
    Forget,
    Gone,
    Next,
    Outcome,
    ReadOutcome,
    Refused,
    Park,
    RequeueAfter,
    StatusWrite,
    WriteOutcome,
    Written,
)
from tests.builders import NOW, active_run, affinity_json, at, decoded_pod, decoded_run, term

NS: Final = "default"
KEY: Final = RunKey(NS, "r")
UID: Final = "uid-run-default-r"
HOLD: Final = 60.0
DEADLINE: Final = NOW + timedelta(seconds=HOLD)
WAITING: Final = messages.waiting_for_pods("python")
WHY: Final = '0/0 Runtime Pods available: no Runtime Pod of runtime "python" in the namespace'
"""The FailedScheduling Event's breakdown for a runtime with no pod (the status keeps WAITING)."""
CREATED_AGO: Final = 3600.0
"""``decoded_run``'s default creationTimestamp is an hour before NOW."""

# --- the fakes ----------------------------------------------------------------------------------


class Clock:
    """The cycle's wall clock: moves only when told."""

    def __init__(self, start: datetime = NOW) -> None:
        self.at = start

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


class Leadership:
    """``may_write``: answers True for the first ``grants`` questions (``None``: always), then False."""

    def __init__(self, grants: int | None = None) -> None:
        self.grants = grants
        self.asked = 0

    def __call__(self, namespace: str) -> bool:
        self.asked += 1
        return self.grants is None or self.asked <= self.grants

    def lose(self) -> None:
        self.grants = self.asked


Scripted = WriteOutcome | BaseException


class ScriptedBinder:
    """The binder surface the cycle uses; answers writes and reads from scripts, records both."""

    def __init__(
        self,
        writes: Iterable[Scripted] = (),
        reads: Iterable[ReadOutcome] = (),
        *,
        on_write: Callable[[StatusWrite], None] | None = None,
    ) -> None:
        self._write_script = list(writes)
        self._read_script = list(reads)
        self._on_write = on_write
        self.writes: list[StatusWrite] = []
        self.reads: list[RunKey] = []
        self.last_error: ApiError | None = None

    def script(self, *writes: Scripted) -> None:
        self._write_script.extend(writes)

    def script_reads(self, *reads: ReadOutcome) -> None:
        self._read_script.extend(reads)

    def write(self, write: StatusWrite) -> WriteOutcome:
        self.writes.append(write)
        if self._on_write is not None:
            self._on_write(write)
        answer = self._write_script.pop(0) if self._write_script else Written("2")
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def read(self, key: RunKey) -> ReadOutcome:
        self.reads.append(key)
        return self._read_script.pop(0) if self._read_script else Refused()

    def deadline(self) -> datetime:
        return DEADLINE


class NoEventApi:
    """The recorder's writer thread is never started here: nothing is sent."""

    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]:
        return Failure(ApiError("transport", 0, "", "not connected"))

    def patch(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH, *, read: bool = True
    ) -> Result[JSONObject, ApiError]:
        return Failure(ApiError("transport", 0, "", "not connected"))


@dataclass(frozen=True)
class Recorded:
    run: str
    type: EventType
    reason: str
    message: str
    queued: bool
    """False when the recorder's deduplication swallowed it."""


class RecordingEvents(RunEvents):
    """The real recorder (its deduplication included) that also remembers every call the cycle made."""

    def __init__(self) -> None:
        super().__init__(NoEventApi(), EventSettings(repeat_interval=300.0))
        self.recorded: list[Recorded] = []

    def scheduled(self, run: Run, pod: str) -> None:
        super().scheduled(run, pod)
        self.recorded.append(Recorded(run.name, "Normal", "Scheduled", messages.assigned_message(pod), True))

    def about_run(self, run: Run, type_: EventType, reason: str, message: str) -> bool:
        queued = super().about_run(run, type_, reason, message)
        self.recorded.append(Recorded(run.name, type_, reason, message, queued))
        return queued


class InterleavingLog(CycleLogWriter):
    """A cycle log whose ``write`` first runs ``hook`` once: the log record is written after the
    plan and before the reserve, the very window in which another worker's reservation lands."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hook: Callable[[CycleRecord], None] | None = None

    def write(self, record: CycleRecord) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook(record)
        super().write(record)


@final
@dataclass(frozen=True, slots=True)
class OutOfRange:
    """A score plugin that breaks the 0..100 contract."""

    name: ClassVar[str] = "OutOfRange"
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        return Success(lambda slots: tuple(101 for _ in slots))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return keep_scores(raw)


# --- the harness --------------------------------------------------------------------------------


@dataclass
class World:
    state: Atom[ClusterState]
    ledger: Atom[Ledger]
    binder: ScriptedBinder
    metrics: SchedulerMetrics
    events: RecordingEvents
    clock: Clock
    leadership: Leadership
    cycle: SchedulingCycle
    results: list[CycleResult] = field(default_factory=list)

    def run(self, key: RunKey = KEY) -> CycleResult:
        result = self.cycle.run(key)
        self.results.append(result)
        return result

    def reservation(self, uid: str = UID) -> Reservation | None:
        return self.ledger.get().get(NS, uid)

    def held_until(self, uid: str = UID) -> datetime | None:
        return self.ledger.get().held_until(NS, uid)

    def observe(self, obj: Object) -> None:
        """The informer's MODIFIED event for ``obj``."""
        self.state.swap(lambda state: apply(state, Event("MODIFIED", obj)))

    def sync(self, result: str) -> float:
        return self.metric("kruntimes_scheduler_sync_total", {"result": result})

    def conflicts(self, stage: str) -> float:
        return self.metric("kruntimes_scheduler_reservation_conflicts_total", {"stage": stage})

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.metrics.value(name, labels)
        assert value is not None, f"no sample {name} {labels}"
        return value


def world(
    *objects: Object,
    writes: Iterable[Scripted] = (),
    reads: Iterable[ReadOutcome] = (),
    leadership: Leadership | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    cycle_log: CycleLogWriter | None = None,
    on_write: Callable[[StatusWrite], None] | None = None,
) -> World:
    state = Atom(from_objects(objects))
    ledger: Atom[Ledger] = Atom(EMPTY_LEDGER)
    binder = ScriptedBinder(writes, reads, on_write=on_write)
    metrics = SchedulerMetrics(registry)
    events = RecordingEvents()
    clock = Clock()
    leading = leadership if leadership is not None else Leadership()
    cycle = SchedulingCycle(
        state,
        ledger,
        binder,
        metrics,
        config=DEFAULT_CONFIG,
        registry=registry,
        events=events,
        cycle_log=cycle_log,
        may_write=leading,
        now=clock,
    )
    return World(state, ledger, binder, metrics, events, clock, leading, cycle)


def bindable(
    *writes: Scripted, leadership: Leadership | None = None, on_write: Callable[[StatusWrite], None] | None = None
) -> World:
    """A Pending Run ``r`` and one free, available pod ``p1``."""
    return world(decoded_run("r"), decoded_pod("p1"), writes=writes, leadership=leadership, on_write=on_write)


def expect(result: CycleResult, outcome: Outcome, next_: Next) -> None:
    assert (result.outcome, result.next) == (outcome, next_)


def scheduled_event(pod: str) -> Recorded:
    return Recorded("r", "Normal", "Scheduled", messages.assigned_message(pod), True)


# --- a cycle error ------------------------------------------------------------------------------


def test_a_score_outside_0_to_100_fails_the_cycle_counts_a_selection_error_and_writes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = DEFAULT_REGISTRY.register_score(OutOfRange.name, 1, OutOfRange).unwrap()
    w = world(decoded_run("r"), decoded_pod("p1"), registry=registry)
    with caplog.at_level(logging.ERROR, logger="kruntimes.effects.scheduling"):
        result = w.run()
    expect(result, "cycle_error", BackOff())
    assert w.sync("selection_error") == 1
    assert w.binder.writes == []
    assert len(w.ledger.get()) == 0
    assert w.events.recorded == []
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == ["scheduling cycle failed"]


# --- delay and skip -----------------------------------------------------------------------------


def test_a_retried_run_inside_its_back_off_is_requeued_for_the_rest_of_it_and_nothing_is_written() -> None:
    # attempt 3: twice the 1 s base, from a Running=False transition half a second ago
    retried = decoded_run(
        "r", attempt=3, conditions=[{"type": "Running", "status": "False", "reason": "Retry", "lastTransitionTime": at(-0.5)}]
    )
    w = world(retried, decoded_pod("p1"))
    expect(w.run(), "delayed", RequeueAfter(1.5))
    assert w.binder.writes == []
    assert len(w.ledger.get()) == 0


@pytest.mark.parametrize(
    "objects",
    [
        pytest.param((decoded_pod("p1"),), id="the run is gone"),
        pytest.param((active_run("r", "p1"), decoded_pod("p1")), id="the run is no longer pending"),
    ],
)
def test_a_run_that_is_gone_or_not_pending_is_forgotten_without_a_write(objects: tuple[Object, ...]) -> None:
    w = world(*objects)
    expect(w.run(), "skipped", Forget())
    assert w.binder.writes == []
    assert w.events.recorded == []


def test_a_bound_run_not_yet_observed_is_looked_at_again_in_a_second_and_not_bound_twice() -> None:
    w = bindable(Written("2"))
    expect(w.run(), "scheduled", Forget())
    expect(w.run(), "skipped", RequeueAfter(1.0))
    assert len(w.binder.writes) == 1
    assert w.reservation() is not None


# --- the not-leader guards ----------------------------------------------------------------------


def test_a_bind_planned_while_not_leading_reserves_nothing_and_writes_nothing() -> None:
    w = bindable(leadership=Leadership(grants=0))
    result = w.run()
    expect(result, "not_leader", Forget())
    assert result.step is None
    assert len(w.ledger.get()) == 0
    assert w.binder.writes == []
    assert w.events.recorded == []
    assert w.sync("scheduled") == 0


def test_leadership_lost_between_reserve_and_bind_write_gives_the_reservation_back_and_writes_nothing() -> None:
    w = bindable(leadership=Leadership(grants=1))  # leading when planned, not when about to write
    result = w.run()
    expect(result, "not_leader", Forget())
    assert result.step is not None and result.step.ledger.get(NS, UID) is not None, "the reserve was granted"
    assert w.reservation() is None
    assert len(w.ledger.get()) == 0
    assert w.binder.writes == []
    assert w.events.recorded == []


def already_waiting() -> Run:
    """A Pending Run whose status already says what a Wait would write."""
    condition: dict[str, object] = {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": WAITING, "lastTransitionTime": at(-60)}
    return decoded_run("r", phase="Pending", message=WAITING, conditions=[condition])


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(decoded_run("r"), id="a wait that would write"),
        pytest.param(already_waiting(), id="a wait with the status unchanged"),
    ],
)
def test_a_wait_while_not_leading_writes_nothing_and_records_no_event(run: Run) -> None:
    w = world(run, leadership=Leadership(grants=0))
    expect(w.run(), "not_leader", Forget())
    assert w.binder.writes == []
    assert w.events.recorded == []


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(decoded_run("r", requests={"cpu": "x"}), id="fail"),
        pytest.param(decoded_run("r", cancel=True), id="cancel"),
    ],
)
def test_a_terminal_decision_while_not_leading_writes_nothing(run: Run) -> None:
    w = world(run, decoded_pod("p1"), leadership=Leadership(grants=0))
    expect(w.run(), "not_leader", Forget())
    assert w.binder.writes == []
    assert w.events.recorded == []


# --- reserve conflicts --------------------------------------------------------------------------


def reserve_other_on_planned_pod(w: World, other: Run) -> Callable[[CycleRecord], None]:
    """Another worker's reservation for ``other`` lands on the pod this cycle planned for."""

    def hook(record: CycleRecord) -> None:
        planned = record.plan.unwrap()
        assert isinstance(planned, Bind)
        state = w.state.get()
        w.ledger.swap(
            lambda ledger: ledgers.reserve(
                ledgers.sync(ledger, state, NS), state, other, planned.pod, planned.pod_uid, NOW, DEFAULT_CONFIG
            ).unwrap()
        )

    return hook


def test_a_reservation_that_fills_the_pod_after_planning_is_a_reserve_conflict_that_backs_off(tmp_path: Path) -> None:
    other = decoded_run("other")
    log = InterleavingLog(tmp_path / "cycles.jsonl")
    w = world(decoded_run("r"), other, decoded_pod("p1", capacity={"runs": "1"}), cycle_log=log)
    log.hook = reserve_other_on_planned_pod(w, other)
    result = w.run()
    expect(result, "reserve_conflict", BackOff(keep_claim=True))  # never RequeueAfter(0): a requeue must not spin
    assert result.step is not None and result.step.conflict is not None
    assert result.step.conflict.reason == "NoRoom"
    assert w.conflicts("reserve") == 1
    assert w.conflicts("bind") == 0
    assert w.binder.writes == []
    assert w.reservation() is None
    assert w.reservation(other.uid) is not None, "the other worker's reservation stands"


def test_an_anti_affine_reservation_on_the_chosen_pod_after_planning_is_an_affinity_change(tmp_path: Path) -> None:
    run = decoded_run("r", affinity=affinity_json(anti_required=[term({"app": "x"})]))
    other = decoded_run("other", labels={"app": "x"})
    log = InterleavingLog(tmp_path / "cycles.jsonl")
    w = world(run, other, decoded_pod("p1"), decoded_pod("p2"), cycle_log=log)
    log.hook = reserve_other_on_planned_pod(w, other)
    result = w.run()
    expect(result, "reserve_conflict", BackOff(keep_claim=True))
    assert result.step is not None and result.step.conflict == AffinityChanged()
    assert w.conflicts("reserve") == 1
    assert w.binder.writes == []
    taken = w.reservation(other.uid)
    assert taken is not None
    # planning again sees the other Run's reservation and picks the other pod
    expect(w.run(), "scheduled", Forget())
    assert [write.patch.assigned_pod for write in w.binder.writes] == [{"p1": "p2", "p2": "p1"}[taken.pod]]


# --- a write that raises ------------------------------------------------------------------------


def test_a_bind_write_that_raises_holds_the_reservation_until_the_write_deadline_and_requeues() -> None:
    w = bindable(RuntimeError("connection reset mid-request"))
    result = w.run()
    expect(result, "bind_uncertain", RequeueAfter(HOLD))
    assert len(w.binder.writes) == 1
    assert w.reservation() is not None, "the write may have landed: its capacity is not handed out"
    assert w.held_until() == DEADLINE
    assert w.events.recorded == []


def test_a_bind_write_interrupted_by_a_base_exception_still_holds_the_reservation() -> None:
    w = bindable(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        w.run()
    assert w.reservation() is not None
    assert w.held_until() == DEADLINE


# --- bind write outcomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class BindCase:
    answer: WriteOutcome
    outcome: Outcome
    next: Next
    reservation: str
    """"kept", "held" (until DEADLINE) or "released"."""
    bind_conflicts: int = 0


BIND_CASES: Final = {
    "written": BindCase(Written("2"), "scheduled", Forget(), "kept"),
    "conflict": BindCase(Conflict(), "bind_conflict", BackOff(), "released", bind_conflicts=1),
    "refused with retry-after": BindCase(Refused(retry_after=2.5), "write_failed", BackOff(2.5), "released"),
    "refused for good": BindCase(Refused(permanent=True), "write_failed", BackOff(), "released"),
    "gone": BindCase(Gone(), "gone", Forget(), "released"),
    "ambiguous": BindCase(Ambiguous(DEADLINE), "bind_uncertain", RequeueAfter(HOLD), "held"),
}


@pytest.mark.parametrize("case", BIND_CASES.values(), ids=BIND_CASES.keys())
def test_a_bind_write_outcome_decides_the_reservation_and_the_requeue(case: BindCase) -> None:
    w = bindable(case.answer)
    result = w.run()
    expect(result, case.outcome, case.next)
    [write] = w.binder.writes
    assert (write.purpose, write.patch.phase, write.patch.assigned_pod, write.patch.message) == ("bind", "Scheduled", "p1", "")
    held = {"kept": (True, None), "held": (True, DEADLINE), "released": (False, None)}[case.reservation]
    assert (w.reservation() is not None, w.held_until()) == held
    assert w.conflicts("bind") == case.bind_conflicts
    assert w.conflicts("reserve") == 0
    written = isinstance(case.answer, Written)
    assert w.events.recorded == ([scheduled_event("p1")] if written else [])
    assert w.sync("scheduled") == (1 if written else 0)


def test_a_written_bind_records_the_scheduled_event_with_its_pod_and_observes_the_queue_time() -> None:
    w = bindable(Written("2"))
    result = w.run()
    assert result.pod == "p1"
    assert w.events.recorded == [scheduled_event("p1")]
    assert w.metric("kruntimes_scheduler_run_queue_duration_seconds_count") == 1
    assert w.metric("kruntimes_scheduler_run_queue_duration_seconds_sum") == CREATED_AGO
    assert w.metric("kruntimes_scheduler_sync_duration_seconds_count") == 1


def test_a_bind_refused_for_good_is_logged_as_an_error(caplog: pytest.LogCaptureFixture) -> None:
    w = bindable(Refused(permanent=True))
    with caplog.at_level(logging.INFO, logger="kruntimes.effects.scheduling"):
        w.run()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "status write refused; will retry with back-off")
    ]


def test_a_bind_that_merely_failed_is_logged_as_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    w = bindable(Refused(retry_after=2.5))
    with caplog.at_level(logging.INFO, logger="kruntimes.effects.scheduling"):
        w.run()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "status write failed; will retry with back-off")
    ]


# --- after an ambiguous bind --------------------------------------------------------------------


def ambiguous_bind() -> World:
    w = bindable(Ambiguous(DEADLINE))
    expect(w.run(), "bind_uncertain", RequeueAfter(HOLD))
    return w


def test_before_the_write_deadline_the_next_cycle_waits_out_the_rest_of_it_without_reading() -> None:
    w = ambiguous_bind()
    w.clock.advance(20)
    expect(w.run(), "skipped", RequeueAfter(HOLD - 20))
    assert w.binder.reads == []
    assert len(w.binder.writes) == 1
    assert w.held_until() == DEADLINE


@dataclass(frozen=True)
class ReadCase:
    read: ReadOutcome
    outcome: Outcome
    next: Next
    kept: bool


READ_CASES: Final = {
    "still at the planned version": ReadCase(decoded_run("r"), "released", RequeueAfter(0.0), kept=False),
    "at a newer version": ReadCase(
        decoded_run("r", resource_version="3", phase="Scheduled", assigned_pod="p1"), "skipped", RequeueAfter(1.0), kept=True
    ),
    "gone": ReadCase(Gone(), "gone", Forget(), kept=False),
    "read failed": ReadCase(Refused(), "skipped", BackOff(), kept=True),
}


@pytest.mark.parametrize("case", READ_CASES.values(), ids=READ_CASES.keys())
def test_after_the_write_deadline_a_read_of_the_run_settles_the_held_reservation(case: ReadCase) -> None:
    w = ambiguous_bind()
    w.clock.advance(HOLD + 1)
    w.binder.script_reads(case.read)
    expect(w.run(), case.outcome, case.next)
    assert w.binder.reads == [KEY]
    assert len(w.binder.writes) == 1, "a read, never a second bind, decides"
    assert (w.reservation() is not None) == case.kept


def test_a_run_whose_ambiguous_bind_never_landed_is_bound_again_after_the_read() -> None:
    w = ambiguous_bind()
    w.clock.advance(HOLD + 1)
    w.binder.script_reads(decoded_run("r"))
    expect(w.run(), "released", RequeueAfter(0.0))
    w.observe(decoded_pod("p1", heartbeat_at=at(HOLD + 1)))  # the pod still heartbeats
    w.binder.script(Written("2"))
    expect(w.run(), "scheduled", Forget())
    assert [write.patch.assigned_pod for write in w.binder.writes] == ["p1", "p1"]


def test_after_the_write_deadline_a_replica_that_lost_its_lease_reads_nothing_and_keeps_the_hold() -> None:
    w = ambiguous_bind()
    w.leadership.lose()
    w.clock.advance(HOLD + 1)
    expect(w.run(), "not_leader", Forget())
    assert w.binder.reads == []
    assert w.held_until() == DEADLINE


# --- wait write outcomes ------------------------------------------------------------------------


def test_a_waiting_run_gets_its_pending_status_a_failed_scheduling_event_and_is_parked_until_a_pod_fits() -> None:
    w = world(decoded_run("r"), writes=[Written("2")])
    expect(w.run(), "waiting", Park("unfit"))
    [write] = w.binder.writes
    assert (write.purpose, write.patch.phase, write.patch.message) == ("wait", "Pending", WAITING)
    assert w.events.recorded == [Recorded("r", "Warning", "FailedScheduling", WHY, True)]
    assert w.sync("no_pods") == 1
    assert w.metric("kruntimes_scheduler_no_pods_total") == 1


def test_a_landed_wait_write_reports_the_runs_new_version_and_a_bind_or_unchanged_status_none() -> None:
    assert world(decoded_run("r"), writes=[Written("7")]).run().written == "7"
    assert world(already_waiting()).run().written == ""  # nothing written
    assert bindable(Written("7")).run().written == ""  # bound: the Run is no longer Pending


def test_a_waiting_run_whose_status_is_unchanged_is_not_written_and_its_event_is_deduplicated() -> None:
    w = world(already_waiting())
    expect(w.run(), "waiting", Park("unfit"))
    expect(w.run(), "waiting", Park("unfit"))
    assert w.binder.writes == []
    assert w.events.recorded == [
        Recorded("r", "Warning", "FailedScheduling", WHY, True),
        Recorded("r", "Warning", "FailedScheduling", WHY, False),
    ]


@dataclass(frozen=True)
class FailedWrite:
    answer: WriteOutcome
    outcome: Outcome
    next: Next


FAILED_WRITES: Final = {
    "conflict": FailedWrite(Conflict(), "write_failed", BackOff()),
    "refused with retry-after": FailedWrite(Refused(retry_after=4.0), "write_failed", BackOff(4.0)),
    "refused for good": FailedWrite(Refused(permanent=True), "write_failed", BackOff()),
    "ambiguous": FailedWrite(Ambiguous(DEADLINE, retry_after=3.0), "write_failed", BackOff(3.0)),
    "gone": FailedWrite(Gone(), "gone", Forget()),
}


@pytest.mark.parametrize("case", FAILED_WRITES.values(), ids=FAILED_WRITES.keys())
def test_a_wait_write_that_fails_backs_off_or_forgets_and_records_no_event(case: FailedWrite) -> None:
    w = world(decoded_run("r"), writes=[case.answer])
    expect(w.run(), case.outcome, case.next)
    assert len(w.binder.writes) == 1
    assert w.events.recorded == []
    assert len(w.ledger.get()) == 0
    assert w.conflicts("bind") == 0


# --- terminal write outcomes --------------------------------------------------------------------


@dataclass(frozen=True)
class TerminalCase:
    run: Run
    phase: str
    event: Recorded


TERMINAL: Final = {
    "invalid requests fail": TerminalCase(
        decoded_run("r", requests={"cpu": "x"}),
        "Failed",
        Recorded("r", "Warning", "InvalidResources", 'resource request "cpu" must be a non-negative integer', True),
    ),
    "a cancel request cancels": TerminalCase(
        decoded_run("r", cancel=True), "Cancelled", Recorded("r", "Normal", "Cancelled", messages.CANCELLED_MESSAGE, True)
    ),
}


@pytest.mark.parametrize("case", TERMINAL.values(), ids=TERMINAL.keys())
def test_a_terminal_decision_is_written_recorded_and_forgotten(case: TerminalCase) -> None:
    w = world(case.run, decoded_pod("p1"), writes=[Written("2")])
    expect(w.run(), "terminal", Forget())
    [write] = w.binder.writes
    assert (write.purpose, write.patch.phase, write.patch.message) == ("terminal", case.phase, case.event.message)
    assert w.events.recorded == [case.event]
    assert len(w.ledger.get()) == 0


@pytest.mark.parametrize("run", [c.run for c in TERMINAL.values()], ids=TERMINAL.keys())
@pytest.mark.parametrize("case", FAILED_WRITES.values(), ids=FAILED_WRITES.keys())
def test_a_terminal_write_that_fails_backs_off_or_forgets_and_records_no_event(run: Run, case: FailedWrite) -> None:
    w = world(run, decoded_pod("p1"), writes=[case.answer])
    expect(w.run(), case.outcome, case.next)
    assert len(w.binder.writes) == 1
    assert w.events.recorded == []


# --- a stale assignedPod ------------------------------------------------------------------------


def test_a_pending_run_with_a_stale_assigned_pod_is_bound_normally_and_not_spun() -> None:
    stale = decoded_run("r", assigned_pod="old-pod", assigned_pod_uid="uid-old")
    w = world(stale, decoded_pod("p1"), writes=[Written("2")])
    expect(w.run(), "scheduled", Forget())
    [write] = w.binder.writes
    assert (write.patch.assigned_pod, write.patch.phase) == ("p1", "Scheduled")
    held = w.reservation()
    assert held is not None and held.pod == "p1"
    # until the informer shows the bind, the key comes back after a second, without another write
    expect(w.run(), "skipped", RequeueAfter(1.0))
    # once it shows the bind, the reservation hands off to actual usage and the key is done
    w.observe(decoded_run("r", resource_version="2", phase="Scheduled", assigned_pod="p1", assigned_pod_uid="uid-pod-default-p1"))
    expect(w.run(), "skipped", Forget())
    assert len(w.ledger.get()) == 0
    assert len(w.binder.writes) == 1


# --- leadership lost during the write -----------------------------------------------------------


def test_leadership_lost_while_the_bind_write_is_in_flight_still_settles_its_outcome() -> None:
    # the write has left; a definite refusal still gives the reservation back, the cycle ends normally
    leading = Leadership()
    w = bindable(Conflict(), leadership=leading, on_write=lambda _: leading.lose())
    expect(w.run(), "bind_conflict", BackOff())
    assert len(w.ledger.get()) == 0
