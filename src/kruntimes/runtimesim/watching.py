"""A list + watch cache of raw JSON objects of one kind in one namespace (a client-go reflector).

The scheduler's informers (``kruntimes.effects.informer``) decode into the scheduler's own
records and its ``ClusterState``; the simulator needs the objects as the server sent them (it
writes them back), so it keeps them raw here, with the same reconnect rules: list, watch from the
list's resourceVersion with bookmarks, watch again from the last version seen when a watch ends,
relist on ``410 Gone`` (the difference against what is cached becomes changes), and back off on
any other failure (800 ms doubling to 30 s, at least the server's ``Retry-After``).

Every change is reported as ``on_change(name, before, after)`` (``None`` for absent), on the
cache's own thread, after the cache holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from kruntimes.kubeclient.reflector import MIN_WATCH_SECONDS, RECONNECT_BACKOFF, Interruptible
from kruntimes.kubeclient.kube import ApiError, Kube, KubeError, ResourceType, WatchEvent, resource_version_of as resource_version
from kruntimes.kubeclient.threads import named_thread
from kruntimes.kubeclient.workqueue import ExponentialDelay

log = logging.getLogger(__name__)

Obj = dict[str, Any]
OnChange = Callable[[str, "Obj | None", "Obj | None"], None]

WATCH_SECONDS: Final = 300


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


class Reflector:
    """Objects of one resource in one namespace, kept current by list + watch on a thread."""

    def __init__(
        self,
        kube: Kube,
        resource: ResourceType,
        namespace: str,
        on_change: OnChange,
        *,
        label_selector: str | None = None,
        backoff: ExponentialDelay = RECONNECT_BACKOFF,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.resource = resource
        self._kube = kube
        self._path = resource.path(namespace)
        self._params = {"labelSelector": label_selector} if label_selector else {}
        self._on_change = on_change
        self._backoff = backoff
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._objects: dict[str, Obj] = {}
        self._version = ""
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._stream: object = None
        self._thread: threading.Thread | None = None
        self.failures = 0
        """Lists and watches that failed (not counting a ``410 Gone``), for the progress line."""

    # --- reading -----------------------------------------------------------------------------

    def get(self, name: str) -> Obj | None:
        return self._objects.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._objects)

    def values(self) -> list[Obj]:
        with self._lock:
            return list(self._objects.values())

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # --- what the owner learnt by writing -------------------------------------------------------

    def put(self, obj: Obj, *, replacing: str | None) -> None:
        """A write's answer: ``obj`` as the write left it, in place of the version the write was
        made from (``replacing``; ``None`` for a create). Only while the cache still holds that
        version: when the watch has moved on (it brought this write, a later one, or a deletion),
        the watch is at least as new, and a late answer must not bring an older object back."""
        self._replace(name_of(obj), obj, only_if=replacing)

    def drop(self, name: str, *, replacing: str) -> None:
        """The server answered 404 to a write made from version ``replacing``: the object is gone
        (unless the cache already holds a newer one, made since under the same name)."""
        self._replace(name, None, only_if=replacing)

    # --- the loop --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = named_thread(self._run, f"sim-{self.resource.plural}")
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            stream = self._stream
        if isinstance(stream, Interruptible):
            stream.interrupt()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        need_list = True
        while not self._stop.is_set():
            problem: ApiError | None = self._list() if need_list else None
            if problem is None:
                need_list = False
                outcome = self._watch()
                if outcome == "stopped":
                    return
                if outcome == "gone":
                    need_list = True
                    continue
                if outcome == "ended":
                    failures = 0
                    continue
                assert isinstance(outcome, ApiError)
                problem = outcome
            self.failures += 1
            delay = max(self._backoff.delay(failures), problem.retry_after or 0.0)
            failures += 1
            log.warning("watch failed; watching again", extra={"path": self._path, "error": str(problem), "after_seconds": round(delay, 1)})
            if self._stop.wait(delay):
                return

    def _list(self) -> ApiError | None:
        seen: dict[str, Obj] = {}
        version = ""
        for page in self._kube.list_pages(self._path, self._params):
            body = page.value_or(None)
            if body is None:
                return page.failure()
            for obj in body[0]:
                seen[name_of(obj)] = obj
            version = body[1] or version
        for name, obj in seen.items():
            before = self._objects.get(name)
            if before is None or resource_version(before) != resource_version(obj):
                self._replace(name, obj)
        for name in [n for n in self.names() if n not in seen]:
            self._replace(name, None)
        self._version = version
        self._synced.set()
        return None

    def _watch(self) -> Literal["stopped", "gone", "ended"] | ApiError:
        started = time.monotonic()
        events = 0
        stream = self._kube.watch(self._path, self._version, timeout_seconds=self._watch_seconds, params=self._params)
        with self._lock:
            if self._stop.is_set():
                return "stopped"
            self._stream = stream
        try:
            for event in stream:
                events += 1
                self._handle(event)
        except KubeError as problem:
            if self._stop.is_set():
                return "stopped"
            return "gone" if problem.error.kind == "gone" else problem.error
        finally:
            with self._lock:
                self._stream = None
        if self._stop.is_set():
            return "stopped"
        if events == 0 and time.monotonic() - started < MIN_WATCH_SECONDS:
            return ApiError("bad_response", 200, "", "watch ended at once without events")  # never a hot loop
        return "ended"

    def _handle(self, event: WatchEvent) -> None:
        version = event.resource_version
        if version:
            self._version = version
        if event.type == "BOOKMARK":
            return
        self._replace(name_of(event.object), None if event.type == "DELETED" else event.object)

    def _replace(self, name: str, obj: Obj | None, *, only_if: str | None | bool = True) -> None:
        """Store ``obj`` (``None``: remove). ``only_if`` a version: only when the cache holds that
        version of ``name`` (``None``: only when it holds none); ``True``: unconditionally."""
        with self._lock:
            before = self._objects.get(name)
            if only_if is not True and (resource_version(before) if before is not None else None) != only_if:
                return
            if obj is None:
                self._objects.pop(name, None)
            else:
                self._objects[name] = obj
        if before is None and obj is None:
            return
        try:
            self._on_change(name, before, obj)
        except Exception:  # the owner's bug must not stop the cache
            log.exception("handling a change failed", extra={"path": self._path, "object": name})
