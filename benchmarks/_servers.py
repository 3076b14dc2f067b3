"""The server a benchmark runs on: the dev cluster, the test suite's real control plane, or any kubeconfig.

``--server dev`` starts ``python -m kruntimes.devcluster --no-simulator`` in its own process;
``--server real`` starts the pinned kube-apiserver and etcd of the test suite
(``tests/controlplane``, built once by ``hack/controlplane/build.sh``), applies ``deploy/`` and
gives the scheduler a TokenRequest token of its ServiceAccount, so deploy/ RBAC judges every
request it makes, as in a cluster; ``--server PATH`` uses the cluster of a kubeconfig as it is
(the scheduler runs on the same credentials unless ``--scheduler-kubeconfig`` names others; the
server's CPU is not read).

On every server the Runtime Pods, their heartbeats and (when asked) the Runs' execution come
from the runtime simulator as an API client (``kruntimes.runtimesim.client``), so a figure
means the same on each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import urllib3

REPO: Final = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kruntimes.kubeclient.kube import RUNS, Kube, load_configuration  # noqa: E402
from kruntimes.runtimesim.client import ClientSettings, SimulatorClient, fleets  # noqa: E402
from kruntimes.runtimesim.decide import RunSettings  # noqa: E402

SERVER_HELP: Final = ("dev (the dev cluster, default), real (the test suite's kube-apiserver + etcd, deploy/ applied, "
                      "the scheduler on its ServiceAccount token) or the path of a kubeconfig")
SCHEDULER_ACCOUNT: Final = ("kruntimes-system", "kruntimes-scheduler")


@dataclass
class Server:
    kind: str
    """``dev``, ``real`` or ``kubeconfig``."""
    admin_kubeconfig: Path
    """What the load, the floor's creates and the harness's watches use."""
    scheduler_kubeconfig: Path
    """What the scheduler and the floor's patches use (its ServiceAccount on ``real``)."""
    pids: dict[str, int] = field(default_factory=dict)
    """The server's processes, whose CPU is read (none for a kubeconfig's cluster)."""
    version: str = ""
    _stop: Callable[[], None] = lambda: None
    _namespaces: set[str] = field(default_factory=set)

    def admin(self, user_agent: str = "kruntimes-bench") -> Kube:
        return Kube(load_configuration(str(self.admin_kubeconfig)).unwrap().configuration, user_agent=user_agent)

    def cpu_seconds(self) -> float | None:
        """The server's processes' utime + stime, summed; ``None`` when they are not ours to read."""
        if not self.pids:
            return None
        from _common import cpu_seconds

        return sum(cpu_seconds(pid) for pid in self.pids.values())

    def namespace(self, name: str) -> str:
        """Make ``name`` (an existing one is fine); returns it."""
        if name in self._namespaces or self.kind == "dev":  # the dev cluster makes them on first use
            return name
        kube = self.admin()
        try:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            result = kube.create("/api/v1/namespaces", body)
            if result.value_or(None) is None and result.failure().kind != "already_exists":
                raise RuntimeError(f"cannot create namespace {name}: {result.failure()}")
        finally:
            kube.close()
        self._namespaces.add(name)
        return name

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "processes": sorted(self.pids)}

    def stop(self) -> None:
        self._stop()


def start_server(spec: str, tmp: Path, *, scheduler_kubeconfig: Path | None = None) -> Server:
    if spec == "dev":
        return _dev(tmp)
    if spec == "real":
        return _real(tmp)
    path = Path(spec)
    if not path.is_file():
        raise SystemExit(f"--server: {spec!r} is neither dev, real, nor a kubeconfig file")
    return Server("kubeconfig", path, scheduler_kubeconfig or path, version=_version(path))


def _dev(tmp: Path) -> Server:
    from _common import ServerProcess

    process = ServerProcess.start(tmp, ["--no-simulator", "--auto-create-namespaces", "--event-window", "1000000"], name="devcluster")
    return Server("dev", process.kubeconfig, process.kubeconfig, {"devcluster": process.pid}, "kruntimes dev cluster",
                  process.stop)


def _real(tmp: Path) -> Server:
    from tests.controlplane.server import ControlPlane, build_binaries

    plane = ControlPlane(tmp / "plane", build_binaries()).start()
    try:
        for args in (("apply", "--server-side", "-k", str(REPO / "deploy")),
                     ("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")):
            done = subprocess.run(["kubectl", "--kubeconfig", str(plane.admin_kubeconfig), *args], capture_output=True,
                                  text=True, timeout=120, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        token = plane.service_account_kubeconfig(tmp / "scheduler.kubeconfig", *SCHEDULER_ACCOUNT)
    except BaseException:
        plane.stop()
        raise
    etcd, apiserver = plane.pids()
    return Server("real", plane.admin_kubeconfig, token, {"etcd": etcd, "kube-apiserver": apiserver},
                  _version(plane.admin_kubeconfig) + " + etcd", plane.stop)


def _version(kubeconfig: Path) -> str:
    kube = Kube(load_configuration(str(kubeconfig)).unwrap().configuration)
    try:
        answer = kube.get("/version").value_or({})
    finally:
        kube.close()
    return f"kube-apiserver {answer.get('gitVersion', '?')}" if answer else "?"


# --- raw streams for the harness's own watches --------------------------------------------------


@dataclass(frozen=True)
class RawClient:
    """The kubeconfig's TLS pool, host and headers, for a watch read line by line (no decoding
    beyond what the harness needs)."""

    pool: urllib3.PoolManager
    host: str
    headers: Mapping[str, str]

    @classmethod
    def of(cls, kubeconfig: Path) -> RawClient:
        from kubernetes.client import ApiClient

        configuration = load_configuration(str(kubeconfig)).unwrap().configuration
        pool = ApiClient(configuration).rest_client.pool_manager
        headers = {"Accept": "application/json"}
        bearer = configuration.auth_settings().get("BearerToken")
        if bearer is not None and bearer["value"]:
            headers["Authorization"] = bearer["value"]
        return cls(pool, configuration.host.rstrip("/"), headers)

    def stream(self, path: str) -> urllib3.BaseHTTPResponse:
        return self.pool.request("GET", self.host + path, headers=dict(self.headers), preload_content=False,
                                 timeout=urllib3.Timeout(connect=10, read=None), retries=False)


def current_version(kube: Kube, path: str) -> str:
    return kube.current_version(path).unwrap()


# --- the load: the runtime simulator and Runs -----------------------------------------------------


def start_simulator(server: Server, namespace: str, *, pods: int, slots: int, run_seconds: float | None,
                    heartbeat: float = 5.0, workers: int = 8, timeout: float = 300.0) -> SimulatorClient:
    """``pods`` Runtime Pods of runtime ``python`` with ``runs: slots`` each, Ready and heart-beating;
    with ``run_seconds`` every Run bound to one is executed (Running at once, Succeeded after it)."""
    settings = ClientSettings(
        namespace=namespace,
        fleets=fleets(namespace, ["python"], pods, {"runs": str(slots)}),
        heartbeat_interval=heartbeat,
        runs=None if run_seconds is None else RunSettings(duration=run_seconds),
        qps=0,
        workers=workers,
    )
    simulator = SimulatorClient(server.admin("kruntimes-runtime-sim"), settings)
    simulator.start()
    deadline = time.monotonic() + timeout
    while not simulator.fleets_ready():
        if time.monotonic() > deadline:
            simulator.stop()
            raise RuntimeError(f"{namespace}: the simulator's {pods} pods were not Ready in {timeout:.0f} s")
        time.sleep(0.2)
    return simulator


def run_manifest(namespace: str, name: str, *, labels: Mapping[str, str] | None = None,
                 spec: Mapping[str, Any] | None = None) -> bytes:
    body = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": "bench"})},
        "spec": dict(spec or {"runtime": "python", "mode": {"task": {}}, "resources": {"requests": {"runs": "1"}}}),
    }
    return json.dumps(body, separators=(",", ":")).encode()


def create_runs(server: Server, namespace: str, bodies: Sequence[bytes], *, threads: int = 8,
                sent: dict[str, float] | None = None, rate: float = 0.0) -> float:
    """POST every body from ``threads`` threads (one kept connection each) as fast as the server
    answers, or ``rate`` a second overall; a transient failure is sent again. ``sent``: each Run's
    name -> ``time.perf_counter()`` just before its (last) send. Returns the creates per second."""
    kube = server.admin("kruntimes-bench-creator")
    path = RUNS.path(namespace)
    errors: list[str] = []
    began = time.perf_counter()

    def creator(index: int) -> None:
        for seq in range(index, len(bodies), threads):
            body = bodies[seq]
            if rate > 0:
                delay = began + seq / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            for attempt in range(20):
                at = time.perf_counter()
                result = kube.request("POST", path, body=body, content_type="application/json")
                if result.value_or(None) is not None:
                    if sent is not None:
                        sent[json.loads(body)["metadata"]["name"]] = at
                    break
                error = result.failure()
                if error.kind == "already_exists" and attempt:
                    break
                if not error.retriable:
                    errors.append(str(error))
                    return
                time.sleep(min(0.05 * 2 ** attempt, 2.0) if error.retry_after is None else error.retry_after)

    workers = [threading.Thread(target=creator, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    kube.close()
    if errors:
        raise RuntimeError(f"{len(errors)} creates failed, first: {errors[0]}")
    return len(bodies) / (time.perf_counter() - began)


class BindTimes(threading.Thread):
    """One watch of a namespace's Runs from a resourceVersion: when each Run was first seen bound
    (a phase other than Pending and an ``assignedPod``), in ``time.perf_counter()`` of this process."""

    def __init__(self, client: RawClient, namespace: str, resource_version: str) -> None:
        super().__init__(daemon=True, name=f"binds-{namespace}")
        self._path = (f"{RUNS.path(namespace)}?watch=1&resourceVersion={resource_version}"
                      "&timeoutSeconds=7200&allowWatchBookmarks=false")
        self._client = client
        self.bound: dict[str, float] = {}
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            response = self._response = self._client.stream(self._path)
            if response.status != 200:
                raise RuntimeError(f"watch answered {response.status}: {response.read()[:200]!r}")
            self.ready.set()
            buffer = b""
            bound = self.bound
            while not self._stopping.is_set():
                chunk = response.read1(1 << 20)
                if not chunk:
                    return
                now = time.perf_counter()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if b'"assignedPod"' not in line:
                        continue
                    obj = json.loads(line)["object"]
                    status = obj.get("status") or {}
                    if status.get("assignedPod") and status.get("phase") not in (None, "", "Pending"):
                        bound.setdefault(obj["metadata"]["name"], now)
        except BaseException as problem:  # noqa: BLE001 (reported to the waiting harness)
            if not self._stopping.is_set():
                self.error = problem
        finally:
            self.ready.set()

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                if isinstance(response, urllib3.HTTPResponse):
                    response.shutdown()
                response.close()
            except (OSError, RuntimeError, ValueError):
                pass


def write_report(benchmark: str, args: argparse.Namespace, began: float, machine: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Print a run's JSON document (its settings, machine and wall time with ``out``), and write it
    to ``--json-out`` when given."""
    document = {"benchmark": benchmark, "machine": dict(machine),
                "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "wall_seconds": round(time.monotonic() - began, 1)} | out
    text = json.dumps(document, indent=1)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text)
