"""The parking lot: Pending Runs whose last cycle ended in Wait, kept out of the queue until an
event can help them (SPEC §8; kube-scheduler's unschedulable pool, with its queueing hints).

A parked Run sits in its group — (namespace, runtime, ``queueing.ParkReason``) — in queue
order, so the runner can walk a group head first when a pod has room
(``queueing.admit`` decides who fits). It leaves the lot when it is activated: by its own
event, by an admission, by a change to what it waits on, or by the safety net. A Run parked
``unfit`` moves to ``capacity`` when a pod that could hold it empty appears or grows
(``fit``): releases walk ``capacity``, never ``unfit``.

Two rules keep wakeups from being lost:

- **In-flight events.** An event for a Run's group that arrives while the Run's cycle is
  running (after ``started``, before ``park``) would find it not yet parked. ``park`` sees
  that the group's event counter moved since ``started`` and refuses, so the caller
  queues the Run again at once instead of parking it.
- **The safety net.** A Run parked for ``safety_net`` seconds (``RECHECK_SECONDS``) whose group has admitted
  nobody for that long is activated anyway (``due``). A group that is being served —
  its Runs admitted one after the other as capacity frees — needs no re-planning of the
  Runs behind: their turn comes in order; re-planning them would only end in Wait again.

A Run parked *blind* — by a new leader without a plan (its backlog), or after a cycle that
found no pod available while the Run has a constraint (``queueing.parked_blind``) — is
planned again as soon as a pod with room refuses it (``plan_blind``): its place in line
would never place it, and its waiting status was not written against the pods that are
there now (a new leader's backlog has none of this term at all).

Claims: a Run admitted for a pod holds a claim on that pod's room until its cycle ends, so
a second event for the same pod does not admit a second Run for the same room. Two cases
keep the claims on the rooms the Runs in flight will actually need:

- a cycle places its Run on whichever pod ranks first, not always the one it was admitted
  for; when it takes room another admitted Run counted on, that Run's claim moves to the
  room it left (``placed``);
- a cycle whose reservation lost the race to another worker's is queued again (after the
  first, 5 ms back-off step) and keeps its claim until that retry ends.

Each of these rules is a pure function of ``pure.parking`` (tested as tables in
tests/pure/test_parking.py); this module keeps the parked Runs, the claims and the event
counters they are asked about. Thread-safe: informer threads signal and workers park, under
one lock. Time is injected.
"""

from __future__ import annotations

import heapq
import threading
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from dataclasses import dataclass
from typing import Final, TypeAlias, final

from kruntimes.pure.model.objects import EMPTY_RESOURCES, Resources, RunKey
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.model.resources import add
from kruntimes.pure.parking import RECHECK_SECONDS, Slot, displaced, now_fits, overdue, refused, served
from kruntimes.pure.queueing import NO_TIME_US, ParkReason, SortKey

STAMP_RESOLUTION: Final = 0.05
"""Runs parked within this many seconds of each other share one parking time (one float object
for a whole backlog parked at once; the safety net counts in tens of seconds)."""

LINE_CHUNK: Final = 512
"""Keys per chunk of a group's line (at most; a fuller chunk splits in two)."""

Group: TypeAlias = tuple[str, str, ParkReason]
_Shape: TypeAlias = tuple[tuple[str, Amount], ...]
"""A request, hashable (``Resources`` is a read-only mapping, sorted by name)."""
Rank: TypeAlias = Callable[[RunKey], tuple[SortKey, RunKey]]


@dataclass(slots=True)
class _Parked:
    group: Group
    order: SortKey | int
    """The Run's place in queue order; only its first part (the creation time) when the rest is
    the Run's own key, as the built-in policies make it: a backlog keeps no tuple per Run."""
    since: float

    def rank(self, key: RunKey) -> SortKey:
        order = self.order
        return (order, key.namespace, key.name) if isinstance(order, int) else order


@final
class _Blind(_Parked):
    """Parked without a plan that saw an available pod (a type, not a field: a backlog of 50,000
    pays nothing for it)."""

    __slots__ = ()


@final
class _Keys(set[RunKey]):
    """The Runs parked ``unfit`` with one request, and that request."""

    __slots__ = ("shape",)

    def __init__(self, shape: _Shape) -> None:
        super().__init__()
        self.shape = shape


@final
class _Line:
    """One group's parked keys in queue order, as a list of sorted chunks of at most
    :data:`LINE_CHUNK` keys.

    Admission takes Runs from the head of a line that may hold a whole backlog: as one Python
    list, every Run taken from the head moved every key behind it (400 KB at 50,000 parked
    Runs, on each admission, through the cache the rest of the scheduler runs in). In chunks,
    an insertion or removal moves at most a chunk's keys, and a chunk emptied at the head
    leaves a list with one entry per chunk. A key's place is ``rank(key)``, computed when
    needed from the lot's own record of the Run: the line stores nothing per key but the key.
    (sortedcontainers' ``SortedKeyList`` is this structure, but it stores each key's rank, a
    tuple per parked Run on top of the lot's record.)
    """

    __slots__ = ("_chunks", "_len", "_most")

    def __init__(self, most: int = LINE_CHUNK) -> None:
        self._chunks: list[list[RunKey]] = []
        self._len = 0
        self._most = most

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[RunKey]:
        return chain.from_iterable(self._chunks)

    def head(self, limit: int) -> list[RunKey]:
        """The first ``limit`` keys (a copy)."""
        out: list[RunKey] = []
        for chunk in self._chunks:
            out.extend(chunk[: limit - len(out)])
            if len(out) >= limit:
                break
        return out

    def _chunk_of(self, place: tuple[SortKey, RunKey], rank: Rank) -> int:
        """The chunk ``place`` belongs in: the last one whose first key ranks at or before it (0 when none does)."""
        return max(bisect_right(self._chunks, place, key=lambda chunk: rank(chunk[0])) - 1, 0)

    def insert(self, key: RunKey, rank: Rank) -> None:
        chunks = self._chunks
        self._len += 1
        if not chunks:
            chunks.append([key])
            return
        place = rank(key)
        last = chunks[-1]
        if rank(last[-1]) < place:  # the usual case: a Run newer than every parked one
            j, chunk = len(chunks) - 1, last
            chunk.append(key)
        else:
            j = self._chunk_of(place, rank)
            chunk = chunks[j]
            insort(chunk, key, key=rank)
        if len(chunk) > self._most:
            half = len(chunk) // 2
            chunks.insert(j + 1, chunk[half:])
            del chunk[half:]

    def remove(self, key: RunKey, rank: Rank) -> None:
        """Take ``key`` out (it must be in the line, with its rank unchanged since it was inserted)."""
        chunks = self._chunks
        first = chunks[0]
        if first[0] == key:  # the usual case: admitted from the head
            j, i, chunk = 0, 0, first
        else:
            place = rank(key)
            j = self._chunk_of(place, rank)
            chunk = chunks[j]
            i = bisect_left(chunk, place, key=rank)
        del chunk[i]
        self._len -= 1
        if not chunk:
            del chunks[j]


@final
class Parking:
    """Parked Run keys by group, in queue order; the claims on pods; the in-flight counters."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        safety_net: float = RECHECK_SECONDS,
        line_chunk: int = LINE_CHUNK,
    ) -> None:
        self._clock = clock
        self._line_chunk = line_chunk
        self._safety_net = safety_net
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str], dict[ParkReason, _Line]] = {}
        """(namespace, runtime) -> reason -> the parked keys, sorted by :meth:`_rank` (their
        orders live once, in ``_where``: a backlog of 50,000 is 50,000 entries, not 100,000)."""
        self._where: dict[RunKey, _Parked] = {}
        self._canonical: dict[Group, Group] = {}
        """One group tuple shared by all of its parked Runs."""
        self._admitted_at: dict[tuple[str, str], float] = {}
        self._seq = 0
        self._touched: dict[tuple[str, str], int] = {}
        """(namespace, runtime) -> the counter at its last event."""
        self._touched_ns: dict[str, int] = {}
        self._started: dict[RunKey, int] = {}
        self._claims: dict[Slot, dict[RunKey, Resources]] = {}
        self._claim_of: dict[RunKey, Slot] = {}
        self._stamp = float("-inf")
        self._unfit: dict[tuple[str, str], dict[_Shape, _Keys]] = {}
        """(namespace, runtime) -> request -> the Runs parked ``unfit`` with it: a pod that appears
        or grows takes out of ``unfit`` the requests it can hold, not every Run (see :meth:`fit`)."""
        self._shape_of: dict[RunKey, _Shape] = {}

    # --- a Run's cycle ----------------------------------------------------------------

    def started(self, key: RunKey) -> None:
        """A worker took ``key``: remember the event counter, for ``park``."""
        with self._lock:
            self._started[key] = self._seq
            self._unpark_locked(key)

    def park(
        self,
        key: RunKey,
        runtime: str,
        reason: ParkReason,
        order: SortKey,
        *,
        blind: bool = False,
        requests: Resources = EMPTY_RESOURCES,
    ) -> bool:
        """Park a Run whose cycle ended in Wait; ``False`` (not parked) when an event for its
        namespace and runtime arrived during that cycle: queue it again now instead.
        ``blind``: see :meth:`plan_blind`; ``requests``: the Run's, read for ``unfit`` (:meth:`fit`)."""
        namespace = key.namespace
        with self._lock:
            started = self._started.pop(key, -1)
            if refused(started, self._touched.get((namespace, runtime), -1), self._touched_ns.get(namespace, -1), reason):
                return False
            self._park_locked(key, (namespace, runtime, reason), order, _Blind if blind else _Parked)
            if reason == "unfit":
                shape = tuple(requests.items())
                by_shape = self._unfit.setdefault((namespace, runtime), {})
                keys = by_shape.get(shape)
                if keys is None:
                    keys = by_shape[shape] = _Keys(shape)
                keys.add(key)
                self._shape_of[key] = keys.shape  # one tuple per request, not one per Run
            return True

    def fit(self, namespace: str, runtime: str, capacity: Resources) -> int:
        """A pod of (namespace, runtime) with ``capacity`` appeared or grew: the Runs parked
        ``unfit`` that it could hold empty wait for room now, not for a pod. They move to the
        ``capacity`` group, keeping their place in line, their parking time and blindness, so
        the releases that follow admit them in queue order with the Runs parked there (left in
        ``unfit``, those this pod's admission had no room for would be walked by the next pod
        that appears, not by a release). Costs the requests parked ``unfit`` plus the Runs
        moved, each moved once; how many moved."""
        moved = 0
        with self._lock:
            by_shape = self._unfit.get((namespace, runtime))
            if by_shape is None:
                return 0
            for shape in [shape for shape in by_shape if now_fits(capacity, dict(shape))]:
                for key in list(by_shape[shape]):  # (unparking drops it from the index)
                    parked = self._where[key]
                    self._park_locked(key, (namespace, runtime, "capacity"), parked.rank(key), type(parked))
                    self._where[key].since = parked.since
                    moved += 1
            return moved

    def park_unplanned(self, key: RunKey, runtime: str, order: SortKey) -> None:
        """Park a Run no cycle has looked at yet (a new leader's backlog), as waiting for room
        (and blind: see :meth:`plan_blind`)."""
        with self._lock:
            self._park_locked(key, (key.namespace, runtime, "capacity"), order, _Blind)

    def plan_blind(self, keys: Iterable[RunKey]) -> list[RunKey]:
        """Take out of the lot those of ``keys`` that were parked blind (the caller queues them):
        a pod with room refused them, so their turn in line will not place them, and only a
        plan gives them a true waiting status. Not an admission: the group's safety-net clock
        is left alone."""
        out: list[RunKey] = []
        with self._lock:
            for key in keys:
                if isinstance(self._where.get(key), _Blind) and self._unpark_locked(key):
                    out.append(key)
        return out

    def placed(self, key: RunKey, pod: str) -> None:
        """``key``'s cycle reserved room on ``pod``. When it was admitted for another pod, it took
        room that a Run admitted for ``pod`` counted on: that Run's claim moves to the pod ``key``
        leaves, so the room there is not admitted to a third Run while that one is in flight."""
        with self._lock:
            mine = self._claim_of.get(key)
            target = (key.namespace, pod)
            others = self._claims.get(target)
            moved = displaced(key, mine, target, others or ())
            if mine is None or others is None or moved is None:
                return
            requests = others.pop(moved)
            if not others:
                del self._claims[target]
            self._claims.setdefault(mine, {})[moved] = requests
            self._claim_of[moved] = mine

    def finished(self, key: RunKey) -> Slot | None:
        """``key``'s cycle ended (whatever it decided): drop its claim; the pod it was admitted
        for, if any (its remaining room may admit the next Run)."""
        with self._lock:
            self._started.pop(key, None)
            slot = self._claim_of.pop(key, None)
            if slot is not None:
                claims = self._claims.get(slot)
                if claims is not None:
                    claims.pop(key, None)
                    if not claims:
                        del self._claims[slot]
            return slot

    # --- events -------------------------------------------------------------------------

    def touch(self, namespace: str, runtime: str | None = None) -> None:
        """Something a waiting Run of (namespace, runtime) — or, without a runtime, any waiting
        on affinity in the namespace — reads has changed (for the in-flight rule)."""
        with self._lock:
            self._seq += 1
            if runtime is None:
                self._touched_ns[namespace] = self._seq
            else:
                self._touched[(namespace, runtime)] = self._seq

    def parked(
        self, namespace: str, runtime: str, reasons: Iterable[ParkReason], limit: int
    ) -> tuple[RunKey, ...]:
        """The first ``limit`` parked keys of these groups, merged in queue order (a copy: safe
        to walk while other threads park and activate). Costs O(limit), whatever the backlog."""
        with self._lock:
            group = self._groups.get((namespace, runtime))
            if group is None:
                return ()
            heads = [items.head(limit) for reason in reasons if (items := group.get(reason))]
            if len(heads) <= 1:
                return tuple(heads[0]) if heads else ()
            return tuple(islice(heapq.merge(*heads, key=self._rank), limit))

    def parked_in(self, namespace: str, reason: ParkReason) -> tuple[RunKey, ...]:
        """Every parked key of ``namespace`` with ``reason``, whatever its runtime (any order)."""
        with self._lock:
            return tuple(
                key
                for (ns, _), by_reason in self._groups.items()
                if ns == namespace
                for key in by_reason.get(reason, ())
            )

    def claimed(self, namespace: str, pod: str) -> Resources:
        """The requests of the Runs admitted for this pod whose cycles have not ended."""
        with self._lock:
            claims = self._claims.get((namespace, pod))
            total = EMPTY_RESOURCES
            for requests in (claims or {}).values():
                total = add(total, requests)
            return total

    def activate(self, keys: Iterable[RunKey], *, runtime: str = "", pod: str = "", requests: Callable[[RunKey], Resources] | None = None) -> list[RunKey]:
        """Take ``keys`` out of the lot (those still parked); with ``pod``, each holds a claim on
        it until its cycle ends. Returns the keys that were parked (the ones to queue)."""
        out: list[RunKey] = []
        with self._lock:
            for key in keys:
                was = self._where.get(key)
                if not self._unpark_locked(key):
                    continue
                out.append(key)
                if was is not None:
                    self._admitted_at[(was.group[0], was.group[1])] = self._clock()
                if pod:
                    slot = (key.namespace, pod)
                    self._claims.setdefault(slot, {})[key] = requests(key) if requests is not None else EMPTY_RESOURCES
                    self._claim_of[key] = slot
        return out

    def unpark(self, key: RunKey) -> None:
        """Take ``key`` out of the lot, if it is there: it is queued by its own event, or it is
        gone, bound or finished (no claim is made, no group's safety-net clock moves)."""
        with self._lock:
            self._unpark_locked(key)

    def drop_namespace(self, namespace: str) -> int:
        """Forget every parked Run and claim of ``namespace``; how many Runs were parked."""
        with self._lock:
            keys = [key for key in self._where if key.namespace == namespace]
            for key in keys:
                self._unpark_locked(key)
            for slot in [slot for slot in self._claims if slot[0] == namespace]:
                for key in self._claims.pop(slot):
                    self._claim_of.pop(key, None)
        return len(keys)

    def due(self) -> list[RunKey]:
        """The safety net: Runs parked ``safety_net`` seconds in a group that admitted nobody
        for as long; they leave the lot (the caller queues them). A group being served is
        skipped whole, so a large backlog that drains costs nothing here."""
        now, net = self._clock(), self._safety_net
        out: list[RunKey] = []
        with self._lock:
            for group, by_reason in list(self._groups.items()):
                if served(self._admitted_at.get(group), now, net):
                    continue
                for items in list(by_reason.values()):
                    out.extend(key for key in items if overdue(self._where[key].since, now, net))
            for key in out:
                self._unpark_locked(key)
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._where)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._where

    def counts(self) -> dict[ParkReason, int]:
        """Parked Runs by reason (for the queue-depth metric)."""
        out: dict[ParkReason, int] = {}
        with self._lock:
            for by_reason in self._groups.values():
                for reason, items in by_reason.items():
                    out[reason] = out.get(reason, 0) + len(items)
        return out

    def oldest(self) -> dict[ParkReason, int]:
        """The creation time (µs since the epoch) of the oldest parked Run, by reason (a reason
        with none parked, or only Runs without a creation time, is left out). A line's head is its
        oldest Run, as a queue order starts with the creation time (``queueing.SortKey``): one look
        per group, whatever the backlog."""
        out: dict[ParkReason, int] = {}
        with self._lock:
            for by_reason in self._groups.values():
                for reason, line in by_reason.items():
                    for key in line.head(1):
                        created = self._where[key].rank(key)[0]
                        if created < out.get(reason, NO_TIME_US):
                            out[reason] = created
        return out

    # --- internals (the lock is held) ----------------------------------------------------

    def _rank(self, key: RunKey) -> tuple[SortKey, RunKey]:
        return self._where[key].rank(key), key

    def _now(self) -> float:
        """The clock, as one shared float per :data:`STAMP_RESOLUTION`."""
        now = self._clock()
        if not 0.0 <= now - self._stamp < STAMP_RESOLUTION:
            self._stamp = now
        return self._stamp

    def _park_locked(self, key: RunKey, group: Group, order: SortKey, kind: type[_Parked]) -> None:
        self._unpark_locked(key)
        group = self._canonical.setdefault(group, group)
        namespace, runtime, reason = group
        created, order_namespace, order_name = order
        slim = order_namespace == key.namespace and order_name == key.name
        self._where[key] = kind(group, created if slim else order, self._now())
        by_reason = self._groups.setdefault((namespace, runtime), {})
        line = by_reason.get(reason)
        if line is None:
            line = by_reason[reason] = _Line(self._line_chunk)
        line.insert(key, self._rank)

    def _unpark_locked(self, key: RunKey) -> bool:
        parked = self._where.get(key)
        if parked is None:
            return False
        namespace, runtime, reason = parked.group
        by_reason = self._groups[(namespace, runtime)]
        items = by_reason[reason]
        items.remove(key, self._rank)
        del self._where[key]
        if reason == "unfit":
            self._drop_shape_locked(key, (namespace, runtime))
        if not items:
            del by_reason[reason]
            del self._canonical[parked.group]
            if not by_reason:
                del self._groups[(namespace, runtime)]
        return True

    def _drop_shape_locked(self, key: RunKey, group: tuple[str, str]) -> None:
        shape = self._shape_of.pop(key, None)
        by_shape = self._unfit.get(group)
        if shape is None or by_shape is None:
            return
        keys = by_shape.get(shape)
        if keys is None:
            return
        keys.discard(key)
        if not keys:
            del by_shape[shape]
            if not by_shape:
                del self._unfit[group]
