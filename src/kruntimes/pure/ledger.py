"""The assumed-reservation ledger: capacity held for binds the informer has not shown yet.

Rule: a reservation lives exactly as long as the cluster state cannot yet
account for it, and is keyed by ``(namespace, run uid)``, so syncing one
namespace never touches another's reservations (SPEC §6, §11). Once the
informer shows the Run assigned (or anything else written after our bind), the
Run's actual usage takes over and the reservation goes: capacity is never
counted twice and never leaked.

Every function returns a new value (the same one when nothing changes, so a
compare-and-swap is cheap); the effect layer holds the current ledger in one
atom and swaps these functions in. This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, TypeAlias

from returns.result import Failure, Result, Success

from kruntimes.pure._pdict import PDict, empty
from kruntimes.pure.cluster import ClusterState
from kruntimes.pure.model import EMPTY_RESOURCES, Reservation, Resources, Run, SchedulerConfig, frozen_resources
from kruntimes.pure.quantity import Amount
from kruntimes.pure.resources import add, fits


@dataclass(frozen=True, slots=True)
class Ledger:
    """``namespace -> run uid -> Reservation``; one immutable value."""

    _by_namespace: PDict[str, PDict[str, Reservation]]

    def get(self, namespace: str, uid: str) -> Reservation | None:
        reservations = self._by_namespace.get(namespace)
        return None if reservations is None else reservations.get(uid)

    def in_namespace(self, namespace: str) -> tuple[Reservation, ...]:
        """The namespace's reservations, by run uid (independent of hash order)."""
        reservations = self._by_namespace.get(namespace)
        if reservations is None:
            return ()
        return tuple(sorted(reservations.values(), key=lambda r: r.run_uid))

    def namespaces(self) -> tuple[str, ...]:
        """Namespaces holding at least one reservation, sorted."""
        return tuple(sorted(self._by_namespace))

    def __len__(self) -> int:
        return sum(len(reservations) for reservations in self._by_namespace.values())


EMPTY_LEDGER: Final = Ledger(empty())

ReserveConflictReason: TypeAlias = Literal[
    "RunChanged",
    "AlreadyReserved",
    "PodGone",
    "PodReplaced",
    "PodUnavailable",
    "NoRoom",
]


@dataclass(frozen=True, slots=True)
class ReserveConflict:
    """Why a reserve lost its compare-and-swap; the cycle requeues at once (SPEC §3.13).

    The message is fixed per reason: no pod, run or resource names.
    """

    message: str
    reason: ReserveConflictReason


_CONFLICTS: Final[Mapping[ReserveConflictReason, str]] = {
    "RunChanged": "the run is gone or no longer pending at the version the cycle planned from",
    "AlreadyReserved": "the run already holds a reservation",
    "PodGone": "the chosen runtime pod no longer exists",
    "PodReplaced": "the chosen runtime pod was replaced (uid changed)",
    "PodUnavailable": "the chosen runtime pod is no longer available",
    "NoRoom": "the chosen runtime pod no longer has room for the run's requests",
}


def _conflict(reason: ReserveConflictReason) -> Result[Ledger, ReserveConflict]:
    return Failure(ReserveConflict(_CONFLICTS[reason], reason))


def _with_namespace(ledger: Ledger, namespace: str, reservations: PDict[str, Reservation]) -> Ledger:
    """Replace one namespace's map; an empty one is dropped so equal ledgers compare equal."""
    if reservations:
        return Ledger(ledger._by_namespace.set(namespace, reservations))
    return Ledger(ledger._by_namespace.discard(namespace))


def _still_unobserved(reservation: Reservation, run: Run | None) -> bool:
    """SPEC §6: the informer still shows the Run exactly as the cycle planned from it."""
    return (
        run is not None
        and run.name == reservation.run_name
        and run.status.pending
        and not run.status.assigned_pod
        and run.resource_version == reservation.resource_version
    )


def sync(ledger: Ledger, state: ClusterState, namespace: str) -> Ledger:
    """Drop the namespace's reservations the cluster state has overtaken (SPEC §6).

    A reservation goes when its Run is absent from the namespace, not Pending,
    assigned, renamed, or observed at any resourceVersion other than the one
    the cycle planned from (a newer Pending version was written after our bind,
    e.g. a reset for retry). Other namespaces are never touched.
    """
    reservations = ledger._by_namespace.get(namespace)
    if reservations is None:
        return ledger
    run_by_uid = state.run_by_uid
    stale = []
    for uid, reservation in reservations.items():
        # _still_unobserved, inlined: this runs for every reservation of every cycle.
        run = run_by_uid(namespace, uid)
        if (
            run is None
            or run.resource_version != reservation.resource_version
            or run.name != reservation.run_name
            or run.status.assigned_pod
            or not run.status.pending
        ):
            stale.append(uid)
    if not stale:
        return ledger
    for uid in stale:
        reservations = reservations.discard(uid)
    return _with_namespace(ledger, namespace, reservations)


def observe(ledger: Ledger, run: Run) -> Ledger:
    """SPEC §3.1: drop this Run's reservation once it shows an assignment or left Pending."""
    reservation = ledger.get(run.namespace, run.uid)
    if reservation is None or (run.status.pending and not run.status.assigned_pod):
        return ledger
    return release(ledger, run.namespace, run.uid)


def release(ledger: Ledger, namespace: str, uid: str) -> Ledger:
    """Forget a reservation (its bind failed); the same ledger when there is none."""
    reservations = ledger._by_namespace.get(namespace)
    if reservations is None or uid not in reservations:
        return ledger
    return _with_namespace(ledger, namespace, reservations.discard(uid))


def reserved_usage(ledger: Ledger, namespace: str, pod: str) -> Resources:
    """The sum of the requests reserved on ``pod`` (as the ledger holds it).

    One pass that adds only that pod's reservations: ``reserve`` calls this inside the
    ledger's compare-and-swap, so it must not build totals for every other pod.
    """
    reservations = ledger._by_namespace.get(namespace)
    if reservations is None:
        return EMPTY_RESOURCES
    total: dict[str, Amount] = {}
    for reservation in reservations.values():
        if reservation.pod == pod:
            for name, amount in reservation.requests.items():
                total[name] = total.get(name, 0) + amount
    return frozen_resources({k: v for k, v in total.items() if v}) if total else EMPTY_RESOURCES


def reserved_totals(ledger: Ledger, namespace: str) -> dict[str, dict[str, Amount]]:
    """``pod -> resource -> reserved amount`` for the namespace, as fresh plain dicts
    (zero entries possible): the cheap form for callers that add it to usage at once."""
    reservations = ledger._by_namespace.get(namespace)
    totals: dict[str, dict[str, Amount]] = {}
    if reservations is None:
        return totals
    for reservation in reservations.values():
        total = totals.get(reservation.pod)
        if total is None:
            totals[reservation.pod] = dict(reservation.requests)
        else:
            for name, amount in reservation.requests.items():
                total[name] = total.get(name, 0) + amount
    return totals


def reserved_by_pod(ledger: Ledger, namespace: str) -> Mapping[str, Resources]:
    """``pod -> reserved requests`` for the namespace, in one pass over its reservations."""
    totals = reserved_totals(ledger, namespace)
    return {pod: frozen_resources({k: v for k, v in total.items() if v}) for pod, total in totals.items()}


def reserve(
    ledger: Ledger,
    state: ClusterState,
    run: Run,
    pod: str,
    pod_uid: str,
    now: datetime,
    config: SchedulerConfig,
) -> Result[Ledger, ReserveConflict]:
    """One compare-and-swap step against the *latest* state and ledger (SPEC §6).

    Syncs the Run's namespace, then grants only if the Run is still Pending and
    unassigned at the version planned from (``run.resource_version``), holds no
    reservation yet, and the pod still exists with ``pod_uid``, is available at
    ``now`` and fits actual usage + every reservation on it + the Run's
    requests. Re-checking here, not trusting the snapshot, is what keeps two
    workers from overcommitting one pod.
    """
    namespace = run.namespace
    synced = sync(ledger, state, namespace)
    if synced.get(namespace, run.uid) is not None:
        return _conflict("AlreadyReserved")
    if not run.status.pending or run.status.assigned_pod:
        return _conflict("RunChanged")
    latest = state.run_by_uid(namespace, run.uid)
    if latest is None or (
        latest.name != run.name
        or latest.resource_version != run.resource_version
        or not latest.status.pending
        or latest.status.assigned_pod
    ):
        return _conflict("RunChanged")
    target = state.pod(namespace, pod)
    if target is None or target.runtime != run.runtime:
        return _conflict("PodGone")
    if target.uid != pod_uid:
        return _conflict("PodReplaced")
    if not target.available(now, config.stale_after()):
        return _conflict("PodUnavailable")
    usage = add(state.usage(namespace, pod), reserved_usage(synced, namespace, pod))
    if not fits(target.capacity, usage, run.requests):
        return _conflict("NoRoom")
    reservation = Reservation(
        namespace=namespace,
        run_uid=run.uid,
        run_name=run.name,
        resource_version=run.resource_version,
        pod=pod,
        pod_uid=pod_uid,
        requests=run.requests,
        labels=run.labels,
    )
    reservations = synced._by_namespace.get(namespace) or _EMPTY_NAMESPACE
    return Success(_with_namespace(synced, namespace, reservations.set(run.uid, reservation)))


_EMPTY_NAMESPACE: Final[PDict[str, Reservation]] = empty()
