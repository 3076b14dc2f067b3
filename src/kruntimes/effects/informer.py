"""Informers: keep the ``ClusterState`` atom in step with the API server by list + watch.

One informer per kind (Runs, Runtime Pods, workspaces), each on its own thread:

1. list, apply every object as an event, mark synced;
2. watch from the list's resourceVersion with bookmarks, applying each event;
3. when the watch ends (server timeout) watch again from the last version seen;
4. on ``410 Gone`` relist, and diff the relist against the objects this
   informer knows into ADDED / MODIFIED / DELETED events;
5. when the server shows it is not the one we listed from (below), relist
   trusting nothing we knew, and tell ``on_lost``;
6. on any other failure back off (exponential, reset after progress; at least
   the server's ``Retry-After``) and try again.

A server that lost its state (an etcd restored from a snapshot, a dev cluster
restarted on the same address) issues resourceVersions we have already seen,
for other writes. resourceVersions are opaque strings in the API, but
kube-apiserver's are etcd revisions: decimal and increasing with every write
of any object (``kube.version_number``; other strings are never compared).
The informer keeps the newest one it has seen and takes these as *lost*:

- a watch answered "too large resource version" (a 504 ``Timeout`` with the
  cause ``ResourceVersionTooLarge``, as the response or as an ``ERROR`` event):
  the server has not reached a version it once gave us;
- an event, a bookmark or a list older than the newest version seen: a watch
  only delivers what follows its version, and a list is a consistent read.

Lost, the informer lists again and applies that list without trusting any
object it knew (``request_relist(fresh=True)`` does the same on request): a
known object at the same resourceVersion may be another write now, so every
listed object is decoded and emitted.

kube-apiserver answers a plain watch from a version it has not reached by
holding it open and sending nothing, which is also what a watch of a resource
nobody writes gets: a watch that ends with no event and no bookmark is
followed by a one-item list (``Kube.current_version``, a consistent read),
whose version shows whether the server went back. A watch that found the
server unreachable (down, or restarting) is followed by a full list: a server
back from a restart may not hold what this informer knows. Any other failed
watch (a broken stream, a 403 or 429 from a server still starting) is followed
by the same one-item read before the next watch.

Every object is decoded with ``kruntimes.pure.readers.kube``; one that cannot be
decoded is skipped, counted (``malformed``) and logged, never a crash. Each
event is one ``Atom.swap`` of the ClusterState atom (``kruntimes.pure.state.cluster.apply``)
followed by the callback ``on_event(old_state, new_state, event)`` — where the
controller computes wakeups. An unexpected exception while one object is decoded, applied or
passed to the callback skips that object (``Supervisor.skipped``: counted, logged by key) and the
informer goes on; the thread runs under the ``Supervisor``, which hears of anything else that
ends it.

Runtime Pods are watched with the label selector ``runtime`` (the label exists),
so unrelated pods cost nothing.

Fresh reads: ``request_relist()`` asks for a new list now (the open watch is
interrupted, a back-off sleep ends) and returns a ticket; ``wait_relisted(ticket)``
returns once a list *started after the request* has been applied. A list is a
consistent read, so after it the state holds every write the server committed
before the request — what a new leader needs before it plans (effects/runner).
The watch ends mid-read when interrupted (an ``IncompleteRead``): that one was
asked for, so it is logged once at debug level, not as a failed watch; any other
failure of a watch stays a warning.

Stopping: ``stop()`` ends the loop at once: it interrupts the open watch (a
stream that can be interrupted, ``kube.WatchStream``, shuts its socket down so a
thread blocked on a quiet watch wakes), and a back-off sleep ends with it.
``join(timeout)`` waits for the thread.

One module at about 850 lines: the list/watch/relist loop and the decoding into the
ClusterState share the loop's state (the resourceVersion, the versions seen that show a
server lost its state, the relist's diff against the state), so the generic reflector is
not yet separated from what it feeds.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias, cast, runtime_checkable

from returns.result import Result

from kruntimes.kubeclient.atom import Atom
from kruntimes.kubeclient.kube import (
    PODS,
    RUNS,
    WORKSPACES,
    ApiError,
    JSONObject,
    KubeError,
    ResourceType,
    WatchEvent,
    version_number,
)
from kruntimes.effects.metrics import ServerReset
from kruntimes.kubeclient.workqueue import ExponentialDelay, Clock
from kruntimes.kubeclient.threads import SupervisedThread, Supervisor
from kruntimes.pure.state.cluster import ClusterState, Event, EventType, apply
from kruntimes.pure.model.objects import Object
from kruntimes.pure.readers.kube import DecodeError, decode_pod, decode_run, decode_workspace
from kruntimes.pure.model.objects import RUNTIME_LABEL

log = logging.getLogger(__name__)

Kind: TypeAlias = Literal["runs", "pods", "workspaces"]
OnEvent: TypeAlias = Callable[[ClusterState, ClusterState, Event], None]
OnLost: TypeAlias = Callable[[ServerReset], None]
"""Told, on the informer's thread, that the server is not the one this informer listed from."""
Sleeper: TypeAlias = Callable[[float], bool]
"""Sleep ``seconds``; return ``True`` when the informer should stop (``threading.Event.wait``)."""

RECONNECT_BACKOFF: Final = ExponentialDelay(base=0.8, cap=30.0)
"""client-go's reflector back-off: 800 ms doubling to 30 s."""
MIN_WATCH_SECONDS: Final = 1.0
"""A watch that ends with no event sooner than this counts as a failure, so a server that
closes watches at once is retried with back-off rather than in a hot loop."""


@runtime_checkable
class Interruptible(Protocol):
    """A watch stream another thread can end at once (``kube.WatchStream``)."""

    def interrupt(self) -> None: ...


class KubeReader(Protocol):
    """What an informer needs from ``kube.Kube`` (tests pass a scripted fake)."""

    def list(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]: ...

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> Iterator[WatchEvent]: ...


Transform: TypeAlias = Callable[[object], object]

_SETTLED_RUN_STATUS: Final = ("phase", "assignedPod", "assignedPodUID")


def slim_run(raw: object) -> object:
    """Drop what the scheduler never reads from a Run that is not Pending, before decoding.

    A Run whose phase is set and is not ``Pending`` (active or finished) only ever
    counts as usage and as an affinity target (SPEC §1, §3.2: a cycle for it ends
    at "not Pending"), which needs its metadata, spec, phase and assignment — not
    its conditions, message or completionTime. Those are most of a settled Run's
    decoded size and decode time, so a tracked Run costs less memory and CPU; a
    Run reset to Pending arrives whole in its next event. (client-go's informer
    transform, ``SetTransform``, exists for the same reason.)

    The strings that repeat across Runs (namespace, runtime, phase, assigned pod,
    label keys and values) are interned on the way: ``json.loads`` gives every Run
    its own copies, and the decoded records keep whatever strings they are given.
    """
    if not isinstance(raw, dict):
        return raw
    _intern_shared_strings(raw)
    status = raw.get("status")
    if not isinstance(status, dict):
        return raw
    phase = status.get("phase")
    if not isinstance(phase, str) or phase in ("", "Pending") or len(status) <= len(_SETTLED_RUN_STATUS):
        return raw
    return {**raw, "status": {key: status[key] for key in _SETTLED_RUN_STATUS if key in status}}


def _intern_shared_strings(raw: dict[str, object]) -> None:
    """Replace, in place, the low-cardinality strings of a freshly parsed Run by shared copies."""
    meta = raw.get("metadata")
    if isinstance(meta, dict):
        _intern_field(meta, "namespace")
        labels = meta.get("labels")
        if isinstance(labels, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            meta["labels"] = {sys.intern(k): sys.intern(v) for k, v in labels.items()}
    spec = raw.get("spec")
    if isinstance(spec, dict):
        _intern_field(spec, "runtime")
    status = raw.get("status")
    if isinstance(status, dict):
        _intern_field(status, "phase")
        _intern_field(status, "assignedPod")
        _intern_field(status, "assignedPodUID")  # one per pod, shared by the Runs on it


def _intern_field(obj: dict[str, object], key: str) -> None:
    value = obj.get(key)
    if type(value) is str:
        obj[key] = sys.intern(value)


MAX_FIELD_SELECTOR: Final = 32 * 1024
"""Bytes of ``metadata.namespace!=`` terms a scope's query carries at most (about 1,000 namespaces
left out): past it the query has none, and the informer drops what it does not keep itself, rather
than send a request line an API server or a proxy in between may refuse."""


class NamespaceScope:
    """The namespaces a sharded replica's cluster-wide informers keep (thread-safe).

    The API server leaves out the namespaces the replica knows and does not keep: its lists and
    watches carry one ``metadata.namespace!=NS`` field selector term per such namespace (the terms
    are ANDed; a field selector cannot name a set to keep). A namespace it does not know yet (one
    created since the last namespace list) still arrives, and the informer drops it before
    decoding. Each namespace kept records the generation it was kept at:
    a list that started at that generation or later holds it (``Informer.listed``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, int] = {}
        self._known: frozenset[str] = frozenset()
        self._generation = 0

    def keeps(self, namespace: str) -> bool:
        return namespace in self._kept  # one dict lookup: read without the lock, on every event

    def kept_at(self, namespace: str) -> int | None:
        """The generation ``namespace`` was kept at; ``None`` when it is not kept."""
        with self._lock:
            return self._kept.get(namespace)

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def keep(self, namespace: str) -> None:
        with self._lock:
            if namespace not in self._kept:
                self._generation += 1
                kept = dict(self._kept)
                kept[namespace] = self._generation
                self._kept = kept  # replaced, never changed: ``keeps`` reads it without the lock

    def drop(self, namespace: str) -> bool:
        """Keep ``namespace`` no more; ``True`` when the API server should now leave it out (it is
        known), so the informers watch again with the narrower selector."""
        with self._lock:
            if namespace not in self._kept:
                return False
            self._kept = {ns: at for ns, at in self._kept.items() if ns != namespace}
            return namespace in self._known

    def know(self, namespaces: frozenset[str]) -> bool:
        """The namespaces that exist (or that the replica shares); ``True`` when what the API
        server should leave out changed."""
        with self._lock:
            before = self._left_out()
            self._known = namespaces
            return self._left_out() != before

    def left_out(self) -> frozenset[str]:
        """What the field selector excludes: known and not kept."""
        with self._lock:
            return self._left_out()

    def _left_out(self) -> frozenset[str]:
        return self._known.difference(self._kept)

    def field_selector(self) -> str:
        """``metadata.namespace!=A,metadata.namespace!=B,...`` (namespace names need no escaping);
        empty past :data:`MAX_FIELD_SELECTOR`."""
        selector = ",".join(f"metadata.namespace!={namespace}" for namespace in sorted(self.left_out()))
        return selector if len(selector) <= MAX_FIELD_SELECTOR else ""


@dataclass(frozen=True, slots=True)
class Watched:
    """One kind of object an informer keeps in the ClusterState."""

    kind: Kind
    resource: ResourceType
    decode: Callable[[object], Result[Object, DecodeError]]
    namespace: str | None = None
    """Only this namespace; ``None`` watches all namespaces."""
    label_selector: str | None = None
    transform: Transform | None = None
    """Applied to every raw object before ``decode`` (``slim_run``)."""
    scope: NamespaceScope | None = None
    """All namespaces (``namespace`` is ``None``) but only those the scope keeps."""

    @property
    def path(self) -> str:
        return self.resource.path(self.namespace)

    @property
    def params(self) -> dict[str, str]:
        """The list's and the watch's query: read at every list and watch (the scope changes)."""
        params = {"labelSelector": self.label_selector} if self.label_selector else {}
        if self.scope is not None:
            fields = self.scope.field_selector()
            if fields:
                params["fieldSelector"] = fields
        return params


def watched_runs(namespace: str | None = None, scope: NamespaceScope | None = None) -> Watched:
    return Watched("runs", RUNS, decode_run, namespace, transform=slim_run, scope=scope)


def watched_pods(namespace: str | None = None, scope: NamespaceScope | None = None) -> Watched:
    """Only pods that carry a ``runtime`` label: the selector is the label's existence."""
    return Watched("pods", PODS, decode_pod, namespace, label_selector=RUNTIME_LABEL, scope=scope)


def watched_workspaces(namespace: str | None = None, scope: NamespaceScope | None = None) -> Watched:
    return Watched("workspaces", WORKSPACES, decode_workspace, namespace, scope=scope)


def _namespace_of(raw: object) -> str | None:
    """A raw object's ``metadata.namespace``, before it is decoded (``None`` if it has none)."""
    if isinstance(raw, dict):
        meta = raw.get("metadata")
        if isinstance(meta, dict):
            namespace = meta.get("namespace")
            if isinstance(namespace, str):
                return namespace
    return None


def object_key(raw: object) -> str:
    """``namespace/name`` of a raw object for a log line, and nothing else of it: a field that is
    not a string shows as ``?``, a long one is cut (an object that was not decoded is untrusted)."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    if not isinstance(meta, dict):
        return "?"
    namespace, name = meta.get("namespace", ""), meta.get("name")
    shown_namespace = namespace[:63] if isinstance(namespace, str) else "?"
    shown_name = name[:253] if isinstance(name, str) else "?"
    return f"{shown_namespace}/{shown_name}"


_THREAD: Final[Mapping[Kind, SupervisedThread]] = {
    "runs": "informer-runs", "pods": "informer-pods", "workspaces": "informer-workspaces"
}


def _name_of(raw: object) -> str:
    if isinstance(raw, Mapping):
        meta = raw.get("metadata")
        if isinstance(meta, Mapping):
            return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return "?"


class Informer:
    """List + watch one kind into the shared ClusterState atom."""

    def __init__(
        self,
        kube: KubeReader,
        watched: Watched,
        state: Atom[ClusterState],
        on_event: OnEvent | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleeper | None = None,
        backoff: ExponentialDelay = RECONNECT_BACKOFF,
        watch_timeout: int = 300,
        on_synced: Callable[[], None] | None = None,
        on_listed: Callable[[], None] | None = None,
        supervisor: Supervisor | None = None,
        on_lost: OnLost | None = None,
    ) -> None:
        self._kube = kube
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        """Counts and logs the objects skipped; hears of the thread's end if it cannot go on."""
        self._on_lost = on_lost
        """Called on the informer's thread when the server shows it lost its state (must be quick)."""
        self._on_synced = on_synced
        """Called once, on the informer's thread, right after the first list is applied."""
        self._on_listed = on_listed
        """Called on the informer's thread after every list is applied (the first one too)."""
        self._watched = watched
        self._state = state
        self._on_event = on_event
        self._clock = clock
        self._stop = threading.Event()
        self._sleep: Sleeper = sleep if sleep is not None else self._wakeable_sleep
        self._backoff = backoff
        self._watch_timeout = watch_timeout
        self._known: dict[str, dict[str, Object]] = {}
        """namespace -> name -> the last object emitted (nested: no key tuple per object)."""
        self._version = ""
        self._synced = threading.Event()
        self._failures = 0
        self._thread: threading.Thread | None = None
        self._stream_lock = threading.Lock()
        self._stream: object = None
        self._relisted = threading.Condition(self._stream_lock)
        self._relist_asked = 0
        """Tickets handed out by ``request_relist`` (guarded by ``_stream_lock``)."""
        self._relist_served = 0
        """The newest ticket a completed list has served."""
        self._wake = threading.Event()
        self._rewatch_asked = False
        """``rewatch`` interrupted the open watch (guarded by ``_stream_lock``)."""
        self._fresh_asked = False
        """The next list trusts nothing this informer knew (guarded by ``_stream_lock``)."""
        self._newest: int | None = None
        """The newest numeric resourceVersion seen (list, event or bookmark)."""
        self._emit_lock = threading.RLock()
        """Held while an event or a list is applied, so ``drop_namespace`` cannot interleave."""
        self._listed_generation = -1
        """The scope's generation when the last completed list started."""
        self.malformed = 0
        """Objects skipped because they could not be decoded."""
        self.relists = 0
        """Lists after the first (each one follows a ``410 Gone`` or a failed watch)."""
        self.watch_restarts = 0
        """Watches that ended (server timeout, error, ``410 Gone``, a requested relist) and were opened again."""
        self.losses = 0
        """Times the server showed it was not the one this informer listed from."""

    # --- public ---

    @property
    def kind(self) -> Kind:
        return self._watched.kind

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._version

    def has_synced(self) -> bool:
        """The first list has been applied to the state."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def start(self) -> threading.Thread:
        """Run the loop on a daemon thread named after the kind."""
        thread = self._supervisor.thread(self.run, _THREAD[self.kind])
        self._thread = thread
        thread.start()
        return thread

    def stop(self) -> None:
        """End the loop now: interrupt the open watch, end any back-off sleep."""
        with self._stream_lock:
            self._stop.set()
            self._wake.set()
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()

    def request_relist(self, *, fresh: bool = False) -> int:
        """Ask for a fresh list now; the ticket is for :meth:`wait_relisted`.

        The open watch is interrupted and a back-off sleep ends, so the loop
        lists at once (a list that fails is retried with the usual back-off).
        ``fresh``: the list trusts nothing this informer knew (the server lost its
        state): every listed object is decoded and emitted, whatever its version.
        """
        with self._stream_lock:
            self._fresh_asked = self._fresh_asked or fresh
            self._relist_asked += 1
            ticket = self._relist_asked
            self._wake.set()
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()
        return ticket

    def wait_relisted(self, ticket: int, timeout: float | None = None) -> bool:
        """``True`` once a list started after ``ticket`` was requested has been applied."""
        with self._relisted:
            return self._relisted.wait_for(lambda: self._relist_served >= ticket, timeout)

    def drop_all(self) -> int:
        """Emit a ``DELETED`` event for every object this informer has applied, so the state no
        longer holds them (a namespace this replica stopped scheduling); how many. Call it after
        :meth:`stop` and :meth:`join`: a loop still running would add them back."""
        gone = [obj for known in self._known.values() for obj in known.values()]
        for obj in gone:
            self._emit("DELETED", obj)
        return len(gone)

    def listed(self, generation: int) -> bool:
        """A list that started once the scope was at ``generation`` (or later) has been applied."""
        return self._listed_generation >= generation

    def rewatch(self) -> None:
        """Open the watch again from the last version seen, with the query as it is now (a scope
        that leaves out more); unlike ``request_relist``, nothing is listed."""
        with self._stream_lock:
            self._rewatch_asked = True
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()

    def drop_namespace(self, namespace: str) -> int:
        """Emit a ``DELETED`` event for every object of ``namespace`` this informer applied (its
        scope dropped it first, so none is applied again); how many. Safe while the loop runs."""
        with self._emit_lock:
            gone = list(self._known.get(namespace, {}).values())
            for obj in gone:
                self._emit_locked("DELETED", obj)
        return len(gone)

    def _take_rewatch(self) -> bool:
        with self._stream_lock:
            asked, self._rewatch_asked = self._rewatch_asked, False
            return asked

    def _relist_wanted(self) -> bool:
        with self._stream_lock:
            return self._relist_served < self._relist_asked

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop's thread to end; ``True`` when it has (or never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def run(self) -> None:
        """The list/watch loop; returns when stopped."""
        need_list = True
        probe_first = False
        while not self._stop.is_set():
            if probe_first and not need_list and not self._relist_wanted():  # a list asked for shows it too
                probed = self._probe()
                if isinstance(probed, ApiError):
                    if self._pause(probed):
                        return
                    continue
                need_list = probed == "lost"
            probe_first = False
            if need_list:
                listed = self._list()
                if listed == "lost":
                    continue  # lists again at once, trusting nothing
                if listed is not None:
                    if self._pause(listed):
                        return
                    continue
                need_list = False
            outcome = self._watch()
            if outcome == "stopped":
                return
            self.watch_restarts += 1
            if outcome == "quiet" and not self._relist_wanted():
                outcome = self._probe()
            if outcome in ("gone", "lost") or self._relist_wanted():
                need_list = True
                continue
            if isinstance(outcome, ApiError):
                if outcome.kind == "unreachable":
                    need_list = True  # the server was down: back, it may not hold what we know
                else:
                    # a broken stream, a 403 or a 429 is also how a restarting server answers; a
                    # watch resumed on one that came back with less would hear nothing, so read its
                    # version before watching again
                    probe_first = True
                if self._pause(outcome):
                    return

    # --- the steps ---

    def _list(self) -> ApiError | Literal["lost"] | None:
        """Relist and apply the difference; ``None`` on success, ``"lost"`` when the list is older
        than what this informer has seen (nothing applied: the next list trusts nothing)."""
        with self._stream_lock:
            serving = self._relist_asked
            fresh, self._fresh_asked = self._fresh_asked, False
            if not self._stop.is_set():  # the requests this list serves must not cut a later back-off short
                self._wake.clear()
        scope = self._watched.scope
        generation = -1 if scope is None else scope.generation  # before the query is read
        params = self._watched.params
        seen: dict[tuple[str, str], Object] = {}
        version = ""
        pages = getattr(self._kube, "list_pages", None)  # kube.Kube has it; a scripted fake may not
        if callable(pages):
            for page in pages(self._watched.path, params):
                body = page.value_or(None)
                if body is None:
                    error = page.failure()
                    log.warning("list failed", extra={"resource": self.kind, "error": str(error), "kind": error.kind})
                    return cast(ApiError, error)
                for raw in body[0]:
                    obj = self._listed(raw, fresh)
                    if obj is not None:
                        seen[(obj.namespace, obj.name)] = obj
                version = body[1] or version
        else:
            result = self._kube.list(self._watched.path, params)
            listed = result.value_or(None)
            if listed is None:
                error = result.failure()
                log.warning("list failed", extra={"resource": self.kind, "error": str(error), "kind": error.kind})
                return error
            for raw in listed[0]:
                obj = self._listed(raw, fresh)
                if obj is not None:
                    seen[(obj.namespace, obj.name)] = obj
            version = listed[1]
        if self._synced.is_set():
            self.relists += 1
        number = version_number(version)
        if not fresh and self._went_back(number):
            with self._stream_lock:
                self._fresh_asked = True
            self._lose("resource_version_went_back", f"a list at resourceVersion {version}")
            return "lost"
        with self._emit_lock:
            self._apply_list(seen, fresh)
        self._version = version
        self._newest = number
        self._failures = 0
        self._listed_generation = generation
        first = not self._synced.is_set()
        self._synced.set()
        if first and self._on_synced is not None:
            self._on_synced()
        if self._on_listed is not None:
            self._on_listed()
        with self._relisted:
            self._relist_served = max(self._relist_served, serving)
            self._relisted.notify_all()
        return None

    def _apply_list(self, seen: Mapping[tuple[str, str], Object], fresh: bool = False) -> None:
        """The difference between a list and what this informer applied, as events; ``fresh``:
        every listed object it knew is emitted again, whatever its version."""
        for (namespace, name), obj in seen.items():
            known = self._known.get(namespace)
            before = None if known is None else known.get(name)
            if before is None:
                self._emit("ADDED", obj)
            elif fresh or before.resource_version != obj.resource_version:
                self._emit("MODIFIED", obj)
        gone = [
            obj
            for namespace, known in self._known.items()
            for name, obj in known.items()
            if (namespace, name) not in seen
        ]
        for obj in gone:
            self._emit("DELETED", obj)

    def _watch(self) -> Literal["stopped", "gone", "lost", "quiet", "ended"] | ApiError:
        started = self._clock()
        events = 0
        try:
            stream = self._kube.watch(
                self._watched.path,
                self._version,
                timeout_seconds=self._watch_timeout,
                bookmarks=True,
                params=self._watched.params,
            )
            with self._stream_lock:
                if self._stop.is_set():
                    return "stopped"
                if self._relist_served < self._relist_asked:
                    return "ended"  # a relist was asked for before this stream could be interrupted
                if self._rewatch_asked:
                    self._rewatch_asked = False
                    return "ended"  # asked to watch with a newer query before this one opened
                self._stream = stream
            for event in stream:
                events += 1
                self._failures = 0
                if self._went_back(version_number(event.resource_version)):
                    self._lose("resource_version_went_back", f"a {event.type} at resourceVersion {event.resource_version}")
                    return "lost"
                self._handle(event)
                if self._stop.is_set():
                    return "stopped"
        except KubeError as problem:
            if self._stop.is_set():
                return "stopped"
            if self._relist_wanted():
                # request_relist interrupted this stream; the loop lists next, as asked
                log.debug("watch interrupted for a requested relist", extra={"resource": self.kind})
                return "ended"
            if self._take_rewatch():
                log.debug("watch interrupted to watch with a new query", extra={"resource": self.kind})
                return "ended"
            if problem.error.kind == "gone":
                log.info("resourceVersion expired; relisting", extra={"resource": self.kind, "resource_version": self._version})
                return "gone"
            if problem.error.too_large_resource_version:
                self._lose("too_large_resource_version", problem.error.message)
                return "lost"
            log.warning("watch failed", extra={"resource": self.kind, "error": str(problem.error), "kind": problem.error.kind})
            return problem.error
        finally:
            with self._stream_lock:
                self._stream = None
        if self._take_rewatch():
            return "ended"  # interrupted on purpose, however soon
        if events == 0 and self._clock() - started < MIN_WATCH_SECONDS:
            return ApiError("bad_response", 200, "", "watch ended at once without events")
        if events == 0:
            return "quiet"
        return "ended"

    def _probe(self) -> Literal["lost", "ended"] | ApiError:
        """After a watch that got nothing: is the server's version now older than the newest seen?"""
        params = self._watched.params
        current = getattr(self._kube, "current_version", None)  # kube.Kube has it; a scripted fake lists
        if callable(current):
            result: Result[str, ApiError] = current(self._watched.path, params)
            version = result.value_or(None)
            error = None if version is not None else result.failure()
        else:
            listed = self._kube.list(self._watched.path, params)
            version = None if (body := listed.value_or(None)) is None else body[1]
            error = None if version is not None else listed.failure()
        if version is None:
            assert error is not None
            log.warning("reading the current resourceVersion failed", extra={"resource": self.kind, "error": str(error), "kind": error.kind})
            return error
        number, newest = version_number(version), self._newest
        if number is not None and newest is not None and number < newest:
            self._lose("resource_version_went_back", f"the collection at resourceVersion {version}")
            return "lost"
        return "ended"

    def _went_back(self, number: int | None) -> bool:
        """``number`` is older than the newest version seen; otherwise it is now the newest."""
        if number is None:
            return False
        newest = self._newest
        if newest is not None and number < newest:
            return True
        self._newest = number
        return False

    def _lose(self, reason: ServerReset, what: str) -> None:
        """The server is not the one this informer listed from: the next list trusts nothing."""
        self.losses += 1
        with self._stream_lock:
            self._fresh_asked = True
        log.warning(
            "the API server lost its state; relisting from scratch",
            extra={"resource": self.kind, "what": what, "newest_seen": self._newest, "reason": reason},
        )
        if self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:  # the callback's bug must not stop this informer's recovery
                log.exception("on_lost callback failed", extra={"resource": self.kind})

    def _wakeable_sleep(self, seconds: float) -> bool:
        """The default sleeper: ends early on ``stop()`` or ``request_relist()``."""
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop.is_set()

    def _pause(self, error: ApiError) -> bool:
        """Back off after a failure; ``True`` when asked to stop meanwhile."""
        delay = self._backoff.delay(self._failures)
        self._failures += 1
        if error.retry_after is not None:
            delay = max(delay, error.retry_after)
        return self._sleep(delay)

    def _handle(self, event: WatchEvent) -> None:
        version = event.resource_version
        if event.type == "BOOKMARK":
            if version:
                self._version = version
            return
        obj = self._decode_kept(event.object)
        if version:
            self._version = version
        if obj is None:
            return
        if event.type == "DELETED":
            # The object in a DELETED event is its last state; prefer it over ours.
            self._emit("DELETED", obj)
        else:
            self._emit(event.type, obj)

    def _listed(self, raw: object, fresh: bool = False) -> Object | None:
        """A listed object: the one already applied when its resourceVersion is the same (a relist,
        a new leader's fresh read, a sharded take, decodes only what changed), else decoded;
        ``fresh``: always decoded."""
        if isinstance(raw, dict) and not fresh:
            meta = raw.get("metadata")
            if isinstance(meta, dict):
                namespace, name = meta.get("namespace"), meta.get("name")
                known = self._known.get(namespace) if isinstance(namespace, str) else None
                before = known.get(name) if known is not None and isinstance(name, str) else None
                if before is not None and before.resource_version == meta.get("resourceVersion"):
                    scope = self._watched.scope
                    return before if scope is None or scope.keeps(before.namespace) else None
        return self._decode_kept(raw)

    def _decode_kept(self, raw: object) -> Object | None:
        """``_decode``, or ``None`` for an object of a namespace the scope does not keep."""
        scope = self._watched.scope
        if scope is not None:
            namespace = _namespace_of(raw)
            if namespace is None or not scope.keeps(namespace):
                return None
        return self._decode(raw)

    def _decode(self, raw: object) -> Object | None:
        transform = self._watched.transform
        try:
            result = self._watched.decode(raw if transform is None else transform(raw))
        except Exception as error:  # a decoder's bug on one object must not stop the informer
            self._supervisor.skipped(_THREAD[self.kind], "decode", object_key(raw), error)
            return None
        obj = result.value_or(None)
        if obj is not None:
            return obj
        self.malformed += 1
        log.warning("skipping a malformed object", extra={"resource": self.kind, "object": _name_of(raw), "error": str(result.failure())})
        return None

    def _emit(self, type_: EventType, obj: Object) -> None:
        scope = self._watched.scope
        if scope is None:
            self._emit_locked(type_, obj)
            return
        with self._emit_lock:
            # dropped since it was decoded: ``drop_namespace`` ran, or runs next; never add it back
            if type_ != "DELETED" and not scope.keeps(obj.namespace):
                return
            self._emit_locked(type_, obj)

    def _emit_locked(self, type_: EventType, obj: Object) -> None:
        event = Event(type_, obj)
        try:
            old, new = self._state.swap_pair(lambda state: apply(state, event))
        except Exception as error:  # one object the state cannot take must not stop the informer
            # neither the state nor what this informer knows changed: a later event or list retries it
            self._supervisor.skipped(_THREAD[self.kind], "apply", f"{obj.namespace}/{obj.name}", error)
            return
        if type_ == "DELETED":
            known = self._known.get(obj.namespace)
            if known is not None:
                known.pop(obj.name, None)
                if not known:
                    del self._known[obj.namespace]
        else:
            self._known.setdefault(obj.namespace, {})[obj.name] = obj
        if self._on_event is None:
            return
        try:
            self._on_event(old, new, event)
        except Exception as error:  # the callback's bug must not stop the cluster view from updating
            self._supervisor.skipped(_THREAD[self.kind], "notify", f"{obj.namespace}/{obj.name}", error)
