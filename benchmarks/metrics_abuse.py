"""Scheduling while thousands of connections sit on the metrics port.

    .venv/bin/python benchmarks/metrics_abuse.py                          # half-open, slowloris, reconnect: ~11 min
    .venv/bin/python benchmarks/metrics_abuse.py --attacks half-open --connections 4000
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/metrics_abuse.py   # another tree's scheduler

Processes: the dev API server (``python -m kruntimes.devcluster --execute-runs 1s``: 10 Runtime
Pods × 2 slots, each bound Run finishes a second later), one scheduler (``kruntimes scheduler
--workers 4``, metrics and probes on two ports as ``deploy/`` has them; on a CPU of its own with
``--placement split``), this harness, and the attacker, a process of its own (its sockets cost
the harness nothing).

Per attack, a fresh cluster and scheduler, and a steady trickle of Runs (``--rate`` a second)
for the whole time: ``--before`` seconds quiet; then the attacker opens ``--connections`` TCP
connections to the metrics port (``--open-rate`` a second) and holds them until ``--hold`` seconds
have passed; then it closes them all, and ``--after`` seconds follow. Attacks:

- ``half-open``: each connection sends nothing.
- ``slowloris``: each sends ``GET /metrics HTTP/1.1`` and then one header byte a second, never
  ending the head.
- ``reconnect``: as ``half-open``, but every connection the server closed or refused is opened
  again once a second, so the attacker keeps asking for all of them.

Measured per phase (before / during / after, a Run belonging to the phase it was created in):
creation → bind latency (the harness's send time to the bind's watch event; Runs never bound count
with the time they had waited), the scheduler's threads, resident memory and CPU (``/proc``, every
0.25 s), and a kubelet-like ``GET /readyz`` on the probe port every 0.5 s with a 2 s timeout. The
attacker reports how many connections it held over time.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import urllib3  # noqa: E402

from _common import (  # noqa: E402
    ALL_RUNS_PATH,
    BindWatcher,
    Http,
    Placement,
    ServerProcess,
    cpu_seconds,
    create_runs,
    free_port,
    machine,
    percentile,
    scrape,
    start_scheduler,
    status_kib,
    stop_process,
    wait_http_ok,
)

NAMESPACE = "bench"
PODS, SLOTS = 10, 2
WORKERS = 4
ATTACKS = ("half-open", "slowloris", "reconnect")


# --- the attacker (a process of its own) ----------------------------------------------------------


def attack(mode: str, port: int, connections: int, hold: float, open_rate: float) -> None:
    """Open ``connections`` to 127.0.0.1:``port`` (``open_rate`` a second, 0: all at once), hold them
    ``hold`` seconds from the start as ``mode`` says, close them; print JSON lines (``opened``, samples
    of ``held``, ``released``) on stdout."""
    began = time.monotonic()
    selector = selectors.DefaultSelector()
    held: set[socket.socket] = set()
    counts = {"opened": 0, "refused": 0, "closed_by_server": 0, "reopened": 0}

    def open_one() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(("127.0.0.1", port))
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            counts["refused"] += 1
            return
        selector.register(sock, selectors.EVENT_WRITE, "connecting")

    def drop(sock: socket.socket) -> None:
        if sock in held:
            held.discard(sock)
        try:
            selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def step(timeout: float) -> None:
        for key, _ in selector.select(timeout):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if key.data == "connecting":
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    counts["refused"] += 1
                    drop(sock)
                    continue
                counts["opened"] += 1
                held.add(sock)
                selector.modify(sock, selectors.EVENT_READ, "held")
                if mode == "slowloris":
                    try:
                        sock.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    except OSError:
                        counts["closed_by_server"] += 1
                        drop(sock)
            else:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    counts["closed_by_server"] += 1
                    drop(sock)

    def say(event: str) -> None:
        print(json.dumps({"event": event, "t": round(time.monotonic() - began, 2), "held": len(held), **counts}), flush=True)

    started = 0
    while started < connections and time.monotonic() - began < hold:
        due = connections if open_rate <= 0 else min(connections, int((time.monotonic() - began) * open_rate) + 1)
        for _ in range(due - started):
            open_one()
        started = due
        step(0.0 if open_rate <= 0 else 0.01)
    deadline = time.monotonic() + 30.0
    while any(k.data == "connecting" for k in selector.get_map().values()) and time.monotonic() < deadline:
        step(0.2)
    say("opened")
    next_tick = time.monotonic() + 1.0
    while time.monotonic() - began < hold:
        step(max(0.0, min(next_tick, began + hold) - time.monotonic()))
        if time.monotonic() >= next_tick:
            next_tick += 1.0
            if mode == "slowloris":
                for sock in list(held):
                    try:
                        sock.send(b"a")
                    except OSError:
                        counts["closed_by_server"] += 1
                        drop(sock)
            if mode == "reconnect":
                missing = connections - len(held) - sum(1 for k in selector.get_map().values() if k.data == "connecting")
                counts["reopened"] += missing
                for _ in range(missing):
                    open_one()
            say("held")
    for key in list(selector.get_map().values()):
        sock = key.fileobj
        assert isinstance(sock, socket.socket)
        drop(sock)
    for sock in list(held):
        drop(sock)
    say("released")


# --- the harness ----------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    threads: int
    rss_kib: int
    cpu: float


@dataclass(eq=False)
class Sampler(threading.Thread):
    pid: int
    health_url: str
    samples: list[Sample] = field(default_factory=list)
    probes: list[tuple[float, float | None]] = field(default_factory=list)
    """(time, seconds to answer 200) every 0.5 s; ``None``: no 200 within 2 s."""

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="sampler")
        self.halt = threading.Event()

    def run(self) -> None:
        http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=2.0, read=2.0))
        next_probe = 0.0
        while not self.halt.wait(0.25):
            now = time.perf_counter()
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
                threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
                self.samples.append(Sample(now, threads, status_kib(self.pid, "VmRSS"), cpu_seconds(self.pid)))
            except (OSError, StopIteration):
                return
            if now >= next_probe:
                next_probe = now + 0.5
                try:
                    answer = http.request("GET", self.health_url + "/readyz", headers={"Connection": "close"})
                    self.probes.append((now, time.perf_counter() - now if answer.status == 200 else None))
                except urllib3.exceptions.HTTPError:
                    self.probes.append((now, None))


def phase_stats(name: str, start: float, end: float, sent: dict[tuple[str, str], float], bound: dict[tuple[str, str], float],
                finished: float, sampler: Sampler) -> dict[str, Any]:
    mine = [(key, t) for key, t in sent.items() if start <= t < end]
    latencies = [bound[key] - t if key in bound else finished - t for key, t in mine]
    samples = [s for s in sampler.samples if start <= s.t < end]
    probes = [p for p in sampler.probes if start <= p[0] < end]
    answered = [p[1] for p in probes if p[1] is not None]
    cpu = 0.0
    if len(samples) >= 2:
        cpu = 100 * (samples[-1].cpu - samples[0].cpu) / max(samples[-1].t - samples[0].t, 1e-9)
    return {
        "phase": name,
        "seconds": round(end - start, 1),
        "runs": len(mine),
        "unbound": sum(1 for key, _ in mine if key not in bound),
        "latency_ms": {
            "p50": round(1000 * percentile(latencies, 0.5), 1),
            "p99": round(1000 * percentile(latencies, 0.99), 1),
            "max": round(1000 * max(latencies, default=0.0), 1),
        },
        "threads_max": max((s.threads for s in samples), default=0),
        "rss_mib": {
            "first": round(samples[0].rss_kib / 1024, 1) if samples else 0.0,
            "max": round(max(s.rss_kib for s in samples) / 1024, 1) if samples else 0.0,
            "last": round(samples[-1].rss_kib / 1024, 1) if samples else 0.0,
        },
        "cpu_percent": round(cpu, 1),
        "readyz": {
            "probes": len(probes),
            "failed": len(probes) - len(answered),
            "p99_ms": round(1000 * percentile(answered, 0.99), 1),
            "max_ms": round(1000 * max(answered, default=0.0), 1),
        },
    }


def measure(mode: str, args: argparse.Namespace, placement: Placement) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = ServerProcess.start(tmp, ["--runtime", f"{NAMESPACE}/python={PODS}x{SLOTS}", "--execute-runs", "1s",
                                           "--heartbeat-interval", "5s", "--auto-create-namespaces"])
        health = free_port()
        proc, metrics_url = start_scheduler(server.kubeconfig, tmp, workers=WORKERS, namespace=None, placement=placement,
                                            extra=["--health-probe-bind-address", f"127.0.0.1:{health}"])
        health_url = f"http://127.0.0.1:{health}"
        attacker: subprocess.Popen[str] | None = None
        watcher: BindWatcher | None = None
        try:
            if not wait_http_ok(health_url + "/readyz", 120):
                raise RuntimeError("the scheduler did not become ready")
            time.sleep(3.0)  # past the first lists and heartbeats
            http = Http(server.url)
            watcher = BindWatcher(server.url, http.resource_version(ALL_RUNS_PATH))
            watcher.start()
            watcher.ready.wait(10)
            sampler = Sampler(proc.pid, health_url)
            sampler.start()
            total = args.before + args.hold + args.after
            names = [f"r{i}" for i in range(int(total * args.rate))]
            sent: dict[tuple[str, str], float] = {}
            creator = threading.Thread(target=create_runs, args=(server.url, NAMESPACE, names),
                                       kwargs={"creators": 1, "rate": args.rate, "sent": sent}, daemon=True)
            began = time.perf_counter()
            creator.start()
            time.sleep(args.before)
            port = int(metrics_url.rsplit(":", 1)[1])
            attack_at = time.perf_counter()
            attacker = subprocess.Popen(
                [sys.executable, __file__, "--attacker", mode, str(port), str(args.connections), str(args.hold), str(args.open_rate)],
                stdout=subprocess.PIPE, stderr=open(tmp / "attacker.stderr", "w"), text=True,
            )
            reports = []
            assert attacker.stdout is not None
            for line in attacker.stdout:
                reports.append(json.loads(line))
            attacker.wait(30)
            released_at = time.perf_counter()
            time.sleep(max(0.0, began + total - time.perf_counter()))
            creator.join(60)
            watcher.wait_all(NAMESPACE, [k[1] for k in sent], timeout=30)
            finished = time.perf_counter()
            sampler.halt.set()
            sampler.join(5)
            bound = dict(watcher.bound)
            dropped = {k.split('"')[1]: int(v) for k, v in scrape(metrics_url).items()
                       if k.startswith("kruntimes_scheduler_http_dropped_connections_total{")}
        finally:
            if attacker is not None and attacker.poll() is None:
                attacker.kill()
            if watcher is not None:
                watcher.stop()
            stop_process(proc)
            server.stop()
    phases = [
        phase_stats("before", began, attack_at, sent, bound, finished, sampler),
        phase_stats("during", attack_at, released_at, sent, bound, finished, sampler),
        phase_stats("after", released_at, finished, sent, bound, finished, sampler),
    ]
    opened = next((r for r in reports if r["event"] == "opened"), {})
    return {
        "attack": mode,
        "connections": args.connections,
        "open_rate": args.open_rate,
        "attacker": {"opened": opened, "held_per_second": [r["held"] for r in reports if r["event"] == "held"],
                     "released": reports[-1] if reports else {}},
        "dropped_by_the_server": dropped,
        "phases": phases,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--attacker":
        mode, port, connections, hold, rate = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
        attack(mode, port, connections, hold, rate)
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attacks", default=",".join(ATTACKS), help=f"comma-separated, of {', '.join(ATTACKS)}")
    parser.add_argument("--connections", type=int, default=4000)
    parser.add_argument("--open-rate", type=float, default=200.0,
                        help="connections the attacker opens a second (default 200; 0: all at once). At once, most of "
                             "them overflow a backlog of 5 and never reach a server that has one")
    parser.add_argument("--rate", type=float, default=5.0, help="Runs created per second throughout (default 5)")
    parser.add_argument("--before", type=float, default=20.0)
    parser.add_argument("--hold", type=float, default=120.0,
                        help="seconds the attacker holds its connections (default 120: a server that accepts "
                             "from a backlog of 5 takes that long to take in thousands)")
    parser.add_argument("--after", type=float, default=60.0)
    parser.add_argument("--placement", choices=("split", "shared"), default="split",
                        help="split: the scheduler on a CPU of its own (default); shared: every process anywhere")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()
    if not Path("/proc/self/task").exists():
        sys.exit("this benchmark reads /proc (Linux)")
    placement = Placement.of(args.placement)
    placement.enter()
    rows = [measure(mode, args, placement) for mode in args.attacks.split(",")]
    result = {"benchmark": "metrics_abuse", "machine": machine(), "placement": placement.describe(),
              "source": os.environ.get("PYTHONPATH", "(installed)"), "results": rows}
    print(json.dumps(result, indent=1))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1))
    for row in rows:
        per_second = row["attacker"]["held_per_second"]
        released = row["attacker"]["released"]
        print(f"{row['attack']} x{row['connections']}: the attacker held {per_second[:1] or '?'} once all were open, "
              f"{per_second[-1:] or '?'} at the end; {released.get('opened', 0)} connections opened in all, "
              f"{released.get('closed_by_server', 0)} closed or refused by the server; the server counted "
              f"{row['dropped_by_the_server'] or '(no such metric)'}")
        for p in row["phases"]:
            print(f"  {p['phase']:6} bind p50 {p['latency_ms']['p50']:>8.1f} ms  p99 {p['latency_ms']['p99']:>8.1f}  "
                  f"max {p['latency_ms']['max']:>8.1f}  unbound {p['unbound']:>3}  threads<= {p['threads_max']:>5}  "
                  f"RSS {p['rss_mib']['first']:.0f}->{p['rss_mib']['max']:.0f}->{p['rss_mib']['last']:.0f} MiB  "
                  f"CPU {p['cpu_percent']:>5.1f} %  readyz failed {p['readyz']['failed']}/{p['readyz']['probes']} "
                  f"(max {p['readyz']['max_ms']:.0f} ms)")


if __name__ == "__main__":
    main()
