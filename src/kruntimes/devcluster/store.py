"""The versioned object store: one lock, one resourceVersion counter, history, watch fan-out.

Every committed change takes the next cluster-wide resourceVersion, is
appended to a bounded event window (what watches resume from) and to the
unbounded write history (what invariant checkers replay), and is pushed to
every matching watcher's queue *while the lock is still held*. Commits are
therefore totally ordered and each watcher receives them in resourceVersion
order with no gap: a watcher registered at version N gets its backlog
(> N) and its live feed under the same lock.

Stored objects are never mutated after commit; readers may share them.
"""

from __future__ import annotations

import json
import threading
from bisect import bisect_left, bisect_right, insort
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal, final

from kruntimes.devcluster.errors import expired
from kruntimes.devcluster.types import GroupResource, ObjectKey, Obj

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@final
class Event:
    """One committed change. ``previous`` is the state before it (None for ADDED)."""

    __slots__ = ("type", "resource", "resource_version", "object", "previous", "_json")

    def __init__(self, type: EventType, resource: GroupResource, resource_version: int, object: Obj, previous: Obj | None) -> None:
        self.type: EventType = type
        self.resource = resource
        self.resource_version = resource_version
        self.object = object
        self.previous = previous
        self._json: bytes | None = None

    def object_json(self) -> bytes:
        """The object encoded once, shared by every plain-JSON watcher of this event."""
        if self._json is None:
            self._json = json.dumps(self.object, separators=(",", ":")).encode()
        return self._json


@final
@dataclass(frozen=True, slots=True)
class Bookmark:
    """Everything up to ``resource_version`` has been delivered to this watcher."""

    resource_version: int
    initial_events_end: bool = False


@final
@dataclass(frozen=True, slots=True)
class Delivery:
    """An event as one watcher sees it: a selector can turn MODIFIED into ADDED or DELETED."""

    type: EventType
    event: Event

    @property
    def left_selection(self) -> bool:
        """A change that took the object out of the watcher's selection: kube-apiserver's watch cache
        sends it as DELETED carrying the object as it last matched, at the change's version."""
        return self.type == "DELETED" and self.event.type == "MODIFIED"

    def shown(self) -> Obj:
        """The object this watcher is sent."""
        if not self.left_selection:
            return self.event.object
        assert self.event.previous is not None
        meta = {**self.event.previous["metadata"], "resourceVersion": str(self.event.resource_version)}
        return {**self.event.previous, "metadata": meta}


@final
@dataclass(frozen=True, slots=True)
class WriteContext:
    """Who asked for a write, recorded in the write history."""

    verb: str
    subresource: str = ""
    user_agent: str = ""
    request_id: str = ""


@final
@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One committed object version, with the request that made it."""

    resource_version: int
    event_type: EventType
    verb: str
    resource: GroupResource
    subresource: str
    namespace: str
    name: str
    object: Obj
    user_agent: str
    request_id: str
    time: float


@final
@dataclass(frozen=True, slots=True)
class Put:
    """Store this object (a fresh dict the store now owns)."""

    object: Obj


@final
@dataclass(frozen=True, slots=True)
class Remove:
    """Delete the object."""


@final
@dataclass(frozen=True, slots=True)
class Keep:
    """Change nothing (a no-op write: no new resourceVersion, no event)."""


Decision = Put | Remove | Keep
Matcher = Callable[[Obj], bool]


@final
class Subscription:
    """A watcher's queue. Filled under the store lock, drained by one consumer thread."""

    def __init__(self, resources: frozenset[GroupResource], namespace: str | None, matcher: Matcher | None, limit: int, after: int = 0) -> None:
        self.resources = resources
        self.namespace = namespace
        self.after = after
        """Nothing at or below this version is delivered, bookmarks below it neither (kube-apiserver's
        watch cache holds a watch from a version it has not reached until it gets there)."""
        self._matcher = matcher
        self._limit = limit
        self._items: deque[Delivery | Bookmark] = deque()
        self._cond = threading.Condition(threading.Lock())
        self.closed = False
        self.aborted = False
        self.overflowed = False

    def _visible(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj.get("metadata", {}).get("namespace", "") != self.namespace:
            return False
        return self._matcher is None or self._matcher(obj)

    def _offer(self, event: Event) -> None:
        if event.resource not in self.resources or event.resource_version <= self.after:
            return
        if event.type == "ADDED":
            seen: EventType | None = "ADDED" if self._visible(event.object) else None
        elif event.type == "DELETED":
            seen = "DELETED" if self._visible(event.previous) else None
        else:
            before, after = self._visible(event.previous), self._visible(event.object)
            seen = "MODIFIED" if before and after else "ADDED" if after else "DELETED" if before else None
        if seen is not None:
            self._push(Delivery(seen, event))

    def _push(self, item: Delivery | Bookmark) -> None:
        with self._cond:
            if self.closed:
                return
            if len(self._items) >= self._limit:
                # A watcher this far behind is cut off, as the API server does; it resumes from its last version.
                self.overflowed = True
                self.closed = True
            else:
                self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float | None) -> Delivery | Bookmark | None:
        """The next item, or None on timeout or when closed and drained (check :attr:`closed`)."""
        with self._cond:
            if not self._items and not self.closed:
                self._cond.wait(timeout)
            if self._items and not self.aborted:
                return self._items.popleft()
            return None

    def drain(self) -> list[Delivery | Bookmark]:
        with self._cond:
            items = list(self._items)
            self._items.clear()
            return items

    def close(self, *, abort: bool = False) -> None:
        """Stop the watch; ``abort`` also discards what is queued (the connection is cut, not ended)."""
        with self._cond:
            self.closed = True
            self.aborted = self.aborted or abort
            self._cond.notify_all()

    @property
    def finished(self) -> bool:
        with self._cond:
            return self.closed and (self.aborted or not self._items)


DEFAULT_EVENT_WINDOW: Final = 10_000
DEFAULT_SUBSCRIBER_LIMIT: Final = 100_000


@final
class Store:
    """All objects of all resources, keyed by (group, plural) then (namespace, name)."""

    def __init__(self, *, event_window: int = DEFAULT_EVENT_WINDOW, subscriber_limit: int = DEFAULT_SUBSCRIBER_LIMIT, keep_writes: bool = True) -> None:
        self._lock = threading.Lock()
        self._advanced = threading.Condition(self._lock)
        """Notified at every commit (``wait_for_version``)."""
        self._objects: dict[GroupResource, dict[ObjectKey, Obj]] = {}
        self._sorted: dict[GroupResource, list[ObjectKey]] = {}
        """Each listed resource's keys in (namespace, name) order, kept in step with every create and
        delete once a list asked for them: a paged list of 50,000 Runs would otherwise sort them all
        and walk past the earlier pages at every page (minutes for one relist)."""
        self._rv = 0
        self._events: deque[Event] = deque()
        self._window = max(1, event_window)
        self._compacted = 0
        self._subscriptions: set[Subscription] = set()
        self._subscriber_limit = subscriber_limit
        self._writes: list[WriteRecord] = []
        self._keep_writes = keep_writes

    # -- reads ----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def wait_for_version(self, resource_version: int, timeout: float) -> int:
        """Wait at most ``timeout`` seconds for the store to reach ``resource_version``; the version now."""
        with self._advanced:
            self._advanced.wait_for(lambda: self._rv >= resource_version, timeout)
            return self._rv

    def read(self, resource: GroupResource, key: ObjectKey) -> Obj | None:
        with self._lock:
            return self._objects.get(resource, {}).get(key)

    def list_objects(
        self, resource: GroupResource, namespace: str | None = None, after: tuple[str, str] | None = None
    ) -> tuple[list[Obj], int]:
        """Objects sorted by (namespace, name), those after the key ``after`` only, and the
        resourceVersion they are consistent at."""
        with self._lock:
            bucket = self._objects.get(resource, {})
            keys = self._sorted.get(resource)
            if keys is None:
                keys = self._sorted[resource] = sorted(bucket)
            low, high = 0, len(keys)
            if namespace is not None:  # one namespace's keys are contiguous in this order
                low = bisect_left(keys, (namespace, ""))
                high = bisect_left(keys, (namespace + "\0",))
            if after is not None:
                low = max(low, bisect_right(keys, after))
            return [bucket[k] for k in keys[low:high]], self._rv

    def namespaces_in_use(self, namespace: str) -> bool:
        with self._lock:
            return any(k.namespace == namespace for bucket in self._objects.values() for k in bucket)

    # -- writes ---------------------------------------------------------------------

    def transact(
        self,
        resource: GroupResource,
        key: ObjectKey,
        decide: Callable[[Obj | None], Decision],
        context: WriteContext,
        *,
        dry_run: bool = False,
    ) -> tuple[Obj | None, EventType | None]:
        """Atomically read the object, let ``decide`` choose, and commit its choice.

        ``decide`` runs under the store lock (keep it pure and quick) and may
        raise :class:`ApiError`, which leaves everything unchanged. Returns the
        object now stored (for Remove: the deleted object at its deletion
        version) and the event type, or (current, None) for Keep.
        """
        with self._lock:
            bucket = self._objects.setdefault(resource, {})
            current = bucket.get(key)
            decision = decide(current)
            if isinstance(decision, Keep):
                return current, None
            if dry_run:
                if isinstance(decision, Put):
                    return decision.object, "ADDED" if current is None else "MODIFIED"
                return current, "DELETED"
            self._rv += 1
            if isinstance(decision, Put):
                obj = decision.object
                obj["metadata"]["resourceVersion"] = str(self._rv)
                bucket[key] = obj
                keys = self._sorted.get(resource)
                if current is None and keys is not None:
                    insort(keys, key)
                kind: EventType = "ADDED" if current is None else "MODIFIED"
            else:
                if current is None:
                    raise RuntimeError("decide() chose Remove for an absent object")
                del bucket[key]
                keys = self._sorted.get(resource)
                if keys is not None:
                    del keys[bisect_left(keys, key)]
                obj = {**current, "metadata": {**current["metadata"], "resourceVersion": str(self._rv)}}
                kind = "DELETED"
            event = Event(kind, resource, self._rv, obj, current)
            self._record(event, context, key)
            self._advanced.notify_all()
            return obj, kind

    def _record(self, event: Event, context: WriteContext, key: ObjectKey) -> None:
        self._events.append(event)
        if len(self._events) > self._window:
            self._compacted = self._events.popleft().resource_version
        if self._keep_writes:
            self._writes.append(
                WriteRecord(
                    event.resource_version, event.type, context.verb, event.resource, context.subresource,
                    key.namespace, key.name, event.object, context.user_agent, context.request_id, time.time(),
                )
            )
        for sub in self._subscriptions:
            sub._offer(event)

    # -- watches --------------------------------------------------------------------

    def subscribe(
        self,
        resources: Iterable[GroupResource],
        *,
        namespace: str | None = None,
        matcher: Matcher | None = None,
        since: int | None = None,
        initial_events: bool = False,
        initial_events_end: bool = False,
    ) -> Subscription:
        """Register a watcher.

        ``since``: deliver every change after that version (410 Expired if the
        window no longer holds them); a version the store has not reached yet is
        watched from there on, as kube-apiserver does (nothing is delivered until
        it is passed). ``initial_events``: first a synthetic
        ADDED for every current object, then every later change; with
        ``initial_events_end`` a bookmark marks where the initial state ends.
        """
        resource_set = frozenset(resources)
        with self._lock:
            sub = Subscription(resource_set, namespace, matcher, self._subscriber_limit, after=since or 0)
            if initial_events:
                for resource in sorted(resource_set):
                    bucket = self._objects.get(resource, {})
                    for k in sorted(bucket):
                        obj = bucket[k]
                        if sub._visible(obj):
                            sub._push(Delivery("ADDED", Event("ADDED", resource, int(obj["metadata"]["resourceVersion"]), obj, None)))
                if initial_events_end:
                    sub._push(Bookmark(self._rv, initial_events_end=True))
            elif since is not None:
                if since < self._compacted:
                    raise expired(f"too old resource version: {since} ({self._compacted + 1})")
                for event in self._events:
                    if event.resource_version > since:
                        sub._offer(event)
            self._subscriptions.add(sub)
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.close()
        with self._lock:
            self._subscriptions.discard(sub)

    def bookmark(self, sub: Subscription) -> None:
        """Queue a bookmark at the current version; under the lock, so no earlier event can follow it.
        None until the server has moved past the version the watch started from: kube-apiserver's
        watch cache sends a watcher no bookmark at or below that version (but the initial-events end)."""
        with self._lock:
            if self._rv > sub.after:
                sub._push(Bookmark(self._rv))

    def close_subscriptions(self, predicate: Callable[[Subscription], bool] = lambda _s: True, *, abort: bool = False) -> int:
        with self._lock:
            chosen = [s for s in self._subscriptions if predicate(s)]
        for sub in chosen:
            sub.close(abort=abort)
        return len(chosen)

    @property
    def subscription_count(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    @property
    def oldest_resumable(self) -> int:
        """The smallest ``since`` a watch may still resume from."""
        with self._lock:
            return self._compacted

    # -- history --------------------------------------------------------------------

    def writes(self, since: int = 0) -> list[WriteRecord]:
        """Every committed version with resourceVersion > ``since``, in commit order."""
        with self._lock:
            if since <= 0:
                return list(self._writes)
            lo, hi = 0, len(self._writes)
            while lo < hi:
                mid = (lo + hi) // 2
                if self._writes[mid].resource_version <= since:
                    lo = mid + 1
                else:
                    hi = mid
            return self._writes[lo:]
