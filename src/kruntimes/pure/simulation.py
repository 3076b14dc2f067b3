"""What-if scheduling: the cycle loop over persistent values.

:func:`simulate` runs one scheduling cycle per key of a decoded
:class:`~kruntimes.pure.readers.scenario.Scenario`, exactly as a worker would,
on ``ClusterState``/``Ledger`` values: a "what if" is just keeping or dropping a
value, since every value is persistent.

This is a purely computational module with no side effects;
``kruntimes.commands.simulate`` reads the file, prints and appends the cycle log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from kruntimes.pure import ledger, queueing, status
from kruntimes.pure.persistent.pdict import pdict
from kruntimes.pure.state import cluster
from kruntimes.pure.state.cluster import ClusterState, Event
from kruntimes.pure.readers.cyclelog import CycleRecord
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import Ledger
from kruntimes.pure.model.objects import Reservation, RunKey
from kruntimes.pure.model.objects import Object
from kruntimes.pure.readers.scenario import Scenario
from kruntimes.pure.step import Step, Written, apply, settle, transact


# --- the what-if loop ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Simulation:
    now: datetime
    steps: tuple[Step, ...]
    """One per cycle, in order: the plan, and for a refused reserve its ``conflict``."""
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


_MAX_VERSION_DIGITS: Final = 20
"""An etcd revision is a uint64: at most 20 digits. A longer version (no server issues one) is
not counted, so that no text reaches ``int()`` with more digits than Python converts."""


def _next_version(objects: Sequence[Object]) -> int:
    versions = [
        int(o.resource_version)
        for o in objects
        if o.resource_version.isascii() and o.resource_version.isdigit() and len(o.resource_version) <= _MAX_VERSION_DIGITS
    ]
    return max(versions, default=0) + 1


def simulate(scenario: Scenario, registry: Registry = DEFAULT_REGISTRY) -> Simulation:
    """Run the scenario's cycles in order; each sees every earlier cycle's writes.

    Per key, exactly the scheduler's transaction (``step.transact``: observe,
    sync, snapshot, plan, reserve with the required-affinity re-check). The
    step's status write is then applied as a successful write the informer
    has observed (a fresh, increasing resourceVersion) and settled as one
    (``step.settle``), so a reservation hands off to actual usage. ``Delay``,
    ``Skip`` and a ``CycleError`` write nothing; a refused reserve writes
    nothing and is reported on the outcome (``conflict``).
    """
    now, config = scenario.now, scenario.config
    state = cluster.from_objects(scenario.objects)
    book = initial_ledger(scenario.reservations)
    version = _next_version(scenario.objects)
    keys = scenario.cycles if scenario.cycles is not None else default_cycles(state)
    weights = registry.weights
    filters = tuple(entry.name for entry in registry.filters)
    steps: list[Step] = []
    assignments: list[tuple[RunKey, str]] = []
    records: list[CycleRecord] = []
    for key in keys:
        step = transact(state, book, key, now, config, registry)
        book = step.ledger
        records.append(CycleRecord(step.snapshot, weights, step.plan, filters))
        steps.append(step)
        write = step.write
        if write is None:
            continue
        written = status.applied(write.run, write.patch, str(version))
        version += 1
        _, change = settle(step, Written(written.resource_version))
        book = apply(book, change)
        if write.purpose == "bind":
            assignments.append((key, write.patch.assigned_pod))
        state = cluster.apply(state, Event("MODIFIED", written))
        book = ledger.observe(book, written)
    return Simulation(now, tuple(steps), tuple(assignments), tuple(records), state, book)
