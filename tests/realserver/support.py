"""Helpers for tests on the real control plane: kubectl as the admin, Runtime Pods made by hand."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

from kruntimes.kubeclient.kube import KubeError, WatchEvent, WatchStream
from tests.controlplane.server import ControlPlane
from tests.kubectl import Kubectl
from tests.polling import wait_until

REPO: Final = Path(__file__).resolve().parents[2]
SCHEDULER_NAMESPACE: Final = "kruntimes-system"
SCHEDULER_SERVICE_ACCOUNT: Final = "kruntimes-scheduler"
HEARTBEAT: Final = "kruntimes.io/RuntimedReady"


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as the admin; a non-zero exit fails the test with kubectl's own words."""
    return Kubectl(plane.admin_kubeconfig, server="real").ok(*args, stdin=stdin)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_runtime_pod(plane: ControlPlane, namespace: str, name: str, runtime: str, capacity: dict[str, str]) -> dict[str, Any]:
    """A Runtime Pod as runtimed leaves it: Running, Ready, with a fresh heartbeat and capacity annotations."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"runtime": runtime},
            "annotations": {f"kruntimes.io/capacity.{k}": v for k, v in capacity.items()},
        },
        "spec": {"containers": [{"name": "runtime", "image": "kruntimes/runtime:test"}]},
    }
    created = plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert isinstance(created, dict)
    stamp = now()
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": stamp} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ] + [{"type": HEARTBEAT, "status": "True", "lastTransitionTime": stamp, "lastProbeTime": stamp, "reason": "Heartbeat"}]
    status = {"phase": "Running", "conditions": conditions, "startTime": stamp, "podIP": "127.0.0.1", "hostIP": "127.0.0.1"}
    patched = plane.request_patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status})
    assert isinstance(patched, dict)
    return patched


def run_manifest(namespace: str, name: str, runtime: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtime": runtime, "mode": {"task": {}}, **spec},
    }


def create(plane: ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    created = plane.request("POST", path, body)
    assert isinstance(created, dict)
    return created


def runs(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    listed = plane.request("GET", f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs")
    assert isinstance(listed, dict)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def dumps(value: object) -> str:
    return json.dumps(value, indent=1, sort_keys=True)


KRUNTIMES: Final = Path(sys.executable).with_name("kruntimes")


def ready(health: str) -> bool:
    try:
        with urllib.request.urlopen(f"{health.rstrip('/')}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass
class SchedulerProcess:
    """``kruntimes scheduler`` as a process of its own, its log in a file (JSON lines).

    Its health probe (and its metrics, when a test asks for ``127.0.0.1:0``) listen on ports the
    scheduler picks itself: a port found free and handed over could be taken before the scheduler
    binds it. The addresses it bound are read from its "scheduler started" log line.
    """

    popen: subprocess.Popen[bytes]
    log: Path
    started: dict[str, Any] | None = None

    @classmethod
    def start(cls, kubeconfig: Path, log: Path, *args: str) -> SchedulerProcess:
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [str(KRUNTIMES), "scheduler", "--kubeconfig", str(kubeconfig), "--health-probe-bind-address",
                 "127.0.0.1:0", "--log-format", "json", *args],
                stdout=out, stderr=subprocess.STDOUT,
            )
        return cls(popen, log)

    def _started(self) -> dict[str, Any] | None:
        if self.started is None:
            for line in self.log.read_text(errors="replace").splitlines():
                if '"scheduler started"' in line:
                    self.started = json.loads(line)
                    break
        return self.started

    def url(self, server: str) -> str:
        """The URL the scheduler's ``metrics`` or ``health`` server listens on, from its start-up line."""
        wait_until(lambda: self._started() is not None or self.popen.poll() is not None, timeout=60, interval=0.1,
                   what="the scheduler's start-up line")
        started = self._started()
        assert started is not None, f"the scheduler exited before it started: {self.tail()}"
        url = started[server]
        assert isinstance(url, str) and url.startswith(("http://", "https://")), f"{server}: {url!r}"
        return url

    def wait_ready(self) -> None:
        health = self.url("health")
        wait_until(lambda: ready(health) or self.popen.poll() is not None, timeout=60, interval=0.1, what="/readyz")
        assert self.popen.poll() is None, f"the scheduler exited: {self.tail()}"

    def tail(self, size: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-size:]

    def refused_requests(self) -> list[str]:
        """Log lines that report a request the API server refused with 401 or 403."""
        return [line for line in self.log.read_text(errors="replace").splitlines()
                if "HTTP 403" in line or "HTTP 401" in line or "forbidden" in line.lower()]

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.terminate()
        return self.popen.wait(30)

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(30)


def apply_rendered(plane: ControlPlane, directory: Path) -> None:
    """``kubectl kustomize DIR | kubectl apply -f -`` as the admin, CRDs established before returning."""
    rendered = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert rendered.returncode == 0, rendered.stderr
    kubectl(plane, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered.stdout)
    kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


class Events:
    """A watch's events, read on a thread of their own as they arrive."""

    def __init__(self, stream: WatchStream) -> None:
        self.stream = stream
        self.queue: queue.Queue[WatchEvent] = queue.Queue()
        self.error: KubeError | None = None
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                self.queue.put(event)
        except KubeError as problem:
            self.error = problem
        finally:
            self.ended.set()

    def next(self, what: str) -> WatchEvent:
        try:
            return self.queue.get(timeout=30)
        except queue.Empty:
            raise AssertionError(f"no watch event within 30 s: {what}") from None

    def wait_ended(self) -> None:
        assert self.ended.wait(30), "the watch did not end"

    def stop(self) -> None:
        self.stream.interrupt()
        self._thread.join(30)
