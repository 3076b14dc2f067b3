"""Kubernetes Events (core ``v1``) about one object each, best-effort and deduplicated.

The ``kubernetes`` package's recorder is not used (the client here is raw JSON,
see ``kube``), so this is client-go's ``EventRecorder`` in small: the first
occurrence of a (object, reason, message) series is created (``POST``); a repeat
patches that Event's ``count`` and ``lastTimestamp`` (merge ``PATCH``), and
creates a fresh one if the old Event expired (404). Those two verbs are all a
writer needs RBAC for (create, patch). :meth:`EventRecorder.deduplicated` queues
an (object, reason) pair's Event only when its message changes or once per
``repeat_interval``, so an object reported again and again does not flood its namespace.

Best-effort: callers only enqueue (never block: a full queue drops the event and
counts it); one background thread does the HTTP, at most ``qps`` writes a second
after a ``burst`` (a token bucket, like the rate limit of kube-scheduler's event
client): in a burst the queue fills and the surplus Events are dropped, so Events
never cost the API server or this process more than that. ``share`` scales the
budget (a caller that runs as several replicas gives each its part). An Event write
that fails is counted, logged at warning level (at most once a minute per kind of
error, so a refused Events API — RBAC — is visible without flooding the log) and
dropped; it never fails or slows the caller.

Writes are gated (``may_write``, asked with the Event's namespace): nothing is queued
while the gate is closed, and the writer thread asks it again immediately before each
HTTP request — after any rate-limit wait — so a leader that was paused past its
Lease and then resumed cannot flush what it queued before. :meth:`EventRecorder.end_term`
drops everything queued in the term that just ended; an Event from an old term
is never written in a later one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Literal, Protocol, TypeAlias

from returns.result import Result, Success

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.kube import MERGE_PATCH, ApiError, JSONObject, ResourceType
from kruntimes.kubeclient.throttle import Throttle
from kruntimes.kubeclient.tokenbucket import TokenBucket
from kruntimes.kubeclient.threads import Supervisor

log = logging.getLogger(__name__)

EVENTS: Final = ResourceType("", "v1", "events")
EventType: TypeAlias = Literal["Normal", "Warning"]
WARN_INTERVAL: Final = 60.0
"""Seconds between two warnings about failed Event writes of one kind of error."""


class EventApi(Protocol):
    """What the recorder needs from ``kube.Kube``."""

    # ``read=False``: the recorder never reads a written Event back, so its answer is not decoded.
    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]: ...

    def patch(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH, *, read: bool = True
    ) -> Result[JSONObject, ApiError]: ...


@dataclass(frozen=True, slots=True)
class EventSettings:
    """How the recorder identifies itself and how hard it deduplicates."""

    instance: str = ""
    """``reportingInstance`` / ``source.host``: the writer's identity (which replica said it)."""
    repeat_interval: float = 300.0
    """An object's unchanged (reason, message) is repeated at most this often (5 min): often
    enough that ``kubectl describe`` shows it still holds, rarely enough that a thousand objects
    in that state cost three Event writes a second, not thirty."""
    queue_size: int = 1000
    """Events waiting to be written; beyond this they are dropped (best-effort, never blocking)."""
    qps: float = 50.0
    """Event writes per second at most, once ``burst`` is spent; ``<= 0``: no limit."""
    burst: int = 100
    """Event writes allowed back to back before ``qps`` applies."""
    max_tracked: int = 10_000
    """Objects (and Event series) remembered for deduplication; the least recently used are forgotten."""


@dataclass(frozen=True, slots=True)
class ObjectReference:
    """The Event's ``involvedObject``: what it is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str


@dataclass(frozen=True, slots=True)
class _Pending:
    involved: ObjectReference
    type: EventType
    reason: str
    message: str
    at: datetime
    term: int


def _time(value: datetime) -> str:
    """``metav1.Time``: RFC 3339, whole seconds, UTC."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Queue Events about objects and write them on a background thread."""

    def __init__(
        self,
        kube: EventApi,
        settings: EventSettings = EventSettings(),
        *,
        component: str,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], object] | None = None,
        may_write: Callable[[str], bool] = lambda namespace: True,
        share: Callable[[], float] = lambda: 1.0,
        supervisor: Supervisor | None = None,
    ) -> None:
        """``component``: ``reportingComponent`` / ``source.component``. ``share``: the part of
        ``settings``' rate and burst this process may spend, read before each write (one over
        the live replicas, so that scaling out does not multiply the Events an API server
        receives). ``supervisor`` counts an Event whose write
        raised and hears of the writer thread's end if it cannot go on."""
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._kube = kube
        self._may_write = may_write
        self._term = 0
        """Bumped by ``end_term``; an item queued under an older value is never written."""
        self._settings = settings
        self._component = component
        self._clock = clock
        self._now = now
        self._bucket = TokenBucket(settings.qps, settings.burst, clock=clock, sleep=sleep, share=share)
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=settings.queue_size)
        self._lock = threading.Lock()
        self._last: OrderedDict[tuple[str, str, str], tuple[str, float]] = OrderedDict()
        """(namespace, uid, reason) -> (last message, when) for deduplication (any thread, locked)."""
        self._series: OrderedDict[tuple[str, str, str, str], tuple[str, int]] = OrderedDict()
        """(namespace, uid, reason, message) -> (Event name, count); the writer thread's alone."""
        self._thread: threading.Thread | None = None
        self._writing: str | None = None
        """The namespace of the Event the writer thread is sending now, if any."""
        self.dropped = 0
        self.written = 0
        self.failed = 0
        self.fenced = 0
        """Events not written because this process did not (or no longer) hold the write gate."""
        self._warnings = Throttle(WARN_INTERVAL, clock)
        """A failed write is logged at warning once a minute per error kind."""

    # --- what callers use (never blocks) ---

    def record(self, involved: ObjectReference, type_: EventType, reason: str, message: str) -> bool:
        """Queue the event as it is (no deduplication); ``True`` when queued."""
        return self._enqueue(involved, type_, reason, message)

    def deduplicated(self, involved: ObjectReference, type_: EventType, reason: str, message: str) -> bool:
        """Queue the event unless the same (object, reason, message) was queued within ``repeat_interval``."""
        key = (involved.namespace, involved.uid, reason)
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and last[0] == message and now - last[1] < self._settings.repeat_interval:
                self._last.move_to_end(key)
                return False
            self._last[key] = (message, now)
            self._last.move_to_end(key)
            while len(self._last) > self._settings.max_tracked:
                self._last.popitem(last=False)
        return self._enqueue(involved, type_, reason, message)

    def forget(self, namespace: str, uid: str, reason: str) -> None:
        """The object's ``reason`` no longer holds: its next Event of that reason is written at once."""
        with self._lock:
            self._last.pop((namespace, uid, reason), None)

    def drop_object(self, namespace: str, uid: str) -> None:
        """The object is gone or finished: drop its deduplication state."""
        with self._lock:
            for key in [k for k in self._last if k[0] == namespace and k[1] == uid]:
                del self._last[key]

    def drop_namespace(self, namespace: str) -> None:
        """This process stopped writing for ``namespace``: drop its deduplication state."""
        with self._lock:
            for key in [k for k in self._last if k[0] == namespace]:
                del self._last[key]

    def end_term(self) -> int:
        """Leadership ended: drop every queued Event of the term; the number dropped.

        The writer may be holding one item already (waiting on the rate limit); the term
        check before its request drops that one too.
        """
        with self._lock:
            self._term += 1
        discarded = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:  # a stop request: keep it for the writer
                self._queue.task_done()
                self._queue.put_nowait(None)
                break
            discarded += 1
            self._queue.task_done()
        self.fenced += discarded
        return discarded

    def _enqueue(self, involved: ObjectReference, type_: EventType, reason: str, message: str) -> bool:
        if not self._may_write(involved.namespace):
            self.fenced += 1
            return False
        item = _Pending(involved, type_, reason, message, self._now(), self._term)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("event queue full; dropping events", extra={"dropped": self.dropped})
            return False
        return True

    # --- lifecycle ---

    def start(self) -> None:
        if self._thread is not None:
            return
        self._bucket.resume()
        self._thread = self._supervisor.thread(self._loop, "event-recorder")
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """End the writer thread (waiting ``timeout`` seconds at most, for a request on the wire):
        what the rate limit holds back, or is still queued, is not written (:meth:`flush` first
        to let it out). A low ``--event-qps`` may hold an Event for minutes: a stop waits for none."""
        thread = self._thread
        if thread is None:
            return
        self._bucket.stop()
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        thread.join(timeout)
        self._thread = None

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event was attempted, for at most ``timeout`` seconds: ``False``
        at once when the rate limit holds the next one past them."""
        deadline = self._clock() + timeout
        while self._clock() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            held = self._bucket.waiting_until
            if held is not None and held > deadline:
                return False
            time.sleep(0.01)
        return self._queue.unfinished_tasks == 0

    # --- the writer thread ---

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(item)
            except Exception as error:  # a bug here must not end event recording for the process
                key = "?" if item is None else f"{item.involved.namespace}/{item.involved.name}"
                self._supervisor.skipped("event-recorder", "write", key, error)
            finally:
                self._queue.task_done()

    def _authorized(self, item: _Pending) -> bool:
        """The gate, asked right before a request: same term, and the leader may still write."""
        if item.term == self._term and self._may_write(item.involved.namespace):
            return True
        self.fenced += 1
        return False

    def _write(self, item: _Pending) -> None:
        if not self._bucket.take():  # stopping: the term is over, its Events are never written
            self.fenced += 1
            return
        # Published before the gate is asked: whoever closes a namespace's gate and then finds
        # it not writing here knows that no request for it can still leave (sharded handoffs).
        self._writing = item.involved.namespace
        try:
            self._write_authorized(item)
        finally:
            self._writing = None

    def writing(self, namespace: str) -> bool:
        """An Event of ``namespace`` is being written now (it passed, or is about to ask, the gate)."""
        return self._writing == namespace

    def _write_authorized(self, item: _Pending) -> None:
        involved = item.involved
        series_key = (involved.namespace, involved.uid, item.reason, item.message)
        known = self._series.get(series_key)
        if known is not None:
            name, count = known
            body = '{"count":%d,"lastTimestamp":"%s"}' % (count + 1, _time(item.at))
            if not self._authorized(item):
                return
            patched = self._kube.patch(EVENTS.path(involved.namespace, name), body, MERGE_PATCH, read=False)
            if isinstance(patched, Success):
                self._series[series_key] = (name, count + 1)
                self._series.move_to_end(series_key)
                self.written += 1
                return
            if patched.failure().kind != "not_found":
                self._failed(item, patched.failure())
                return
            del self._series[series_key]  # the old Event expired: start a new series
        name = f"{involved.name[:200]}.{time.time_ns():x}"
        event = self._body(item, name)
        if not self._authorized(item):
            return
        created = self._kube.create(EVENTS.path(involved.namespace), event, read=False)
        if not isinstance(created, Success):
            self._failed(item, created.failure())
            return
        self._series[series_key] = (name, 1)
        while len(self._series) > self._settings.max_tracked:
            self._series.popitem(last=False)
        self.written += 1

    def _failed(self, item: _Pending, error: ApiError) -> None:
        self.failed += 1
        fields = {item.involved.kind.lower(): f"{item.involved.namespace}/{item.involved.name}", "reason": item.reason, "error": str(error)}
        if self._warnings.allow(error.kind) is not None:
            log.warning("event not written; further failures of this kind are logged at debug for a minute", extra={**fields, "kind": error.kind, "failed": self.failed})
        else:
            log.debug("event not written", extra=fields)

    def _body(self, item: _Pending, name: str) -> dict[str, object]:
        stamp = _time(item.at)
        involved = item.involved
        source: dict[str, object] = {"component": self._component}
        if self._settings.instance:
            source["host"] = self._settings.instance
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": involved.namespace},
            "involvedObject": {
                "apiVersion": involved.api_version,
                "kind": involved.kind,
                "namespace": involved.namespace,
                "name": involved.name,
                "uid": involved.uid,
                "resourceVersion": involved.resource_version,
            },
            "type": item.type,
            "reason": item.reason,
            "message": item.message,
            "source": source,
            "reportingComponent": self._component,
            "reportingInstance": self._settings.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
