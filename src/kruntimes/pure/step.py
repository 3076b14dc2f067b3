"""The per-key scheduling transaction (SPEC §3, §6, §7) as pure functions.

One dequeued Run key goes through, in this order:

    sync             the ledger's view of the Run's namespace (§3.1, §6)
    snapshot         ``snapshot.take`` on the synced ledger (§3.8)
    plan             ``planner.plan_cycle`` (§3.2–3.12)
    reserve          for a ``Bind``: the compare-and-swap against the latest state (§3.13, §6)
    write            the status document the plan asks for, and the Event it earns (§7)
    settle           the write's outcome → keep, hold or release the reservation; the requeue (§3.14)

:func:`plan` runs the first three and :func:`decide` the fourth and the
choice of write; :func:`transact` is the two together, the whole step from
(cluster state, ledger, key, now, config, registry) to a :class:`Step`. The
effect layer (``kruntimes.effects.scheduling``) runs :func:`plan` against the
atoms' values and swaps :func:`decide` into the ledger atom — it is pure in
the ledger value it is given, so the compare-and-swap that guards the
reservation re-runs it, never a stale answer — then performs
``Step.write`` and hands its outcome to :func:`settle`. ``simulate``,
``replay`` and ``explain`` run the same functions, so they cannot drift from
the scheduler.

A reservation whose bind had an *ambiguous* outcome (the write may have
landed: a lost response, a 5xx) is held (``ledger.hold``) until the informer
shows the Run at a newer resourceVersion, or until a read after the write's
deadline shows it unchanged: :func:`decide` then asks for that read
(``Step.verify``) and :func:`confirm` releases the reservation only if the
read proves the write never landed. Capacity that may be in use is never
handed to another Run.

This is a purely computational module with no side effects: ``now`` is an
argument, writes are values, and what the queue does next is a value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal, TypeAlias, assert_never, final

from returns.pipeline import is_successful
from returns.result import Failure, Result

from kruntimes.pure import ledger as ledgers
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.ledger import Ledger, ReserveConflict
from kruntimes.pure.model import messages
from kruntimes.pure.model.objects import Reservation, Run, RunKey, SchedulerConfig, Snapshot
from kruntimes.pure.model.plan import Bind, Cancel, CycleError, Delay, Fail, Plan, Skip, Wait
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.queueing import ParkReason, park_reason, parked_blind
from kruntimes.pure.plugins.availability import RuntimePodAvailability, unavailable_kind
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.snapshot import take
from kruntimes.pure.state.cluster import ClusterState
from kruntimes.pure.status import StatusPatch, status_for

__all__ = [
    "AWAIT_BIND_REQUEUE",
    "AffinityChanged",
    "Ambiguous",
    "BackOff",
    "Conflict",
    "EventNote",
    "Forget",
    "Gone",
    "Hold",
    "Keep",
    "LedgerChange",
    "Next",
    "Outcome",
    "Park",
    "Planned",
    "ReadOutcome",
    "Refused",
    "Release",
    "RequeueAfter",
    "Settled",
    "StatusWrite",
    "Step",
    "Verify",
    "WriteOutcome",
    "Written",
    "apply",
    "confirm",
    "decide",
    "landing",
    "plan",
    "settle",
    "transact",
]

AWAIT_BIND_REQUEUE: Final = 1.0
"""A Run whose bind succeeded but is not observed yet is looked at again after 1 s; the
informer's event for the bind normally wakes (or ends) it much sooner."""

# --- what the queue does with the key next -----------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Forget:
    """Done with the key: reset its back-off and do not requeue (a new event will add it)."""


@final
@dataclass(frozen=True, slots=True)
class RequeueAfter:
    """Queue the key again after ``seconds`` (0: at once); resets its back-off."""

    seconds: float


@final
@dataclass(frozen=True, slots=True)
class BackOff:
    """Queue the key after its per-key exponential back-off, but not sooner than ``at_least``.

    Every repeatable failure (a conflict, a refused or failed write, a cycle error)
    requeues this way, so a key that fails again and again waits longer each time
    instead of spinning a worker (SPEC §3.14)."""

    at_least: float = 0.0
    keep_claim: bool = False
    """Keep the room the Run was admitted for claimed until its retry's cycle ends: it lost
    the reserve race for that room and comes back for it; released, the next Run in line
    would be admitted into it and one of the two would wait behind Runs that came after it."""


@final
@dataclass(frozen=True, slots=True)
class Park:
    """Keep the key out of the queue, in its (namespace, runtime)'s ``group`` of the parking
    lot, until an event can help it (SPEC §8; ``queueing.park_reason``). ``blind``: plan it
    again as soon as a pod with room refuses it (``queueing.parked_blind``)."""

    group: ParkReason
    blind: bool = False


Next: TypeAlias = Forget | RequeueAfter | BackOff | Park

# --- what a cycle asks the effect layer to do ------------------------------------------------

WritePurpose: TypeAlias = Literal["bind", "wait", "terminal"]


@final
@dataclass(frozen=True, slots=True)
class StatusWrite:
    """Write ``patch`` to the Run's status, guarded by the resourceVersion the cycle planned from."""

    run: Run
    patch: StatusPatch
    purpose: WritePurpose


EventType: TypeAlias = Literal["Normal", "Warning"]
REASON_SCHEDULED: Final = "Scheduled"
REASON_FAILED_SCHEDULING: Final = "FailedScheduling"
AVAILABILITY: Final = RuntimePodAvailability.name


@final
@dataclass(frozen=True, slots=True)
class EventNote:
    """A Kubernetes Event about the Run, recorded once the write it follows succeeded.

    ``Scheduled`` is recorded every time (and ends the Run's waiting series);
    every other reason is deduplicated per (Run, reason, message) by the recorder.
    The message is a status message: no pod name except the bind's own pod."""

    type: EventType
    reason: str
    message: str


Outcome: TypeAlias = Literal[
    "scheduled",
    "waiting",
    "terminal",
    "delayed",
    "skipped",
    "reserve_conflict",
    "bind_conflict",
    "bind_uncertain",
    "released",
    "gone",
    "write_failed",
    "cycle_error",
    "not_leader",
]
"""What a cycle came to: a closed set, for logs, tests and the scheduler's result hook."""

SyncResult: TypeAlias = Literal["scheduled", "no_pods", "selection_error"]
"""How a Run's cycle ended for the sync metric (a closed set: metric labels)."""
ConflictStage: TypeAlias = Literal["reserve", "bind"]
"""Where a cycle lost a race to another writer (a closed set: metric labels)."""


@final
@dataclass(frozen=True, slots=True)
class Settled:
    """How a step ends: what is counted, what is recorded, and what the queue does next."""

    outcome: Outcome
    next: Next
    event: EventNote | None = None
    sync: SyncResult | None = None
    """The ``kruntimes_scheduler_sync_total`` result this step counts, if any."""
    conflict: ConflictStage | None = None
    """The ``reservation_conflicts_total`` stage this step counts, if any."""
    why: str = ""
    """For the log: the reserve conflict's or write failure's reason (no names)."""


@final
@dataclass(frozen=True, slots=True)
class AffinityChanged:
    """Reserve refused: re-planned against the latest ledger, the chosen pod no longer
    satisfies the Run's required (anti-)affinity (another worker's reservation changed it)."""

    reason: Literal["AffinityChanged"] = "AffinityChanged"
    message: str = "the run's required affinity no longer holds on the chosen runtime pod"


@final
@dataclass(frozen=True, slots=True)
class Verify:
    """Read the Run to learn whether an ambiguous bind landed (its hold's deadline has passed)."""

    key: RunKey
    uid: str
    resource_version: str
    """The version the bind was planned from: a Run still at it proves the write never landed."""


@final
@dataclass(frozen=True, slots=True)
class Planned:
    """SPEC §3.1–3.12 for one key: the synced ledger the cycle planned against, its snapshot and plan."""

    key: RunKey
    ledger: Ledger
    snapshot: Snapshot
    planned: Result[Plan, CycleError]
    base: tuple[ClusterState, Ledger] | None = field(default=None, compare=False, repr=False)
    """The (state, ledger) it was planned from: :func:`decide` given the very same values
    reuses ``ledger`` instead of observing and syncing again."""


@final
@dataclass(frozen=True, slots=True)
class Step:
    """One key's transaction up to the write: everything the effect layer carries out.

    ``ledger`` is the ledger after the step (observed and synced; with the Run's
    reservation when a bind was granted). Then exactly one of: ``write`` (perform
    it, then :func:`settle` its outcome), ``verify`` (read the Run, then
    :func:`confirm`), or neither (``settled`` is final).
    """

    planned: Planned
    ledger: Ledger
    write: StatusWrite | None
    settled: Settled
    """Final when there is nothing to write or verify; else what the step came to so far."""
    verify: Verify | None = None
    conflict: ReserveConflict | AffinityChanged | None = None
    """A refused reserve (SPEC §3.13): nothing is written."""

    @property
    def key(self) -> RunKey:
        return self.planned.key

    @property
    def snapshot(self) -> Snapshot:
        return self.planned.snapshot

    @property
    def plan(self) -> Result[Plan, CycleError]:
        return self.planned.planned


# --- write outcomes ----------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Written:
    """The server applied the write; the Run's new resourceVersion (when the answer carried it)."""

    resource_version: str = ""


@final
@dataclass(frozen=True, slots=True)
class Conflict:
    """409: someone wrote the Run after the version we planned from; nothing was applied."""


@final
@dataclass(frozen=True, slots=True)
class Refused:
    """A definite refusal (any other 4xx, 429 included; or the request never left): nothing applied."""

    retry_after: float | None = None
    permanent: bool = False
    """Repeating the same write will not help (400/422 invalid, 401, 403): logged loudly."""


@final
@dataclass(frozen=True, slots=True)
class Ambiguous:
    """The write may have landed (timeout, connection lost after sending, 5xx).

    ``deadline``: after it the write can no longer land (the request's own timeout has
    passed), so a read then showing the Run at the planned-from version proves it never did."""

    deadline: datetime
    retry_after: float | None = None


@final
@dataclass(frozen=True, slots=True)
class Gone:
    """404: the Run no longer exists."""


WriteOutcome: TypeAlias = Written | Conflict | Refused | Ambiguous | Gone
ReadOutcome: TypeAlias = Run | Gone | Refused | Ambiguous
"""What a read of the Run found: the Run as stored, gone, or a failed read."""

# --- the step ----------------------------------------------------------------------------------


def plan(
    state: ClusterState,
    ledger: Ledger,
    key: RunKey,
    now: datetime,
    config: SchedulerConfig,
    registry: Registry = DEFAULT_REGISTRY,
) -> Planned:
    """SPEC §3.1–3.12: sync the ledger, take the snapshot, plan (no reservation yet)."""
    synced = ledgers.sync(ledger, state, key.namespace)  # what _observed does, without its frame
    snapshot = take(state, synced, key, now, config)
    return Planned(key, synced, snapshot, plan_cycle(snapshot, registry), (state, ledger))


def _observed(state: ClusterState, ledger: Ledger, key: RunKey) -> Ledger:
    """SPEC §3.1 and §6 in one pass: ``sync`` drops every reservation of the namespace the
    state has overtaken, this Run's included (what ``ledger.observe`` does for one Run as its
    watch event arrives)."""
    return ledgers.sync(ledger, state, key.namespace)


def decide(planned: Planned, state: ClusterState, ledger: Ledger, registry: Registry = DEFAULT_REGISTRY) -> Step:
    """SPEC §3.13 and the write: pure in ``ledger`` (and ``state``), the latest values.

    ``ledger`` may be newer than the one ``planned`` was made against (another
    worker reserved meanwhile): the reserve re-checks capacity and the pod
    against it and ``state``, and a Run with required (anti-)affinity is
    re-planned on it too, so two workers cannot both seed a cohort on different
    pods, or put two mutually anti-affine Runs on one pod, from snapshots that
    did not see each other's reservation.
    """
    key, snapshot = planned.key, planned.snapshot
    base = planned.base
    same = base is not None and base[0] is state and base[1] is ledger
    synced = planned.ledger if same else _observed(state, ledger, key)
    result = planned.planned
    if not is_successful(result):
        error = result.failure()
        return Step(planned, synced, None, Settled("cycle_error", BackOff(), sync="selection_error", why=error.reason))
    decided = result.unwrap()
    run = snapshot.run
    if run is None or isinstance(decided, Skip):
        return _skipped(planned, synced, decided, snapshot.now)
    if isinstance(decided, Delay):
        return Step(planned, synced, None, Settled("delayed", RequeueAfter(max(decided.seconds, 0.0))))
    if isinstance(decided, Bind):
        return _reserve(planned, state, synced, run, decided, registry)
    if isinstance(decided, Wait):
        note = _failed_scheduling(decided, snapshot, run)
        park = Park(park_reason(snapshot, decided, registry), parked_blind(snapshot))
        wait = Settled("waiting", park, note, sync="no_pods")
        return Step(planned, synced, _write(run, decided, snapshot.now, "wait"), wait)
    if isinstance(decided, (Fail, Cancel)):
        event = EventNote("Normal" if isinstance(decided, Cancel) else "Warning", decided.reason, decided.message)
        # SPEC §11: an invalid affinity is upstream's selection-failure path, and counted as one.
        sync: SyncResult | None = "selection_error" if decided.reason == messages.REASON_INVALID_AFFINITY else None
        return Step(planned, synced, _write(run, decided, snapshot.now, "terminal"), Settled("terminal", Forget(), event, sync))
    assert_never(decided)


def transact(
    state: ClusterState,
    ledger: Ledger,
    key: RunKey,
    now: datetime,
    config: SchedulerConfig,
    registry: Registry = DEFAULT_REGISTRY,
) -> Step:
    """The whole step for one key on one (state, ledger) pair: ``decide(plan(...))``."""
    return decide(plan(state, ledger, key, now, config, registry), state, ledger, registry)


def _write(run: Run, decided: Plan, now: datetime, purpose: WritePurpose) -> StatusWrite | None:
    patch = status_for(decided, run, now)
    return None if patch is None else StatusWrite(run, patch, purpose)


def _failed_scheduling(wait: Wait, snapshot: Snapshot, run: Run) -> EventNote:
    return EventNote("Warning", REASON_FAILED_SCHEDULING, why_pending(wait, snapshot, run))


def why_pending(wait: Wait, snapshot: Snapshot, run: Run) -> str:
    """The ``FailedScheduling`` Event's message: kube-scheduler's breakdown by cause, with
    counts and reasons only (no pod, Run or selector names), e.g. ``0/6 Runtime Pods
    available: 4 full (runs), 2 not ready``. The status message stays the upstream text
    (``Wait.message``); the Event is where an operator reads *why*."""
    pods = snapshot.pods
    if not pods:
        return f'0/0 Runtime Pods available: no Runtime Pod of runtime "{run.runtime}" in the namespace'
    counts: dict[str, int] = {}
    stale_after = snapshot.config.stale_after()
    for slot in pods:
        kind = unavailable_kind(slot, run.requests, snapshot.now, stale_after)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    for plugin, reason, count in wait.rejections:
        if plugin != AVAILABILITY:
            counts[reason] = counts.get(reason, 0) + count
    parts = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"0/{len(pods)} Runtime Pods available: {parts or 'none feasible'}"


def _skipped(planned: Planned, synced: Ledger, decided: Plan, now: datetime) -> Step:
    """A Run that is gone, not Pending, without a runtime, or awaiting its bind's observation."""
    if not (isinstance(decided, Skip) and decided.why == "awaiting bind observation"):
        return Step(planned, synced, None, Settled("skipped", Forget()))
    # The planner awaits a bind's observation only for a Run it found with a reservation.
    run = planned.snapshot.run
    assert run is not None
    reservation = planned.snapshot.reservation
    assert reservation is not None
    until = synced.held_until(run.namespace, run.uid)
    if until is None:
        return Step(planned, synced, None, Settled("skipped", RequeueAfter(AWAIT_BIND_REQUEUE)))
    if until > now:
        return Step(planned, synced, None, Settled("skipped", RequeueAfter(_seconds(until - now))))
    check = Verify(planned.key, run.uid, reservation.resource_version)
    return Step(planned, synced, None, Settled("skipped", RequeueAfter(AWAIT_BIND_REQUEUE)), verify=check)


def _reserve(
    planned: Planned, state: ClusterState, synced: Ledger, run: Run, bind: Bind, registry: Registry
) -> Step:
    snapshot = planned.snapshot
    reserved: Result[Ledger, ReserveConflict | AffinityChanged]
    affinity = run.affinity
    if affinity.required or affinity.anti_required:
        again = plan_cycle(take(state, synced, planned.key, snapshot.now, snapshot.config), registry)
        replanned = again.value_or(None)
        if not isinstance(replanned, Bind) or bind.pod not in replanned.ranking:
            reserved = Failure(AffinityChanged())
        else:
            reserved = ledgers.reserve(synced, state, run, bind.pod, bind.pod_uid, snapshot.now, snapshot.config)
    else:
        reserved = ledgers.reserve(synced, state, run, bind.pod, bind.pod_uid, snapshot.now, snapshot.config)
    if not is_successful(reserved):
        conflict = reserved.failure()
        # Not at once: the state that refused it may be the one the next plan sees (SPEC §3.14).
        lost = Settled("reserve_conflict", BackOff(keep_claim=True), conflict="reserve", why=conflict.reason)
        return Step(planned, synced, None, lost, conflict=conflict)
    write = _write(run, bind, snapshot.now, "bind")
    assert write is not None  # a Bind always writes
    return Step(planned, reserved.unwrap(), write, Settled("scheduled", Forget()))


# --- settling a write ----------------------------------------------------------------------------


def settle(step: Step, outcome: WriteOutcome) -> tuple[Settled, LedgerChange]:
    """SPEC §3.14, §6: what a write's outcome does to the Run's reservation and to its key.

    A bind that was written keeps its reservation until the informer shows the
    assignment; a definite failure (409, any other 4xx, gone) releases it at
    once; an ambiguous one holds it until the write's deadline (then the step
    asks for a read, :func:`confirm`). Wait and terminal writes hold no
    reservation: their failures only decide the requeue.
    """
    write = step.write
    assert write is not None, "settle is for a step that wrote"
    run, purpose = write.run, write.purpose
    if isinstance(outcome, Written):
        return _written(step, write), KEEP
    release = Release(run.namespace, run.uid) if purpose == "bind" else KEEP
    if isinstance(outcome, Gone):
        return Settled("gone", Forget(), why="run gone"), release
    if isinstance(outcome, Conflict):
        if purpose == "bind":
            return Settled("bind_conflict", BackOff(), conflict="bind", why="conflict"), release
        return Settled("write_failed", BackOff(), why="conflict"), KEEP
    if isinstance(outcome, Refused):
        why = "refused" if outcome.permanent else "failed"
        return Settled("write_failed", BackOff(outcome.retry_after or 0.0), why=why), release
    if isinstance(outcome, Ambiguous):
        if purpose != "bind":
            return Settled("write_failed", BackOff(outcome.retry_after or 0.0), why="ambiguous"), KEEP
        wait = _seconds(outcome.deadline - step.snapshot.now)
        held = Hold(run.namespace, run.uid, outcome.deadline)
        return Settled("bind_uncertain", RequeueAfter(max(wait, outcome.retry_after or 0.0)), why="ambiguous"), held
    assert_never(outcome)


def _written(step: Step, write: StatusWrite) -> Settled:
    if write.purpose == "bind":
        decided = step.plan.unwrap()
        assert isinstance(decided, Bind)
        note = EventNote("Normal", REASON_SCHEDULED, messages.assigned_message(decided.pod))
        return Settled("scheduled", Forget(), note, sync="scheduled")
    return step.settled


def confirm(check: Verify, read: ReadOutcome) -> tuple[Settled, LedgerChange]:
    """After an ambiguous bind's deadline: release only when the read proves the write never landed.

    The Run still at the planned-from version (and Pending) → the write did not
    land and can no longer: release and plan again. Gone → release and forget.
    A newer version → the write (or another) landed: keep the reservation; the
    informer's event for that version hands it off (``ledger.observe``). A read
    that failed proves nothing: keep it and try again after a back-off.
    """
    release = Release(check.key.namespace, check.uid)
    if isinstance(read, Run):
        if read.uid != check.uid:
            return Settled("released", RequeueAfter(0.0), why="replaced"), release
        if read.resource_version == check.resource_version and read.status.pending:
            return Settled("released", RequeueAfter(0.0), why="not landed"), release
        return Settled("skipped", RequeueAfter(AWAIT_BIND_REQUEUE), why="landed"), KEEP
    if isinstance(read, Gone):
        return Settled("gone", Forget(), why="run gone"), release
    return Settled("skipped", BackOff(read.retry_after or 0.0), why="read failed"), KEEP


# --- ledger changes as values ----------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Keep:
    """Leave the ledger as it is."""


@final
@dataclass(frozen=True, slots=True)
class Release:
    """Forget the Run's reservation (the bind definitely did not land)."""

    namespace: str
    uid: str


@final
@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the Run's reservation through an ambiguous outcome, to be verified at ``until``."""

    namespace: str
    uid: str
    until: datetime


LedgerChange: TypeAlias = Keep | Release | Hold
KEEP: Final = Keep()


def apply(ledger: Ledger, change: LedgerChange) -> Ledger:
    """The ledger after ``change`` (the function the effect layer swaps into its atom)."""
    if isinstance(change, Keep):
        return ledger
    if isinstance(change, Release):
        return ledgers.release(ledger, change.namespace, change.uid)
    if isinstance(change, Hold):
        return ledgers.hold(ledger, change.namespace, change.uid, change.until)
    assert_never(change)


def landing(step: Step, change: LedgerChange) -> tuple[str, Reservation | None]:
    """Where the cycle left the Run's room, once ``change`` (what it did to the ledger after
    the step) is applied: the pod its reservation sits on (``""``: none), and the reservation
    ``change`` gave back (its pod has that room again)."""
    run = step.snapshot.run
    held = None if run is None else step.ledger.get(run.namespace, run.uid)
    if held is None:
        return "", None
    if isinstance(change, Release):
        return "", held
    return held.pod, None


def _seconds(delta: timedelta) -> float:
    return max(delta.total_seconds(), 0.0)

