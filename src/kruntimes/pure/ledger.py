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

What a snapshot reads of a namespace's reservations every cycle (the
reservations by run uid, the reserved totals per pod, the pod slots with those
totals added) is derived once per ledger change and kept beside the
reservations in a :class:`NamespaceBook` — never recomputed per cycle, and left
out of equality (it is a function of the reservations, plus the state objects it
was derived from, which a reader re-checks by identity).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import attrgetter
from types import MappingProxyType
from typing import Final, Literal, TypeAlias, final

from returns.result import Failure, Result, Success

from kruntimes.pure.persistent.pdict import PDict, empty, pdict
from kruntimes.pure.state.cluster import ClusterState
from kruntimes.pure.model.objects import (
    EMPTY_RESOURCES,
    PodSlot,
    Reservation,
    Resources,
    Run,
    RunKey,
    RuntimePod,
    SchedulerConfig,
    frozen_resources,
)
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.model.resources import add, fits, plus_reserved

_RUN_UID: Final = attrgetter("run_uid")


@final
class PodReservations:
    """The reservations of one namespace on one pod name, their total, and the pod's slot with it.

    A reservation holds capacity only on the pod it was made for: the pod of that name with
    the uid it names (SPEC §1, as for a bound Run); :meth:`total_for` is what a pod of that
    name with a given uid carries. ``slot``, when set, is ``PodSlot(pod, plus_reserved(usage,
    total_for(pod.uid)))`` for the pod and actual-usage objects ``reserve`` read from the
    state: a snapshot whose state slot still holds exactly those two objects (identity) may
    use ``slot`` as is.
    """

    __slots__ = ("reservations", "total", "pod_uid", "pod", "usage", "slot")

    reservations: tuple[Reservation, ...]
    total: Mapping[str, Amount]
    """The requests summed per resource over every reservation on the name (exact; zero
    entries kept, as summed)."""
    pod_uid: str | None
    """The pod uid every one of them was made for; ``None`` when they differ."""
    pod: RuntimePod | None
    usage: Resources
    slot: PodSlot | None

    def __init__(
        self,
        reservations: tuple[Reservation, ...],
        pod: RuntimePod | None = None,
        usage: Resources = EMPTY_RESOURCES,
    ) -> None:
        self.reservations = reservations
        self.total = _total(reservations)
        uids = {r.pod_uid for r in reservations}
        self.pod_uid = uids.pop() if len(uids) == 1 else None
        self.pod, self.usage = pod, usage
        held = None if pod is None else self.total_for(pod.uid)
        self.slot = None if pod is None or not held else PodSlot(pod, plus_reserved(usage, held))

    def total_for(self, pod_uid: str) -> Mapping[str, Amount]:
        """What these reservations hold on the pod of this name with ``pod_uid``: the total of
        those made for that uid (or for none: the name alone); empty when none was."""
        common = self.pod_uid
        if common == pod_uid or common == "":
            return self.total
        if common is not None:
            return _NOTHING
        return _total(r for r in self.reservations if r.pod_uid in ("", pod_uid))


_NOTHING: Final[Mapping[str, Amount]] = MappingProxyType({})


_Check: TypeAlias = tuple[Reservation, "Run | None", RunKey]
"""A reservation, the Run object ``reserve`` validated it against (``None``: unknown)
and the reserved Run's key."""


@final
class NamespaceBook:
    """One namespace's reservations and what a snapshot reads of them (immutable).

    Equality is the reservations' only: everything else is derived. A book is not hashable.
    """

    __slots__ = ("reservations", "ordered", "checks", "pods")

    reservations: PDict[str, Reservation]
    """run uid -> reservation (never empty)."""
    ordered: tuple[Reservation, ...]
    """The reservations sorted by run uid."""
    checks: PDict[str, _Check]
    """run uid -> (reservation, the Run ``reserve`` checked, its key): while the state
    still holds that very Run object under that key, the reservation is unobserved
    (SPEC §6)."""
    pods: PDict[str, PodReservations]
    """pod -> the reservations on it."""

    def __init__(
        self,
        reservations: PDict[str, Reservation],
        ordered: tuple[Reservation, ...],
        checks: PDict[str, _Check],
        pods: PDict[str, PodReservations],
    ) -> None:
        self.reservations, self.ordered, self.checks, self.pods = reservations, ordered, checks, pods

    @staticmethod
    def of(reservations: PDict[str, Reservation]) -> NamespaceBook:
        """Derived from the reservations alone (no state objects seen)."""
        ordered = tuple(sorted(reservations.values(), key=_RUN_UID))
        by_pod: dict[str, list[Reservation]] = {}
        for reservation in ordered:
            by_pod.setdefault(reservation.pod, []).append(reservation)
        checks: PDict[str, _Check] = pdict({r.run_uid: (r, None, RunKey(r.namespace, r.run_name)) for r in ordered})
        pods = pdict({name: PodReservations(tuple(group)) for name, group in by_pod.items()})
        return NamespaceBook(reservations, ordered, checks, pods)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NamespaceBook):
            return NotImplemented
        return self.reservations == other.reservations

    def __repr__(self) -> str:
        return f"NamespaceBook({self.reservations!r})"

    def __len__(self) -> int:
        return len(self.reservations)

    def with_reservation(
        self, reservation: Reservation, run: Run, pod: RuntimePod, usage: Resources
    ) -> NamespaceBook:
        """Plus a new reservation (its uid not held yet), granted against ``run``, ``pod``
        and the pod's actual ``usage`` as the state holds them."""
        uid, name = reservation.run_uid, reservation.pod
        ordered = self.ordered
        at = bisect_left(ordered, uid, key=_RUN_UID)
        before = self.pods.get(name)
        on = (() if before is None else before.reservations) + (reservation,)
        return NamespaceBook(
            self.reservations.set(uid, reservation),
            ordered[:at] + (reservation,) + ordered[at:],
            self.checks.set(uid, (reservation, run, run.key)),
            self.pods.set(name, PodReservations(on, pod, usage)),
        )

    def without(self, uids: Iterable[str]) -> NamespaceBook | None:
        """Without these reservations (each held); ``None`` when none is left."""
        reservations, checks = self.reservations, self.checks
        names: set[str] = set()
        for uid in uids:
            names.add(reservations[uid].pod)
            reservations = reservations.discard(uid)
            checks = checks.discard(uid)
        if not reservations:
            return None
        keep = reservations.__contains__
        pods = self.pods
        for name in names:
            before = pods[name]
            on = tuple(r for r in before.reservations if keep(r.run_uid))
            if on:
                pods = pods.set(name, PodReservations(on, before.pod, before.usage))
            else:
                pods = pods.discard(name)
        ordered = tuple(r for r in self.ordered if keep(r.run_uid))
        return NamespaceBook(reservations, ordered, checks, pods)


def _total(reservations: Iterable[Reservation]) -> Mapping[str, Amount]:
    """The requests summed per resource (exact; zero entries kept, as summed)."""
    total: dict[str, Amount] = {}
    for reservation in reservations:
        for name, amount in reservation.requests.items():
            total[name] = total.get(name, 0) + amount
    return MappingProxyType(total)


def _books(by_namespace: PDict[str, PDict[str, Reservation]]) -> PDict[str, NamespaceBook]:
    return pdict({namespace: NamespaceBook.of(reservations) for namespace, reservations in by_namespace.items()})


@dataclass(frozen=True, slots=True)
class Ledger:
    """``namespace -> run uid -> Reservation``; one immutable value.

    Built with ``Ledger(by_namespace)`` (or from :data:`EMPTY_LEDGER` and the
    functions below, which keep each namespace's :class:`NamespaceBook` up to
    date instead of re-deriving it). Equality is the reservations'.
    """

    _by_namespace: PDict[str, PDict[str, Reservation]]
    _books: PDict[str, NamespaceBook] | None = field(default=None, compare=False, repr=False)
    """namespace -> its book; derived from ``_by_namespace`` when not given."""
    _holds: PDict[tuple[str, str], datetime] = field(default_factory=empty)
    """``(namespace, run uid) -> deadline`` for reservations whose bind had an ambiguous outcome
    (the write may have landed): such a reservation is kept until the informer shows the Run at
    a newer resourceVersion, or a read after the deadline shows it unchanged (SPEC §6)."""

    def __post_init__(self) -> None:
        if self._books is None:
            object.__setattr__(self, "_books", _books(self._by_namespace))

    def get(self, namespace: str, uid: str) -> Reservation | None:
        reservations = self._by_namespace.get(namespace)
        return None if reservations is None else reservations.get(uid)

    def book(self, namespace: str) -> NamespaceBook | None:
        """The namespace's reservations and what is derived from them; ``None`` when it has none."""
        books = self._books
        assert books is not None  # set by __post_init__
        return books.get(namespace)

    def in_namespace(self, namespace: str) -> tuple[Reservation, ...]:
        """The namespace's reservations, by run uid (independent of hash order)."""
        book = self.book(namespace)
        return () if book is None else book.ordered

    def held_until(self, namespace: str, uid: str) -> datetime | None:
        """When a reservation whose bind outcome is unknown may be checked by a read; ``None``
        when the reservation is not held that way (or there is none)."""
        holds = self._holds
        return holds.get((namespace, uid)) if holds else None

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
    """Why a reserve lost its compare-and-swap; the key is retried with back-off (SPEC §3.13).

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


def _with_book(
    ledger: Ledger, namespace: str, book: NamespaceBook | None, dropped: Iterable[str] = ()
) -> Ledger:
    """Replace one namespace's book (``dropped``: the run uids it no longer holds); an empty
    one is dropped so equal ledgers compare equal."""
    books = ledger._books
    assert books is not None
    holds = ledger._holds
    if holds:
        for uid in dropped:
            holds = holds.discard((namespace, uid))
    if book is not None:
        return Ledger(ledger._by_namespace.set(namespace, book.reservations), books.set(namespace, book), holds)
    return Ledger(ledger._by_namespace.discard(namespace), books.discard(namespace), holds)


def sync(ledger: Ledger, state: ClusterState, namespace: str) -> Ledger:
    """Drop the namespace's reservations the cluster state has overtaken (SPEC §6).

    A reservation goes when its Run is absent from the namespace, not Pending,
    renamed, or observed at any resourceVersion other than the one the cycle
    planned from (a newer version was written after our bind: the bind itself,
    or e.g. a reset for retry). A stale ``assignedPod`` on a Pending Run at the
    planned-from version is not an assignment (a retry reset can leave one; our
    bind overwrites it), so it does not end the reservation. Other namespaces
    are never touched.
    """
    book = ledger.book(namespace)
    if book is None:
        return ledger
    run_by_uid, run_at = state.run_by_uid, state.run
    stale = []
    for reservation, seen, key in book.checks.values():
        if seen is not None and run_at(key) is seen:
            continue  # the very Run object reserve checked, so still unobserved
        uid = reservation.run_uid
        run = run_by_uid(namespace, uid)
        if run is None or not _unobserved(reservation, run):
            stale.append(uid)
    if not stale:
        return ledger
    return _with_book(ledger, namespace, book.without(stale), stale)


def _unobserved(reservation: Reservation, run: Run) -> bool:
    """SPEC §6, "still unobserved": the state shows the Run exactly as the cycle planned from it."""
    return (
        run.resource_version == reservation.resource_version
        and run.name == reservation.run_name
        and run.status.pending
    )


def observe(ledger: Ledger, run: Run) -> Ledger:
    """SPEC §3.1: drop this Run's reservation once the Run is seen written after the version
    the bind was planned from (assigned, left Pending, or reset), as ``sync`` would."""
    reservation = ledger.get(run.namespace, run.uid)
    if reservation is None or _unobserved(reservation, run):
        return ledger
    return release(ledger, run.namespace, run.uid)


def release(ledger: Ledger, namespace: str, uid: str) -> Ledger:
    """Forget a reservation (its bind failed); the same ledger when there is none."""
    book = ledger.book(namespace)
    if book is None or uid not in book.reservations:
        return ledger
    return _with_book(ledger, namespace, book.without((uid,)), (uid,))


def without_namespace(ledger: Ledger, namespace: str) -> Ledger:
    """Forget every reservation of ``namespace`` (a sharded replica that takes the namespace
    over rebuilds its usage from persisted assignments only, SPEC §6); the same ledger when
    it holds none."""
    book = ledger.book(namespace)
    if book is None:
        return ledger
    return _with_book(ledger, namespace, None, tuple(book.reservations))


def hold(ledger: Ledger, namespace: str, uid: str, until: datetime) -> Ledger:
    """Keep the Run's reservation through an ambiguous bind outcome, to be checked by a read
    at ``until`` (SPEC §6); the same ledger when there is no such reservation."""
    if ledger.get(namespace, uid) is None:
        return ledger
    return replace(ledger, _holds=ledger._holds.set((namespace, uid), until))


def reserved_usage(ledger: Ledger, namespace: str, pod: str, pod_uid: str | None = None) -> Resources:
    """The sum of the requests reserved on ``pod`` (as the ledger holds it); no zero entries.
    With ``pod_uid``, only what holds the pod of that name with that uid
    (:meth:`PodReservations.total_for`)."""
    book = ledger.book(namespace)
    on_pod = None if book is None else book.pods.get(pod)
    if on_pod is None:
        return EMPTY_RESOURCES
    total = on_pod.total if pod_uid is None else on_pod.total_for(pod_uid)
    kept = {k: v for k, v in total.items() if v}
    return frozen_resources(kept) if kept else EMPTY_RESOURCES


def reserved_totals(ledger: Ledger, namespace: str) -> dict[str, dict[str, Amount]]:
    """``pod -> resource -> reserved amount`` for the namespace, as fresh plain dicts
    (zero entries possible): the cheap form for callers that add it to usage at once."""
    book = ledger.book(namespace)
    if book is None:
        return {}
    return {name: dict(on_pod.total) for name, on_pod in book.pods.items()}


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

    ``ledger`` is synced for the Run's namespace (the step syncs it against
    ``state`` first; an unsynced one only errs on the safe side: an overtaken
    reservation still counts). Grants only if the Run is still Pending at
    the version planned from (``run.resource_version``; a stale ``assignedPod``
    does not count, SPEC §1), holds no
    reservation yet, and the pod still exists with ``pod_uid``, is available at
    ``now`` and fits actual usage + every reservation on it + the Run's
    requests (as each counts on that very pod: a Run or a reservation bound to a
    former pod of the name holds nothing on it). Re-checking here, not trusting the snapshot, is what keeps two
    workers from overcommitting one pod.
    """
    namespace = run.namespace
    if ledger.get(namespace, run.uid) is not None:
        return _conflict("AlreadyReserved")
    if not run.status.pending:
        return _conflict("RunChanged")
    latest = state.run_by_uid(namespace, run.uid)
    if latest is None or latest.name != run.name or latest.resource_version != run.resource_version or not latest.status.pending:
        return _conflict("RunChanged")
    target = state.pod(namespace, pod)
    if target is None or target.runtime != run.runtime:
        return _conflict("PodGone")
    if target.uid != pod_uid:
        return _conflict("PodReplaced")
    if not target.available(now, config.stale_after()):
        return _conflict("PodUnavailable")
    actual = state.usage(namespace, pod)
    usage = add(actual, reserved_usage(ledger, namespace, pod, pod_uid))
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
    book = ledger.book(namespace) or _EMPTY_BOOK
    return Success(_with_book(ledger, namespace, book.with_reservation(reservation, latest, target, actual)))


_EMPTY_BOOK: Final = NamespaceBook(empty(), (), empty(), empty())
