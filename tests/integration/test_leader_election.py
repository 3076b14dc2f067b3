"""Two `kruntimes scheduler --leader-elect` processes: one writes; SIGKILL fails over; SIGTERM releases."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.commands import replay
from kruntimes.devcluster import DevCluster
from kruntimes.effects.kube import LEASES, Kube

from .helpers import ready_pods, assigned, at, create_run, max_usage_by_pod, run_writes, wait_until

LEASE = LEASES.path("default", "kruntimes-scheduler")


class Process:
    def __init__(self, identity: str, kubeconfig: Path, directory: Path) -> None:
        self.identity = identity
        self.log_path = directory / f"{identity}.log"
        self.cycle_log = directory / f"{identity}.cycles.jsonl"
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.popen = subprocess.Popen(
            [
                sys.executable, "-m", "kruntimes.cli", "scheduler",
                "--kubeconfig", str(kubeconfig),
                "--leader-elect",
                "--leader-elect-namespace", "default",
                "--leader-elect-identity", identity,
                "--leader-elect-lease-duration", "2s",
                "--leader-elect-renew-deadline", "1.5s",
                "--leader-elect-retry-period", "0.3s",
                "--metrics-bind-address", "127.0.0.1:0",
                "--health-probe-bind-address", "127.0.0.1:0",
                "--log-format", "json",
                "--cycle-log", str(self.cycle_log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    @property
    def user_agent(self) -> str:
        return f"kruntimes-scheduler/{self.identity}"

    def log_lines(self) -> list[dict[str, object]]:
        lines = []
        for line in self.log_path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                lines.append({"msg": line})
        return lines

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        self._log.close()


@pytest.fixture
def processes(cluster: DevCluster, tmp_path: Path) -> Iterator[list[Process]]:
    kubeconfig = cluster.kubeconfig_path(tmp_path)
    started = [Process(identity, kubeconfig, tmp_path) for identity in ("alpha", "beta")]
    yield started
    for process in started:
        process.close()


def _holder(kube: Kube) -> str:
    lease = kube.get(LEASE).value_or(None)
    return str(at(lease, "spec", "holderIdentity") or "") if lease is not None else ""


def _pods(kube: Kube) -> int:
    return ready_pods(kube)


def test_only_the_leader_writes_a_standby_takes_over_and_sigterm_releases(
    cluster: DevCluster, kube: Kube, processes: list[Process]
) -> None:
    cluster.add_runtime("python", replicas=3, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 3, what="pods")
    by_identity = {p.identity: p for p in processes}
    first = wait_until(lambda: _holder(kube), timeout=20, what="a leader")
    leader, standby = by_identity[first], next(p for p in processes if p.identity != first)
    for process in processes:  # the startup log names the bound addresses
        wait_until(
            lambda: any(line.get("msg") == "scheduler started" and line.get("health") for line in process.log_lines()),
            timeout=20,
            what=f"{process.identity} startup log",
        )

    for i in range(3):
        create_run(kube, f"before-{i}")
    for i in range(3):
        wait_until(lambda: assigned(kube, f"before-{i}"), timeout=10, what=f"before-{i}")
    assert {w.user_agent for w in run_writes(cluster) if w.subresource == "status"} == {leader.user_agent}

    # SIGKILL the leader: no release; the standby must wait out the lease, then take over.
    leader.popen.send_signal(signal.SIGKILL)
    leader.popen.wait(10)
    killed_at = time.monotonic()
    for i in range(6):
        create_run(kube, f"backlog-{i}")
    wait_until(lambda: _holder(kube) == standby.identity, timeout=10, what="takeover")
    assert time.monotonic() - killed_at < 2.0 + 1.0  # lease duration + one retry period and slack
    bound = wait_until(
        lambda: (n := sum(1 for i in range(6) if assigned(kube, f"backlog-{i}"))) == 3 and n,
        timeout=10,
        what="the backlog fills the remaining capacity",
    )
    assert bound == 3
    writers = {w.user_agent for w in run_writes(cluster) if w.subresource == "status" and w.name.startswith("backlog-")}
    assert writers == {standby.user_agent}
    assert all(peak <= 2 for peak in max_usage_by_pod(cluster).values())

    # SIGTERM: finish in flight, release the lease, exit 0.
    standby.popen.send_signal(signal.SIGTERM)
    assert standby.popen.wait(15) == 0
    assert _holder(kube) == ""
    for process in processes:
        if process.cycle_log.exists() and process.cycle_log.stat().st_size:
            assert replay.run(argparse.Namespace(file=str(process.cycle_log))) == 0


def test_a_sigterm_while_the_scheduler_is_still_starting_exits_0(cluster: DevCluster, tmp_path: Path) -> None:
    process = Process("early", cluster.kubeconfig_path(tmp_path), tmp_path)
    try:
        time.sleep(1.0)  # past interpreter start-up; still importing, or just started: both must exit 0
        process.popen.send_signal(signal.SIGTERM)
        assert process.popen.wait(15) == 0
    finally:
        process.close()
