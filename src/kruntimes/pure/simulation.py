"""What-if scheduling: the cycle loop over persistent values.

:func:`simulate` runs one scheduling cycle per key of a decoded
:class:`~kruntimes.pure.readers.scenario.Scenario`, exactly as a worker would,
on ``ClusterState``/``Ledger`` values: a "what if" is just keeping or dropping a
value (DESIGN "Checkpoint/rollback for free").

This is a purely computational module with no side effects;
``kruntimes.commands.simulate`` reads the file, prints and appends the cycle log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from returns.pipeline import is_successful
from returns.result import Result

from kruntimes.pure import ledger, queueing, snapshot, status
from kruntimes.pure.persistent.pdict import pdict
from kruntimes.pure.state import cluster
from kruntimes.pure.state.cluster import ClusterState, Event
from kruntimes.pure.readers.cyclelog import CycleRecord
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import Ledger, ReserveConflict
from kruntimes.pure.model.objects import Reservation, RunKey
from kruntimes.pure.model.plan import Bind, CycleError, Delay, Plan, Skip
from kruntimes.pure.readers.scenario import Object, Scenario


# --- the what-if loop ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CycleOutcome:
    """One simulated cycle: the plan, and when its reserve lost the compare-and-swap, why."""

    key: RunKey
    plan: Result[Plan, CycleError]
    conflict: ReserveConflict | None = None
    """Set only for a ``Bind`` whose reservation was refused: nothing was written (SPEC §3.13)."""


@dataclass(frozen=True, slots=True)
class Simulation:
    now: datetime
    outcomes: tuple[CycleOutcome, ...]
    assignments: tuple[tuple[RunKey, str], ...]
    """Every Run this simulation bound, in cycle order, with its pod."""
    records: tuple[CycleRecord, ...]
    """One per cycle, in order: what ``kruntimes replay`` re-plans."""
    state: ClusterState
    """The cluster after every write, as the informer would show it."""
    ledger: Ledger


def initial_ledger(reservations: Sequence[Reservation]) -> Ledger:
    """A ledger holding exactly ``reservations`` (keyed by namespace and run uid)."""
    by_namespace: dict[str, dict[str, Reservation]] = {}
    for reservation in reservations:
        by_namespace.setdefault(reservation.namespace, {})[reservation.run_uid] = reservation
    return Ledger(pdict({namespace: pdict(items) for namespace, items in by_namespace.items()}))


def default_cycles(state: ClusterState) -> tuple[RunKey, ...]:
    """Every Pending Run once, oldest first: creationTimestamp, namespace, name (SPEC §8, §12)."""
    return queueing.initial_order(state.runs())


def _next_version(objects: Sequence[Object]) -> int:
    versions = [int(o.resource_version) for o in objects if o.resource_version.isdecimal()]
    return max(versions, default=0) + 1


def simulate(scenario: Scenario, registry: Registry = DEFAULT_REGISTRY) -> Simulation:
    """Run the scenario's cycles in order; each sees every earlier cycle's writes.

    Per key, as a worker does: observe the Run (§3.1) and sync its namespace
    (§6), take the snapshot, plan. A ``Bind`` is reserved (``ledger.reserve``),
    then its status write is applied as a successful write the informer has
    observed (a fresh, increasing resourceVersion), so the reservation hands
    off to actual usage; ``Wait``/``Fail``/``Cancel`` statuses are applied the
    same way when ``status_for`` has something to write. ``Delay``, ``Skip``
    and a ``CycleError`` write nothing. A refused reserve writes nothing and is
    reported on the outcome (``conflict``).
    """
    now, config = scenario.now, scenario.config
    state = cluster.from_objects(scenario.objects)
    book = initial_ledger(scenario.reservations)
    version = _next_version(scenario.objects)
    keys = scenario.cycles if scenario.cycles is not None else default_cycles(state)
    weights = registry.weights
    filters = tuple(entry.name for entry in registry.filters)
    outcomes: list[CycleOutcome] = []
    assignments: list[tuple[RunKey, str]] = []
    records: list[CycleRecord] = []
    for key in keys:
        run = state.run(key)
        if run is not None:
            book = ledger.observe(book, run)
        book = ledger.sync(book, state, key.namespace)
        snap = snapshot.take(state, book, key, now, config)
        plan = plan_cycle(snap, registry)
        records.append(CycleRecord(snap, weights, plan, filters))
        if run is None or not is_successful(plan):
            outcomes.append(CycleOutcome(key, plan))
            continue
        decided = plan.unwrap()
        if isinstance(decided, (Delay, Skip)):
            outcomes.append(CycleOutcome(key, plan))
            continue
        if isinstance(decided, Bind):
            reserved = ledger.reserve(book, state, run, decided.pod, decided.pod_uid, now, config)
            if not is_successful(reserved):
                outcomes.append(CycleOutcome(key, plan, reserved.failure()))
                continue
            book = reserved.unwrap()
            assignments.append((key, decided.pod))
        outcomes.append(CycleOutcome(key, plan))
        patch = status.status_for(decided, run, now)
        if patch is None:
            continue
        written = status.applied(run, patch, str(version))
        version += 1
        state = cluster.apply(state, Event("MODIFIED", written))
        book = ledger.observe(book, written)
    return Simulation(now, tuple(outcomes), tuple(assignments), tuple(records), state, book)
