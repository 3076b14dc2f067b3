"""What the demo sees: one watcher thread recording when each Run changes, with sub-second precision.

Kubernetes timestamps have whole-second precision, so latency is measured on
this machine's monotonic clock instead: a Run's creation is the instant just
before our client sent its ``POST`` (:meth:`RunWatcher.created`), and its
scheduling is the instant the watch event that first shows it assigned was
received. Both ends are observed by the same process, so the difference is
exact up to the watch's delivery delay (loopback: well under a millisecond).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from returns.pipeline import is_successful

from kruntimes.kubeclient.kube import RUNS, JSONObject, Kube, KubeError
from kruntimes.pure.model.objects import PENDING, SUCCEEDED

log = logging.getLogger(__name__)

WATCH_SECONDS: Final = 30
ASSIGNED_PHASES: Final = frozenset({"Scheduled", "Running", "Ready", "Succeeded", "Failed", "Timeout", "Cancelled"})


@dataclass(frozen=True, slots=True)
class Seen:
    """One Run as observed so far (monotonic seconds; ``None`` until it happened)."""

    created: float | None = None
    scheduled: float | None = None
    finished: float | None = None
    pod: str = ""
    phase: str = PENDING
    message: str = ""
    waited: bool = False
    """The scheduler wrote a Pending status with a waiting message: no pod could take it at first."""


def _field(obj: Mapping[str, object], *path: str) -> str:
    value: object = obj
    for key in path:
        if not isinstance(value, Mapping):
            return ""
        value = value.get(key)
    return value if isinstance(value, str) else ""


def observe(seen: Seen, obj: Mapping[str, object], at: float) -> Seen:
    """``seen`` updated with one observed version of the Run, received at ``at``."""
    phase = _field(obj, "status", "phase") or PENDING
    pod = _field(obj, "status", "assignedPod")
    message = _field(obj, "status", "message")
    updated = replace(seen, phase=phase, message=message)
    if seen.scheduled is None and pod and phase in ASSIGNED_PHASES:
        updated = replace(updated, scheduled=at, pod=pod)
    if phase == PENDING and message:
        updated = replace(updated, waited=True)
    if phase == SUCCEEDED and seen.finished is None:
        updated = replace(updated, finished=at)
    return updated


class RunWatcher:
    """List + watch the Runs of one namespace on a daemon thread; :meth:`seen` is a consistent copy."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self._kube = kube
        self._path = RUNS.path(namespace)
        self._lock = threading.Lock()
        self._seen: dict[str, Seen] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-watch", daemon=True)
        self.error: str | None = None

    def start(self, timeout: float = 10.0) -> bool:
        """Start watching; ``True`` once the first list is in (so no event is missed after it)."""
        self._thread.start()
        return self._synced.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(0.5)  # a watch blocked on a quiet stream ends when the server stops

    def created(self, name: str) -> None:
        """Record that our client is about to create ``name`` (call just before the ``POST``)."""
        at = time.monotonic()
        with self._lock:
            self._seen[name] = replace(self._seen.get(name, Seen()), created=at)

    def seen(self) -> dict[str, Seen]:
        with self._lock:
            return dict(self._seen)

    def _apply(self, obj: JSONObject, at: float) -> None:
        name = _field(obj, "metadata", "name")
        if not name:
            return
        with self._lock:
            self._seen[name] = observe(self._seen.get(name, Seen()), obj, at)

    def _loop(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listed = self._kube.list(self._path)
                    if not is_successful(listed):
                        self.error = str(listed.failure())
                        self._stop.wait(0.2)
                        continue
                    items, version = listed.unwrap()
                    now = time.monotonic()
                    for item in items:
                        self._apply(item, now)
                    self._synced.set()
                for event in self._kube.watch(self._path, version, timeout_seconds=WATCH_SECONDS):
                    received = time.monotonic()
                    if self._stop.is_set():
                        return
                    version = event.resource_version or version
                    if event.type != "BOOKMARK":
                        self._apply(event.object, received)
            except KubeError as problem:
                if self._stop.is_set():
                    return
                if problem.error.kind == "gone":
                    version = ""  # relist
                else:
                    self.error = str(problem.error)
                    self._stop.wait(0.2)
