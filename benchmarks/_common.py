"""Shared plumbing of the end-to-end benchmarks (``e2e.py``, ``memory.py``): processes, raw HTTP, /proc.

Everything talks raw HTTP with urllib3 (no typed client), so the load generator
costs as little CPU as possible next to the processes it measures; the dev
server and the scheduler each run in their own process (their own GIL), read
through ``/proc/<pid>``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import urllib3

RUNS_PATH: Final = "/apis/kruntimes.io/v1alpha1/namespaces/{ns}/runs"
ALL_RUNS_PATH: Final = "/apis/kruntimes.io/v1alpha1/runs"
PODS_PATH: Final = "/api/v1/namespaces/{ns}/pods"
JSON_HEADERS: Final = {"Content-Type": "application/json", "Accept": "application/json"}
MERGE_HEADERS: Final = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")
VENV_BIN: Final = Path(sys.executable).parent


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- /proc --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all threads), in seconds."""
    user, system = cpu_split(pid)
    return user + system


def cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of ``pid`` (all threads), in seconds: the interpreter's own work, and the
    kernel's on its behalf (system calls: sockets, futexes of threads handing the GIL on)."""
    fields = _stat_fields(pid)
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def page_faults(pid: int) -> int:
    """Minor page faults of ``pid`` (all threads) so far: pages the kernel mapped in on first touch
    (a heap or arena growing back after it was given back), each paid in system time."""
    return int(_stat_fields(pid)[7])


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces): ``state`` first."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def context_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far (a thread that blocked:
    on a socket, a lock, the GIL); threads that already ended are not counted."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            total += voluntary_switches(status.read_text())
        except OSError:
            continue  # the thread ended
    return total


def voluntary_switches(status: str) -> int:
    """The ``voluntary_ctxt_switches`` of one thread's ``/proc/.../status`` text."""
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def kind_of(name: str) -> str:
    """Threads of one kind under one name: ``worker-1-3`` -> ``worker``, ``safety-net-2`` -> ``safety-net``."""
    return re.sub(r"(-\d+)+$", "", name)


def thread_cpu(pid: int) -> dict[str, tuple[int, int]]:
    """Kind of thread -> (ns on the CPU, voluntary context switches), summed over its threads."""
    out: dict[str, tuple[int, int]] = {}
    task_dir = Path(f"/proc/{pid}/task")
    for task in task_dir.iterdir():
        try:
            name = (task / "comm").read_text().strip()
            cpu = int((task / "schedstat").read_text().split()[0])
            switches = voluntary_switches((task / "status").read_text())
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
        kind = kind_of(name)
        before = out.get(kind, (0, 0))
        out[kind] = (before[0] + cpu, before[1] + switches)
    return out


def threads_per_bind(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                     binds: int) -> dict[str, dict[str, float]]:
    """Each kind of thread's µs of CPU and voluntary switches per bind between two ``thread_cpu``
    readings, costliest first; empty without binds or without a first reading. A thread wakes at
    each voluntary switch, and on this kind of machine a wake-up costs tens of µs of CPU on its
    own (more with the caches it finds cold), so the switches say where batching was lost."""
    if not binds or not before:
        return {}
    spent = {
        kind: {"us": round((cpu - before.get(kind, (0, 0))[0]) / 1e3 / binds, 1),
               "switches": round((switches - before.get(kind, (0, 0))[1]) / binds, 2)}
        for kind, (cpu, switches) in after.items()
    }
    return dict(sorted(spent.items(), key=lambda kv: -kv[1]["us"]))


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "loadavg_at_start": os.getloadavg(),
    }


# --- processes ------------------------------------------------------------------------------


PLACEMENTS: Final = ("split", "shared")


@dataclass(frozen=True)
class Placement:
    """Which CPUs the schedulers get, and which the rest (the dev cluster and this harness) get.

    ``split`` gives the schedulers the first CPU this process may use and the rest everything
    else, as a cluster does (the API server and the scheduler are not on the same cores there):
    sharing two cores with the dev cluster, whose CPU per bind is about twice the scheduler's,
    inflates the scheduler's own CPU per bind by ~15 % on this machine through migrations and
    caches the other process filled (docs/performance.md). ``shared`` lets every process run
    anywhere, as earlier rounds measured. With fewer than two CPUs ``split`` falls back to it.
    ``spread`` (``shards.py``) gives each of ``schedulers`` schedulers a CPU of its own, as replicas
    on a cluster's nodes have, and the rest what remains; with fewer than ``schedulers + 1`` CPUs it
    falls back to ``split`` (``describe`` says what was asked). ``apart`` (``shards.py``) needs only
    two CPUs: the scheduler of slot ``measured`` gets the first to itself, every other scheduler
    shares the rest with the dev cluster, so one replica at a time runs as it would on a node of
    its own.
    """

    mode: str
    scheduler: frozenset[int] | None = None
    rest: frozenset[int] | None = None
    own: tuple[int, ...] = ()
    """``spread``: the CPU of the scheduler of each slot."""
    asked: str = ""
    measured: int = 0
    """``apart``: the slot whose scheduler has the first CPU to itself."""

    @classmethod
    def of(cls, mode: str, schedulers: int = 1) -> Placement:
        allowed = sorted(os.sched_getaffinity(0))
        if mode == "spread" and len(allowed) > schedulers:
            own = tuple(allowed[:schedulers])
            return cls("spread", frozenset(own), frozenset(allowed[schedulers:]), own, mode)
        if mode not in ("split", "spread", "apart") or len(allowed) < 2:
            return cls("shared", asked=mode)
        return cls("apart" if mode == "apart" else "split", frozenset(allowed[:1]), frozenset(allowed[1:]), asked=mode)

    def measuring(self, slot: int) -> Placement:
        """This placement with ``slot`` the one ``apart`` gives a CPU of its own (the same otherwise)."""
        return replace(self, measured=slot)

    def enter(self) -> None:
        """Put this process (and so the dev clusters it starts) on the rest's CPUs; call it
        before any thread starts, since a thread keeps the CPUs it was created with."""
        if self.rest is not None:
            os.sched_setaffinity(0, self.rest)

    def place_scheduler(self, pid: int, slot: int = 0) -> None:
        """Put a scheduler just started on the schedulers' CPUs, or (``spread``) on its slot's own
        CPU; its threads, made later, inherit them."""
        if self.own:
            os.sched_setaffinity(pid, {self.own[slot % len(self.own)]})
        elif self.mode == "apart" and slot != self.measured and self.rest is not None:
            os.sched_setaffinity(pid, self.rest)
        elif self.scheduler is not None:
            os.sched_setaffinity(pid, self.scheduler)

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "asked": self.asked or self.mode, "scheduler_cpus": sorted(self.scheduler or ()),
                "rest_cpus": sorted(self.rest or ())}


@dataclass
class ServerProcess:
    """``python -m kruntimes.devcluster`` in its own process."""

    proc: subprocess.Popen[str]
    url: str
    kubeconfig: Path

    @classmethod
    def start(cls, tmp: Path, args: Sequence[str], name: str = "server") -> ServerProcess:
        kubeconfig = tmp / f"{name}.kubeconfig"
        proc = subprocess.Popen(
            [sys.executable, "-m", "kruntimes.devcluster", "--port", "0", "--kubeconfig-out", str(kubeconfig), *args],
            stdout=subprocess.PIPE,
            stderr=open(tmp / f"{name}.stderr", "w"),
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.match(r"listening on (http://\S+)", line)
            if m:
                server = cls(proc, m.group(1), kubeconfig)
                # keep draining stdout so the server never blocks on a full pipe
                threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
                return server
        proc.kill()
        raise RuntimeError("the dev cluster did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def start_scheduler(kubeconfig: Path, tmp: Path, *, workers: int, namespace: str | None, name: str = "scheduler",
                    extra: Sequence[str] = (), env: Mapping[str, str] | None = None,
                    placement: Placement | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """``kruntimes scheduler`` in its own process; returns it and its metrics URL."""
    port = free_port()
    cmd = [
        str(VENV_BIN / "kruntimes"), "scheduler", "--kubeconfig", str(kubeconfig), "--workers", str(workers),
        "--metrics-bind-address", f"127.0.0.1:{port}", "--health-probe-bind-address", f"127.0.0.1:{port}",
        "--log-format", "json", "--leader-elect=false", *extra,
    ]
    if namespace is not None:
        cmd += ["--namespace", namespace]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / f"{name}.stderr", "wb"),
                            env={**os.environ, **(env or {})})
    if placement is not None:
        placement.place_scheduler(proc.pid)
    return proc, f"http://127.0.0.1:{port}"


def wait_http_ok(url: str, timeout: float = 120.0) -> bool:
    http = urllib3.PoolManager(retries=False, timeout=2.0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http.request("GET", url).status == 200:
                return True
        except urllib3.exceptions.HTTPError:
            pass
        time.sleep(0.05)
    return False


def scrape(url: str) -> dict[str, float]:
    """``/metrics`` as ``{"name{labels}": value}`` (no parsing beyond the exposition lines)."""
    text = urllib3.PoolManager(retries=False).request("GET", url + "/metrics").data.decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


# --- raw HTTP ------------------------------------------------------------------------------------


class Http:
    """A small JSON client over one urllib3 pool."""

    def __init__(self, url: str, maxsize: int = 4) -> None:
        self.url = url.rstrip("/")
        self.pool = urllib3.PoolManager(retries=False, maxsize=maxsize, timeout=urllib3.Timeout(connect=10, read=120))

    def call(self, method: str, path: str, body: object = None, headers: Mapping[str, str] = JSON_HEADERS) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        resp = self.pool.request(method, self.url + path, body=data, headers=dict(headers))
        try:
            parsed = json.loads(resp.data) if resp.data else None
        except ValueError:
            parsed = resp.data
        return resp.status, parsed

    def ok(self, method: str, path: str, body: object = None, headers: Mapping[str, str] = JSON_HEADERS) -> Any:
        status, parsed = self.call(method, path, body, headers)
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path}: {status} {str(parsed)[:300]}")
        return parsed

    def fault(self, rule: Mapping[str, object]) -> Any:
        return self.ok("POST", "/_devcluster/faults", rule)

    def resource_version(self, path: str) -> str:
        listed = self.ok("GET", path + "?limit=1")
        return str(listed["metadata"]["resourceVersion"])


def run_body(namespace: str, name: str, runtime: str = "python", labels: Mapping[str, str] | None = None) -> bytes:
    return json.dumps(
        {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": "bench"})},
            "spec": {"runtime": runtime, "mode": {"task": {}}, "resources": {"requests": {"runs": "1"}}},
        },
        separators=(",", ":"),
    ).encode()


def in_parallel(creators: int, creator: Callable[[int], None], errors: Sequence[str]) -> None:
    """Run ``creator(0 .. creators - 1)`` on threads of their own, wait for all, and fail with the
    first of the ``errors`` they collected."""
    threads = [threading.Thread(target=creator, args=(i,), daemon=True) for i in range(creators)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} creates failed, first: {errors[0]}")


def create_runs(url: str, namespace: str, names: Sequence[str], *, creators: int, rate: float | None = None,
                runtime: str = "python", sent: dict[tuple[str, str], float] | None = None) -> dict[tuple[str, str], float]:
    """POST Runs from ``creators`` threads (own pools), as fast as the server accepts or paced at
    ``rate`` per second overall; returns (namespace, name) -> perf_counter() just before each send."""
    out: dict[tuple[str, str], float] = {} if sent is None else sent
    lock = threading.Lock()
    path = url.rstrip("/") + RUNS_PATH.format(ns=namespace)
    errors: list[str] = []
    begin = time.perf_counter()

    def creator(index: int) -> None:
        pool = urllib3.PoolManager(retries=False, maxsize=1, timeout=urllib3.Timeout(connect=10, read=120))
        local: dict[tuple[str, str], float] = {}
        for seq in range(index, len(names), creators):
            name = names[seq]
            body = run_body(namespace, name, runtime)
            if rate is not None:
                due = begin + seq / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            t0 = time.perf_counter()
            local[(namespace, name)] = t0
            resp = pool.request("POST", path, body=body, headers=JSON_HEADERS)
            if resp.status != 201:
                errors.append(f"{resp.status} {resp.data[:200]!r}")
                del local[(namespace, name)]
        with lock:
            out.update(local)

    in_parallel(creators, creator, errors)
    return out


def wait_pods_ready(http: Http, namespace: str, count: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = http.ok("GET", PODS_PATH.format(ns=namespace) + "?labelSelector=runtime")
        ready = sum(
            1
            for pod in listed["items"]
            if pod.get("status", {}).get("phase") == "Running"
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions", []))
        )
        if ready >= count:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{namespace}: fewer than {count} Runtime Pods became ready in {timeout}s")


@dataclass(eq=False)
class BindWatcher(threading.Thread):
    """Watches every Run from a resourceVersion; records when each was first seen bound.

    Bound = a non-Pending phase with an ``assignedPod`` (the bind's MODIFIED event). The
    receive time is ``time.perf_counter()`` at the moment the chunk carrying it arrived,
    comparable with the creators' send times (same process).
    """

    url: str
    resource_version: str
    bound: dict[tuple[str, str], float] = field(default_factory=dict)
    seen_pending: dict[tuple[str, str], int] = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="bind-watcher")
        self._stop_flag = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=10, read=None))
        query = f"?watch=1&resourceVersion={self.resource_version}&timeoutSeconds=7200&allowWatchBookmarks=false"
        try:
            resp = pool.request("GET", self.url.rstrip("/") + ALL_RUNS_PATH + query, headers=JSON_HEADERS, preload_content=False)
            self._response = resp
            self.ready.set()
            buffer = b""
            loads = json.loads
            bound = self.bound
            while not self._stop_flag.is_set():
                chunk = resp.read1(1 << 20)
                if not chunk:
                    return
                now = time.perf_counter()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if b'"assignedPod"' not in line:
                        continue
                    event = loads(line)
                    obj = event["object"]
                    status = obj.get("status") or {}
                    if status.get("assignedPod") and status.get("phase") not in (None, "", "Pending"):
                        meta = obj["metadata"]
                        key = (meta["namespace"], meta["name"])
                        if key not in bound:
                            bound[key] = now
        except BaseException as exc:
            if not self._stop_flag.is_set():
                self.error = exc
            self.ready.set()

    def stop(self) -> None:
        self._stop_flag.set()
        resp = self._response
        if resp is not None:
            try:
                if isinstance(resp, urllib3.HTTPResponse):
                    resp.shutdown()
                resp.close()
            except (OSError, RuntimeError, ValueError):
                pass

    def count(self, namespace: str, names: Iterable[str] | None = None) -> int:
        if names is None:
            return sum(1 for ns, _ in list(self.bound) if ns == namespace)
        bound = self.bound
        return sum(1 for n in names if (namespace, n) in bound)

    def wait_all(self, namespace: str, names: Sequence[str], timeout: float, progress: Callable[[], None] | None = None) -> bool:
        deadline = time.monotonic() + timeout
        wanted = {(namespace, n) for n in names}
        while time.monotonic() < deadline:
            if self.error is not None:
                raise RuntimeError(f"the bind watcher failed: {self.error!r}")
            missing = wanted.difference(self.bound)
            if not missing:
                return True
            wanted = missing
            if progress is not None:
                progress()
            time.sleep(0.05)
        return False


def throughput_samples(times: Sequence[float], start: float, end: float) -> list[int]:
    """Binds per whole second of [start, end) (the last partial second dropped)."""
    seconds = int(end - start)
    bins = [0] * max(seconds, 0)
    for t in times:
        i = int(t - start)
        if 0 <= i < seconds:
            bins[i] += 1
    return bins


def summarize(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"avg": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "n": 0}
    return {
        "avg": round(sum(values) / len(values), 2),
        "p50": round(percentile(values, 0.50), 2),
        "p90": round(percentile(values, 0.90), 2),
        "p99": round(percentile(values, 0.99), 2),
        "n": len(values),
    }


# --- profiling -----------------------------------------------------------------------------------------


@dataclass
class Profiler:
    proc: subprocess.Popen[bytes]
    path: Path


def start_profiler(pid: int, directory: Path, label: str, rate: int = 250) -> Profiler:
    """``py-spy record`` (collapsed stacks, all threads, idle samples dropped) attached to ``pid``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{label.replace('@', '-')}.collapsed"
    proc = subprocess.Popen(
        [str(VENV_BIN / "py-spy"), "record", "--pid", str(pid), "--gil", "--format", "raw", "--rate", str(rate), "--output", str(path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return Profiler(proc, path)


def stop_profiler(profiler: Profiler, top: int = 25) -> dict[str, Any]:
    profiler.proc.send_signal(signal.SIGINT)
    try:
        profiler.proc.wait(30)
    except subprocess.TimeoutExpired:
        profiler.proc.kill()
    return top_of_collapsed(profiler.path, top) | {"file": str(profiler.path)}


def top_of_collapsed(path: Path, top: int = 25) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    if not path.exists():
        return {"samples": 0, "self": [], "inclusive": []}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")" if " (" in f else f for f in stack.split(";")]
        total += count
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for f in set(frames):
            inclusive[f] = inclusive.get(f, 0) + count

    def ranked(table: dict[str, int]) -> list[str]:
        return [f"{100 * n / max(total, 1):5.1f}% {name}" for name, n in sorted(table.items(), key=lambda kv: -kv[1])[:top]]

    return {"samples": total, "self": ranked(own), "inclusive": ranked(inclusive)}
