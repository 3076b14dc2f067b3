"""Two `kruntimes scheduler --leader-elect` processes: one writes; SIGKILL fails over; SIGTERM releases.

On both servers. On the real one every replica runs on the scheduler's ServiceAccount token under
deploy/ RBAC, so it elects on the one Lease deploy/ grants (``kruntimes-system/kruntimes-scheduler``),
and which replica wrote a Run's status is read from the fault proxy its requests pass through.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path

import pytest

from kruntimes.commands import replay
from kruntimes.kubeclient.kube import LEASES, JSONObject, Kube
from kruntimes.kubeclient.leader import DEFAULT_LEASE_NAME
from kruntimes.effects.runner import LeaderElectionOptions
from tests.realserver.support import Events
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import assigned, at, max_usage_by_pod, ready_pods, wait_until, waiting
from .servers import NAMESPACE, election_namespace, scheduler_kubeconfig, settled_writes, status_writers

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5
"""The processes' Lease timings: a renew deadline a loaded machine keeps, a lease short enough to wait out."""
SLACK = 10.0
"""Seconds a loaded machine may add to a takeover (a process scheduled late, a slow request)."""


class Process:
    def __init__(self, identity: str, kubeconfig: Path, directory: Path, lease_namespace: str) -> None:
        self.identity = identity
        self.log_path = directory / f"{identity}.log"
        self.cycle_log = directory / f"{identity}.cycles.jsonl"
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.popen = subprocess.Popen(
            [
                sys.executable, "-m", "kruntimes.cli", "scheduler",
                "--kubeconfig", str(kubeconfig),
                "--leader-elect",
                "--leader-elect-resource-namespace", lease_namespace,
                "--leader-elect-identity", identity,
                "--leader-elect-lease-duration", f"{LEASE_DURATION:g}s",
                "--leader-elect-renew-deadline", f"{RENEW_DEADLINE:g}s",
                "--leader-elect-retry-period", f"{RETRY_PERIOD:g}s",
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
def processes(server: Server, tmp_path: Path) -> Iterator[list[Process]]:
    kubeconfig = scheduler_kubeconfig(server, tmp_path)
    started = [Process(identity, kubeconfig, tmp_path, election_namespace(server)) for identity in ("alpha", "beta")]
    yield started
    for process in started:
        process.close()


def _holder(kube: Kube, namespace: str) -> str:
    lease = kube.get(LEASES.path(namespace, DEFAULT_LEASE_NAME)).value_or(None)
    return str(at(lease, "spec", "holderIdentity") or "") if lease is not None else ""


def _micro_time(lease: Mapping[str, object], field: str) -> datetime:
    return datetime.fromisoformat(str(at(lease, "spec", field)))


def _lease_versions_until(versions: Events, first: list[JSONObject], holder: str) -> list[JSONObject]:
    """The election Lease's versions, from ``first`` (what a list showed) up to the first held by ``holder``."""
    seen = list(first)
    while not seen or at(seen[-1], "spec", "holderIdentity") != holder:
        event = versions.next(f"a version of the Lease held by {holder}")
        if at(event.object, "metadata", "name") == DEFAULT_LEASE_NAME:
            seen.append(event.object)
    return seen


def test_only_the_leader_writes_a_standby_takes_over_and_sigterm_releases(
    server: Server, server_kube: Kube, processes: list[Process]
) -> None:
    server.add_runtime("python", replicas=3, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 3, timeout=30, what="pods")
    namespace = election_namespace(server)
    by_identity = {p.identity: p for p in processes}
    first = wait_until(lambda: _holder(server_kube, namespace), timeout=30, what="a leader")
    leader, standby = by_identity[first], next(p for p in processes if p.identity != first)
    for process in processes:  # the startup log names the bound addresses
        wait_until(
            lambda: any(line.get("msg") == "scheduler started" and line.get("health") for line in process.log_lines()),
            timeout=30,
            what=f"{process.identity} startup log",
        )

    for i in range(3):
        make_run(server_kube, f"before-{i}")
    for i in range(3):
        wait_until(lambda: assigned(server_kube, f"before-{i}"), timeout=30, what=f"before-{i}")
    assert set().union(*status_writers(server, [(NAMESPACE, f"before-{i}") for i in range(3)]).values()) == {leader.user_agent}

    # SIGKILL the leader: no release; the standby must wait out the lease, then take over.
    leases, version = server_kube.list(LEASES.path(namespace)).unwrap()
    versions = Events(server_kube.watch(LEASES.path(namespace), version, timeout_seconds=300, bookmarks=False))
    try:
        leader.popen.send_signal(signal.SIGKILL)
        leader.popen.wait(10)
        killed_at = time.monotonic()
        for i in range(6):
            make_run(server_kube, f"backlog-{i}")
        wait_until(lambda: _holder(server_kube, namespace) == standby.identity,
                   timeout=max(1.0, killed_at + LEASE_DURATION + RETRY_PERIOD + SLACK - time.monotonic()), what="takeover")
        history = _lease_versions_until(versions, [lease for lease in leases if at(lease, "metadata", "name") == DEFAULT_LEASE_NAME],
                                        standby.identity)
    finally:
        versions.stop()
    holders = [str(at(lease, "spec", "holderIdentity") or "") for lease in history]
    assert "" not in holders, f"the killed leader's Lease was released: {holders}"
    last_renewal = _micro_time([lease for lease in history if at(lease, "spec", "holderIdentity") == leader.identity][-1], "renewTime")
    taken = _micro_time(history[-1], "acquireTime")
    # the standby counts the lease from when it read the last renewal: at most one read after it was written
    assert (taken - last_renewal).total_seconds() >= LEASE_DURATION / 2, (last_renewal, taken)
    bound = wait_until(
        lambda: (n := sum(1 for i in range(6) if assigned(server_kube, f"backlog-{i}"))) == 3 and n,
        timeout=30,
        what="the backlog fills the remaining capacity",
    )
    assert bound == 3
    backlog = [(NAMESPACE, f"backlog-{i}") for i in range(6) if assigned(server_kube, f"backlog-{i}")]
    writers = {w.user_agent for w in settled_writes(server, backlog)
               if w.resource == "runs" and w.subresource == "status" and w.name.startswith("backlog-")}
    assert writers == {standby.user_agent}
    assert all(peak <= 2 for peak in max_usage_by_pod(server).values())

    # SIGTERM: finish in flight, release the lease, exit 0.
    standby.popen.send_signal(signal.SIGTERM)
    assert standby.popen.wait(30) == 0
    assert _holder(server_kube, namespace) == ""
    for process in processes:
        if process.cycle_log.exists() and process.cycle_log.stat().st_size:
            assert replay.run(argparse.Namespace(file=str(process.cycle_log))) == 0


def test_a_sigterm_while_the_scheduler_is_still_starting_exits_0(bare_server: Server, tmp_path: Path) -> None:
    process = Process("early", scheduler_kubeconfig(bare_server, tmp_path), tmp_path, election_namespace(bare_server))
    try:
        time.sleep(1.0)  # past interpreter start-up; still importing, or just started: both must exit 0
        process.popen.send_signal(signal.SIGTERM)
        assert process.popen.wait(30) == 0
    finally:
        process.close()


def test_a_standby_with_a_stale_cache_refreshes_it_before_planning(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    """The new leader plans from a consistent relist, not from a watch that fell behind.

    The standby's pod watch fails from the moment the pod's capacity drops from 2 to 1; the
    leader sees the drop and binds one Run, the second waits. When the leader hands over, a
    standby planning from its cache would still see room for two and overcommit the pod.
    """
    server.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    election = LeaderElectionOptions(namespace=election_namespace(server), lease_duration=LEASE_DURATION,
                                     renew_deadline=RENEW_DEADLINE, retry_period=0.2)
    leader = server_scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(30)
    standby = server_scheduler(identity="beta", leader_election=election)
    assert wait_until(lambda: any(p.capacity.get("runs") == 2 for p in standby.state.get().pods_of("default", "python")), what="standby cache")

    # the standby's pod watches and lists fail from now on (a failed watch relists, which would
    # refresh its cache at a time the machine's load decides); the pod shrinks to one slot
    blind = server.faults.error(500, "pods", verbs=("watch", "list"), count=None, user_agent="kruntimes-scheduler/beta")
    server.faults.drop_watches("pods")
    server_kube.patch("/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes/python",
                      json.dumps({"spec": {"capacity": {"resources": {"runs": "1"}}}})).unwrap()
    wait_until(lambda: any(p.capacity.get("runs") == 1 for p in leader.state.get().pods_of("default", "python")),
               timeout=30, what="leader sees 1 slot")
    assert any(p.capacity.get("runs") == 2 for p in standby.state.get().pods_of("default", "python")), "the standby's cache went stale"

    make_run(server_kube, "first")
    wait_until(lambda: assigned(server_kube, "first"), timeout=30, what="first bound")
    make_run(server_kube, "second")
    wait_until(lambda: waiting(server_kube, "second"), timeout=30, what="second waits")

    # the standby's lists work again: its informer relists after its back-off (seconds by now),
    # its takeover relists at once, before it plans
    server.faults.remove(blind)
    assert leader.stop(timeout=10)  # releases the lease: the standby takes over at once
    assert standby.wait_leading(30)  # the lease, a fresh relist, then workers
    make_run(server_kube, "third")  # a fresh key for the new leader; "second" was re-planned on taking over
    wait_until(lambda: waiting(server_kube, "third"), timeout=30, what="third waits")
    assert assigned(server_kube, "second") is None
    assert all(peak <= 1 for peak in max_usage_by_pod(server).values()), max_usage_by_pod(server)


def test_runs_met_while_a_slow_renewal_closed_the_write_gate_are_bound_once_it_reopens(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    """A renewal that takes longer than the renew deadline closes the write gate without ending the
    term (the renewal succeeds: nobody took the Lease). Cycles in that window write nothing; their
    Runs must not be forgotten for the rest of the term."""
    server.add_runtime("python", replicas=2, capacity={"runs": "20"})
    wait_until(lambda: ready_pods(server_kube) == 2, timeout=30, what="pods")
    election = LeaderElectionOptions(namespace=election_namespace(server), lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    leader = server_scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(30)
    outcomes: list[str] = []
    leader.results = lambda result: outcomes.append(result.outcome)
    server.faults.latency(2.0, "leases", count=1)  # the next renewal answers 2 s after it started
    names = [f"gated-{i}" for i in range(30)]
    for name in names:  # a Run every 0.1 s, across the window in which the gate is closed
        make_run(server_kube, name)
        time.sleep(0.1)
    assert "not_leader" in outcomes, "the gate never closed: the test proves nothing"
    assert wait_until(lambda: all(assigned(server_kube, name) for name in names), timeout=30, what="every Run bound")
    assert _holder(server_kube, election.namespace) == "alpha" and leader.is_leader(), "the term never ended"
