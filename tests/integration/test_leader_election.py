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
from kruntimes.devcluster.simulator import RUNTIMES
from kruntimes.devcluster.store import WriteContext
from kruntimes.effects.kube import LEASES, Kube
from kruntimes.effects.runner import LeaderElectionOptions

from .conftest import SchedulerFactory
from .helpers import assigned, at, create_run, max_usage_by_pod, ready_pods, run_writes, wait_until, waiting

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
                "--leader-elect-resource-namespace", "default",
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


def test_a_standby_with_a_stale_cache_refreshes_it_before_planning(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    """The new leader plans from a consistent relist, not from a watch that fell behind.

    The standby's pod watch fails from the moment the pod's capacity drops from 2 to 1; the
    leader sees the drop and binds one Run, the second waits. When the leader hands over, a
    standby planning from its cache would still see room for two and overcommit the pod.
    """
    cluster.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    election = LeaderElectionOptions(namespace="default", lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    leader = scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(10)
    standby = scheduler(identity="beta", leader_election=election)
    assert wait_until(lambda: any(p.capacity.get("runs") == 2 for p in standby.state.get().pods_of("default", "python")), what="standby cache")

    # the standby's pod watches fail from now on (its lists still work); the pod shrinks to one slot
    cluster.faults.error(500, "pods", verbs=("watch",), count=None, user_agent="kruntimes-scheduler/beta")
    cluster.faults.drop_watches("pods")
    runtimes = cluster.registry.storage(RUNTIMES)
    assert runtimes is not None
    current = cluster.service.get(runtimes, "default", "python")
    cluster.service.update(
        runtimes, "default", "python",
        {**current, "spec": {**current["spec"], "capacity": {"resources": {"runs": "1"}}}},
        WriteContext("update", user_agent="test"),
    )
    wait_until(lambda: any(p.capacity.get("runs") == 1 for p in leader.state.get().pods_of("default", "python")), what="leader sees 1 slot")
    assert any(p.capacity.get("runs") == 2 for p in standby.state.get().pods_of("default", "python")), "the standby's cache went stale"

    create_run(kube, "first")
    wait_until(lambda: assigned(kube, "first"), what="first bound")
    create_run(kube, "second")
    wait_until(lambda: waiting(kube, "second"), what="second waits")

    assert leader.stop(timeout=10)  # releases the lease: the standby takes over at once
    assert standby.wait_leading(10)  # the lease, a fresh relist, then workers
    create_run(kube, "third")  # a fresh key for the new leader; "second" was re-planned on taking over
    wait_until(lambda: waiting(kube, "third"), what="third waits")
    assert assigned(kube, "second") is None
    assert all(peak <= 1 for peak in max_usage_by_pod(cluster).values()), max_usage_by_pod(cluster)


def test_runs_met_while_a_slow_renewal_closed_the_write_gate_are_bound_once_it_reopens(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    """A renewal that takes longer than the renew deadline closes the write gate without ending the
    term (the renewal succeeds: nobody took the Lease). Cycles in that window write nothing; their
    Runs must not be forgotten for the rest of the term."""
    cluster.add_runtime("python", replicas=2, capacity={"runs": "20"})
    wait_until(lambda: _pods(kube) == 2, what="pods")
    election = LeaderElectionOptions(namespace="default", lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    leader = scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(10)
    outcomes: list[str] = []
    leader.results = lambda result: outcomes.append(result.outcome)
    cluster.faults.latency(2.0, "leases", count=1)  # the next renewal answers 2 s after it started
    names = [f"gated-{i}" for i in range(30)]
    for name in names:  # a Run every 0.1 s, across the window in which the gate is closed
        create_run(kube, name)
        time.sleep(0.1)
    assert "not_leader" in outcomes, "the gate never closed: the test proves nothing"
    assert wait_until(lambda: all(assigned(kube, name) for name in names), timeout=10, what="every Run bound")
    assert _holder(kube) == "alpha" and leader.is_leader(), "the term never ended"
