"""A load generator for the dev cluster: concurrent status writers and watchers over raw HTTP.

Writers PATCH ``runs/<name>/status`` (merge patch, no resourceVersion, so
they never conflict) from several threads with their own urllib3 pools and
record each write's send time by the resourceVersion the server answered.
Watchers stream ``?watch=1`` from the setup's resourceVersion and record what
they receive and when. The result says how fast writes commit and how long an
event takes from the write being sent to each watcher receiving it, and checks
the watch contract: every watcher saw every write exactly once, in order.

Used by ``benchmarks/apiserver_load.py`` (full size) and by the test suite (small size).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Final, final

import urllib3

PATH: Final = "/apis/kruntimes.io/v1alpha1/namespaces/{ns}/runs"


@final
@dataclass(frozen=True, slots=True)
class LoadSpec:
    writers: int = 4
    writes_per_writer: int = 500
    watchers: int = 4
    runs: int = 20
    namespace: str = "default"
    timeout: float = 120.0


@final
@dataclass(slots=True)
class WatcherReport:
    received: int = 0
    lost: int = 0
    duplicates: int = 0
    reordered: int = 0
    latencies: list[float] = field(default_factory=list)


@final
@dataclass(frozen=True, slots=True)
class LoadResult:
    spec: LoadSpec
    writes: int
    write_seconds: float
    writes_per_second: float
    conflicts_or_errors: int
    events_expected_per_watcher: int
    events_received: int
    lost: int
    duplicates: int
    reordered: int
    latency_ms_median: float
    latency_ms_p99: float
    latency_ms_max: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"{self.writes} status writes by {self.spec.writers} writers in {self.write_seconds:.2f}s = {self.writes_per_second:.0f} writes/s; "
            f"{self.spec.watchers} watchers: latency median {self.latency_ms_median:.1f} ms, p99 {self.latency_ms_p99:.1f} ms; "
            f"lost {self.lost}, duplicated {self.duplicates}, reordered {self.reordered}"
        )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Watcher(threading.Thread):
    def __init__(self, url: str, headers: dict[str, str], sentinel: str) -> None:
        super().__init__(daemon=True)
        self._url = url
        self._headers = headers
        self._sentinel = sentinel
        self.received: list[tuple[int, float]] = []
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=5, read=None))
        try:
            resp = http.request("GET", self._url, headers=self._headers, preload_content=False)
            self.ready.set()
            buffer = b""
            for chunk in resp.stream(None):
                now = time.perf_counter()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["object"].get("status", {}).get("message") == self._sentinel:
                        resp.release_conn()
                        return
                    if event["type"] == "MODIFIED":
                        self.received.append((int(event["object"]["metadata"]["resourceVersion"]), now))
        except BaseException as exc:  # reported in the result, never swallowed
            self.error = exc
            self.ready.set()


def run_load(base_url: str, spec: LoadSpec, *, token: str | None = None) -> LoadResult:
    """Create ``spec.runs`` Runs, start the watchers, run the writers, collect and check."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    http = urllib3.PoolManager(retries=False, maxsize=spec.writers + 2)
    collection = base_url + PATH.format(ns=spec.namespace)
    stamp = int(time.time() * 1000)
    names = [f"load-{stamp}-{i}" for i in range(spec.runs)]
    for name in names:
        body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name, "labels": {"kruntimes.io/load": str(stamp)}}, "spec": {"runtime": "load", "mode": {"task": {}}}}
        resp = http.request("POST", collection, body=json.dumps(body), headers=headers)
        if resp.status != 201:
            raise RuntimeError(f"setup failed: {resp.status} {resp.data[:200]!r}")
    listed = json.loads(http.request("GET", collection, headers=headers).data)
    start_rv = listed["metadata"]["resourceVersion"]
    sentinel = f"sentinel-{stamp}"
    watchers = [_Watcher(f"{collection}?watch=1&resourceVersion={start_rv}&labelSelector=kruntimes.io%2Fload%3D{stamp}", headers, sentinel) for _ in range(spec.watchers)]
    for w in watchers:
        w.start()
    for w in watchers:
        w.ready.wait(10)

    sent: dict[int, float] = {}
    failures = [0]
    sent_lock = threading.Lock()

    def writer(index: int) -> None:
        pool = urllib3.PoolManager(retries=False, maxsize=1)
        local: dict[int, float] = {}
        bad = 0
        for seq in range(spec.writes_per_writer):
            name = names[(index + seq * spec.writers) % len(names)]
            body = json.dumps({"status": {"phase": "Running", "message": f"writer {index} write {seq}"}})
            t0 = time.perf_counter()
            resp = pool.request("PATCH", f"{collection}/{name}/status", body=body, headers={**headers, "Content-Type": "application/merge-patch+json"})
            if resp.status != 200:
                bad += 1
                continue
            local[int(json.loads(resp.data)["metadata"]["resourceVersion"])] = t0
        with sent_lock:
            sent.update(local)
            failures[0] += bad

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(spec.writers)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - begin

    # A sentinel write after every measured one: each watcher stops once it has seen it.
    http.request("PATCH", f"{collection}/{names[0]}/status", body=json.dumps({"status": {"message": sentinel}}), headers={**headers, "Content-Type": "application/merge-patch+json"})
    for w in watchers:
        w.join(spec.timeout)
        if w.is_alive():
            raise RuntimeError(f"a watcher did not see the sentinel within {spec.timeout}s")

    expected = sorted(sent)
    reports = []
    for w in watchers:
        if w.error is not None:
            raise RuntimeError(f"a watcher failed: {w.error!r}")
        report = WatcherReport()
        rvs = [rv for rv, _ in w.received]
        report.received = len(rvs)
        report.duplicates = len(rvs) - len(set(rvs))
        report.reordered = sum(1 for a, b in zip(rvs, rvs[1:]) if b <= a)
        report.lost = len(set(expected) - set(rvs))
        report.latencies = [(at - sent[rv]) * 1000 for rv, at in w.received if rv in sent]
        reports.append(report)
    latencies = [x for r in reports for x in r.latencies]
    return LoadResult(
        spec=spec,
        writes=len(sent),
        write_seconds=elapsed,
        writes_per_second=len(sent) / elapsed if elapsed > 0 else 0.0,
        conflicts_or_errors=failures[0],
        events_expected_per_watcher=len(expected),
        events_received=sum(r.received for r in reports),
        lost=sum(r.lost for r in reports),
        duplicates=sum(r.duplicates for r in reports),
        reordered=sum(r.reordered for r in reports),
        latency_ms_median=statistics.median(latencies) if latencies else 0.0,
        latency_ms_p99=_percentile(latencies, 0.99),
        latency_ms_max=max(latencies, default=0.0),
    )
