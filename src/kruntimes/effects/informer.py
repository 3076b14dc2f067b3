"""Informers: the scheduler's store, keeping the ``ClusterState`` atom in step with the API server.

One informer per kind (Runs, Runtime Pods, workspaces), each on its own thread. The
list/watch loop is ``kruntimes.kubeclient.reflector.Reflector`` (list, watch from the
list's version, watch again when a watch ends, relist on ``410 Gone``, relist trusting
nothing when the server lost its state, back-off, relist tickets, ``stop()``): the
informer is the store it feeds (``reflector.Store``), and hands its requests on to it.

What the informer does with the objects: every one is decoded with
``kruntimes.pure.readers.kube``; one that cannot be decoded is skipped, counted
(``malformed``) and logged, never a crash. A relist is diffed against the objects this
informer applied into ADDED / MODIFIED / DELETED events; a listed object at the
resourceVersion already applied is not decoded again (unless the list is *fresh*:
the server lost its state, and the same version may be another write). Each
event is one ``Atom.swap`` of the ClusterState atom (``kruntimes.pure.state.cluster.apply``)
followed by the callback ``on_event(old_state, new_state, event)`` — where the
controller computes wakeups. An unexpected exception while one object is decoded, applied or
passed to the callback skips that object (``Supervisor.skipped``: counted, logged by key) and the
informer goes on; the thread runs under the ``Supervisor``, which hears of anything else that
ends it.

Runtime Pods are watched with the label selector ``runtime`` (the label exists),
so unrelated pods cost nothing. Settled Runs are slimmed before decoding (``slim_run``).
A sharded replica's cluster-wide informers keep the namespaces of a ``NamespaceScope``
and forget one at once when it is dropped (``drop_namespace``); a stopped informer's
objects leave the state with ``drop_all``.

Its reflector logs to this module's logger, so an informer's lines all carry the
logger name ``kruntimes.effects.informer``. ``join(timeout)`` waits for the thread.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from returns.result import Result

from kruntimes.kubeclient.atom import Atom
from kruntimes.kubeclient.kube import (
    PODS,
    RUNS,
    WORKSPACES,
    ResourceType,
    WatchEvent,
)
from kruntimes.kubeclient.reflector import RECONNECT_BACKOFF, KubeReader, OnLost, Reflector, Sleeper
from kruntimes.kubeclient.workqueue import ExponentialDelay, Clock
from kruntimes.kubeclient.threads import SupervisedThread, Supervisor
from kruntimes.pure.state.cluster import ClusterState, Event, EventType, apply
from kruntimes.pure.model.objects import Object
from kruntimes.pure.readers.kube import DecodeError, decode_pod, decode_run, decode_workspace
from kruntimes.pure.model.objects import RUNTIME_LABEL

log = logging.getLogger(__name__)

Kind: TypeAlias = Literal["runs", "pods", "workspaces"]
OnEvent: TypeAlias = Callable[[ClusterState, ClusterState, Event], None]

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
    """List + watch one kind into the shared ClusterState atom: a reflector, and the store it feeds."""

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
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        """Counts and logs the objects skipped; hears of the thread's end if it cannot go on."""
        self._watched = watched
        self._state = state
        self._on_event = on_event
        self._known: dict[str, dict[str, Object]] = {}
        """namespace -> name -> the last object emitted (nested: no key tuple per object)."""
        self._thread: threading.Thread | None = None
        self._emit_lock = threading.RLock()
        """Held while an event or a list is applied, so ``drop_namespace`` cannot interleave."""
        self._listed_generation = -1
        """The scope's generation when the last completed list started."""
        self.malformed = 0
        """Objects skipped because they could not be decoded."""
        self._reflector = Reflector(
            kube,
            self,
            watched.path,
            lambda: watched.params,
            resource=watched.kind,
            log=log,
            clock=clock,
            sleep=sleep,
            backoff=backoff,
            watch_timeout=watch_timeout,
            on_synced=on_synced,
            on_listed=on_listed,
            on_lost=on_lost,
        )
        """The list/watch loop: ``on_synced`` once after the first list is applied, ``on_listed``
        after every list, ``on_lost`` when the server shows it lost its state (on its thread)."""

    # --- public ---

    @property
    def kind(self) -> Kind:
        return self._watched.kind

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._reflector.resource_version

    @property
    def relists(self) -> int:
        """Lists after the first (each one follows a ``410 Gone`` or a failed watch)."""
        return self._reflector.relists

    @property
    def watch_restarts(self) -> int:
        """Watches that ended (server timeout, error, ``410 Gone``, a requested relist) and were opened again."""
        return self._reflector.watch_restarts

    @property
    def losses(self) -> int:
        """Times the server showed it was not the one this informer listed from."""
        return self._reflector.losses

    def has_synced(self) -> bool:
        """The first list has been applied to the state."""
        return self._reflector.has_synced()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._reflector.wait_for_sync(timeout)

    def start(self) -> threading.Thread:
        """Run the loop on a daemon thread named after the kind."""
        thread = self._supervisor.thread(self.run, _THREAD[self.kind])
        self._thread = thread
        thread.start()
        return thread

    def stop(self) -> None:
        """End the loop now: interrupt the open watch, end any back-off sleep."""
        self._reflector.stop()

    def request_relist(self, *, fresh: bool = False) -> int:
        """Ask for a fresh list now; the ticket is for :meth:`wait_relisted` (``Reflector.request_relist``).
        ``fresh``: every listed object is decoded and emitted, whatever its version."""
        return self._reflector.request_relist(fresh=fresh)

    def wait_relisted(self, ticket: int, timeout: float | None = None) -> bool:
        """``True`` once a list started after ``ticket`` was requested has been applied."""
        return self._reflector.wait_relisted(ticket, timeout)

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
        self._reflector.rewatch()

    def drop_namespace(self, namespace: str) -> int:
        """Emit a ``DELETED`` event for every object of ``namespace`` this informer applied (its
        scope dropped it first, so none is applied again); how many. Safe while the loop runs."""
        with self._emit_lock:
            gone = list(self._known.get(namespace, {}).values())
            for obj in gone:
                self._emit_locked("DELETED", obj)
        return len(gone)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop's thread to end; ``True`` when it has (or never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def run(self) -> None:
        """The list/watch loop; returns when stopped."""
        self._reflector.run()

    # --- the store the reflector feeds (``reflector.Store``), on the loop's thread ---

    def listing(self, fresh: bool) -> _Listing:
        """A list begins: its objects are decoded as they arrive, applied as a diff at the end."""
        return _Listing(self, fresh)

    def handle(self, event: WatchEvent) -> None:
        """Apply one watch event: its object decoded (skipped when its namespace is not kept)."""
        if event.type == "BOOKMARK":
            return  # the reflector's alone: it carries no object
        obj = self._decode_kept(event.object)
        if obj is None:
            return
        if event.type == "DELETED":
            # The object in a DELETED event is its last state; prefer it over ours.
            self._emit("DELETED", obj)
        else:
            self._emit(event.type, obj)

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


class _Listing:
    """One list on its way into an informer (``reflector.Listing``): the listed objects by key,
    applied as a diff once the whole list is in."""

    def __init__(self, informer: Informer, fresh: bool) -> None:
        self._informer = informer
        self._fresh = fresh
        scope = informer._watched.scope
        self._generation = -1 if scope is None else scope.generation  # before the query is read
        self._seen: dict[tuple[str, str], Object] = {}

    def add(self, raw: object) -> None:
        obj = self._informer._listed(raw, self._fresh)
        if obj is not None:
            self._seen[(obj.namespace, obj.name)] = obj

    def apply(self) -> None:
        informer = self._informer
        with informer._emit_lock:
            informer._apply_list(self._seen, self._fresh)
        informer._listed_generation = self._generation
