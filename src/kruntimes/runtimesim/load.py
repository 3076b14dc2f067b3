"""A burst of Runs for the scheduler: ``count`` Runs created at ``rate`` a second, once every pod
of the simulator's command-line fleets is Ready.

The Runs are named ``sim-<batch>-<n>`` and labelled with the batch (``kruntimes.io/runtime-sim-batch``),
so the simulator can tell when the batch has drained and ``--cleanup`` deletes exactly these. A
create that fails transiently is sent again under the same name (an ``AlreadyExists`` then means
the first one landed); one that is refused (403, 404 namespace, 422) ends the load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from returns.result import Success

from kruntimes.kubeclient.kube import RUNS, ApiError
from kruntimes.kubeclient.threads import named_thread
from kruntimes.kubeclient.workqueue import ExponentialDelay
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.client import BATCH_LABEL, SimulatorClient

log = logging.getLogger(__name__)

RETRY: ExponentialDelay = ExponentialDelay(base=0.1, cap=10.0)


def run_manifest(namespace: str, name: str, runtime: str, batch: str, manager: str, requests: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": {}}}
    if requests:
        spec["resources"] = {"requests": dict(requests)}
    return {
        "apiVersion": f"{decide.KRUNTIMES_GROUP}/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace, "labels": {decide.MANAGED_BY: manager, BATCH_LABEL: batch}},
        "spec": spec,
    }


class RunLoad:
    """Creates the batch on ``threads`` threads of its own (a create waits for the server's answer;
    a burst needs several in flight), through the client's token bucket."""

    def __init__(
        self, client: SimulatorClient, count: int, rate: float, runtimes: Sequence[str], batch: str,
        *, requests: Mapping[str, str] | None = None, threads: int = 4,
    ) -> None:
        if not runtimes:
            raise ValueError("a load needs at least one runtime")
        self._client = client
        self.count = count
        self.rate = rate
        self.runtimes = tuple(runtimes)
        self.batch = batch
        self._requests = dict(requests or {})
        self._threads = max(1, threads)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._next = 0
        self._began = 0.0
        self.created = 0
        self.first_at: float | None = None
        """When the first create was answered (monotonic)."""
        self.last_at: float | None = None
        self.refused: ApiError | None = None
        client.tally.batch = batch

    def start(self) -> None:
        for i in range(self._threads):
            worker = named_thread(self._create, f"sim-load-{i}")
            worker.start()
            self._workers.append(worker)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in self._workers:
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    @property
    def finished(self) -> bool:
        """Every Run was created, or the load ended early."""
        return self.created >= self.count or self.refused is not None

    def _take(self) -> int | None:
        """The next Run's number, or ``None`` when all are taken or the load ended."""
        with self._lock:
            if self._next >= self.count or self.refused is not None or self._stop.is_set():
                return None
            if self._next == 0:
                self._began = time.monotonic()
            self._next += 1
            return self._next - 1

    def _create(self) -> None:
        client = self._client
        # The load measures the scheduler, not pod start-up: Runs arrive once the pods are there.
        while not client.fleets_ready():
            if self._stop.wait(0.05):
                return
        path = RUNS.path(client.namespace)
        while (i := self._take()) is not None:
            if self.rate > 0 and self._stop.wait(max(0.0, self._began + i / self.rate - time.monotonic())):
                return
            name = f"sim-{self.batch}-{i:05d}"
            body = run_manifest(client.namespace, name, self.runtimes[i % len(self.runtimes)], self.batch, client.settings.manager, self._requests)
            failures = 0
            while True:
                if not client.limiter.take():
                    return
                result = client.kube.create(path, body)
                if isinstance(result, Success) or result.failure().kind == "already_exists":
                    now = time.monotonic()
                    with self._lock:
                        self.first_at = now if self.first_at is None else min(self.first_at, now)
                        self.last_at = now if self.last_at is None else max(self.last_at, now)
                        self.created += 1
                    break
                error = result.failure()
                if not error.retriable:
                    with self._lock:
                        self.refused = self.refused or error
                    log.error("creating Runs was refused; no more are created", extra={"namespace": client.namespace, "error": str(error)})
                    return
                delay = max(RETRY.delay(failures), error.retry_after or 0.0)
                failures += 1
                if self._stop.wait(delay):
                    return
