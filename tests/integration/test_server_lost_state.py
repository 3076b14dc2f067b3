"""An API server that lost its state under a running scheduler: the scheduler relists and schedules on.

The server is a parameter (:class:`LosableServer`): the dev cluster stopped and started afresh on
the same port (the kubeconfig's token still works: both take the same one), and a real control
plane whose etcd is restored from a copy taken when the test began (the scheduler on its deploy/
ServiceAccount token, which the restored server still honours). Whatever the server, the new one
issues resourceVersions the scheduler has already seen, to other writes: on the dev cluster the
same setup and the same test writes give the new pod and the new Run exactly the versions the old
pod and the old Run had; on the real server etcd's revision goes back to the copy's. A scheduler that kept its cache and watched on from its
version never hears of them (a watch delivers only what follows its version) and keeps the old
server's objects as they were; the new Run waits forever. Trusting a known version in the relist
would keep the old pod (same name, same version, another UID) and bind to its UID.
"""

from __future__ import annotations

import argparse
import dataclasses
import secrets
import socket
import urllib.error
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, get_args

import pytest

from kruntimes.commands import replay
from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.kube import LEASES, Kube, load_configuration
from kruntimes.kubeclient.leader import DEFAULT_LEASE_NAME
from kruntimes.effects.metrics import ServerReset
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler, SchedulerOptions
from tests.controlplane.server import ControlPlane
from tests.builders import make_pod, make_run

from .helpers import NS, TEST_AGENT, assigned, at, get_run, wait_until
from .servers import SCHEDULER_ACCOUNT

BIND_TIMEOUT = 60.0
"""Generous: a loaded machine; the scheduler needs a watch timeout, a relist and a cycle."""


class LosableServer(Protocol):
    """An API server a test can take the state from while its address and credentials stay."""

    @property
    def namespace(self) -> str:
        """Where the test's pods and Runs go (it exists from ``start`` on, and after a loss)."""
        ...

    def start(self) -> None:
        """Serve: the kruntimes CRDs installed, :attr:`namespace` there; what a loss goes back to."""
        ...

    @property
    def lease_namespace(self) -> str:
        """Where a scheduler may hold its election Lease."""
        ...

    def kubeconfig(self, directory: Path) -> Path:
        """Credentials for the test's own writes, valid before and after a loss."""
        ...

    def scheduler_kubeconfig(self, directory: Path) -> Path:
        """Credentials for the scheduler, valid before and after a loss."""
        ...

    def restart_with_lost_state(self) -> None:
        """Back to the state ``start`` left, on the same address, with resourceVersions below
        those issued since (a new store, an etcd restored from a snapshot)."""
        ...

    def stop(self) -> None: ...


class RestartedDevCluster:
    """A dev cluster on a fixed port; a loss is a fresh one on that port with the same token."""

    namespace = NS
    lease_namespace = NS

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self._port = int(probe.getsockname()[1])
        self._token = secrets.token_urlsafe(16)
        self._cluster: DevCluster | None = None

    def start(self) -> None:
        # bookmarks every second, as kube-apiserver sends them at least every minute: a watch
        # that gets none is a watch the server holds from a version it has not reached
        self._cluster = DevCluster.start(port=self._port, token=self._token, simulator=None, bookmark_interval=1.0)

    def kubeconfig(self, directory: Path) -> Path:
        assert self._cluster is not None
        return self._cluster.kubeconfig_path(directory)

    def scheduler_kubeconfig(self, directory: Path) -> Path:
        return self.kubeconfig(directory)

    def restart_with_lost_state(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.stop()


class RestoredControlPlane:
    """A real control plane of the module's own (deploy/ applied); a loss puts etcd's data back as it
    was when :meth:`start` made the test's namespace (a namespace per test: here none is ever
    deleted for good). The scheduler runs on its ServiceAccount's token, under deploy/ RBAC."""

    lease_namespace = SCHEDULER_ACCOUNT[0]

    def __init__(self, plane: ControlPlane, directory: Path) -> None:
        self._plane = plane
        self._copy = directory / "etcd-at-start"
        self.namespace = f"lost-{uuid.uuid4().hex[:8]}"

    def start(self) -> None:
        self._plane.create_namespace(self.namespace)
        try:  # an earlier test's Lease: a scheduler must create its own after the loss
            self._plane.request("DELETE", LEASES.path(self.lease_namespace, DEFAULT_LEASE_NAME))
        except urllib.error.HTTPError as error:
            assert error.code == 404, error
        self._plane.save_etcd(self._copy)

    def kubeconfig(self, directory: Path) -> Path:
        return self._plane.admin_kubeconfig

    def scheduler_kubeconfig(self, directory: Path) -> Path:
        return self._plane.service_account_kubeconfig(directory / "scheduler.kubeconfig", *SCHEDULER_ACCOUNT)

    def restart_with_lost_state(self) -> None:
        self._plane.restore_etcd(self._copy)

    def stop(self) -> None:
        """The control plane is the module's: it stays for the next test."""


@pytest.fixture(params=["dev", "real"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LosableServer]:
    losable: LosableServer = (
        RestartedDevCluster() if request.param == "dev" else RestoredControlPlane(request.getfixturevalue("real_plane"), tmp_path)
    )
    losable.start()
    yield losable
    losable.stop()


def client(server: LosableServer, directory: Path, agent: str) -> Kube:
    """A new client each time: the connections of one from before the loss are dead."""
    loaded = load_configuration(str(server.kubeconfig(directory))).unwrap()
    return Kube(loaded.configuration, request_timeout=10, user_agent=agent)


def scheduler_on(server: LosableServer, directory: Path, **overrides: Any) -> Scheduler:
    options = SchedulerOptions(
        identity="restarted",
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="0",
        heartbeat_stale_after=timedelta(seconds=600),  # the pods' heartbeats never age out here
        cycle_log=directory / "cycles.jsonl",
    )
    options = dataclasses.replace(options, **overrides)
    loaded = load_configuration(str(server.scheduler_kubeconfig(directory))).unwrap()
    scheduler = Scheduler(Kube(loaded.configuration, request_timeout=10, user_agent="kruntimes-scheduler/restarted"), options)
    scheduler.start()
    assert scheduler.wait_leading(30), "the scheduler did not start leading"
    return scheduler


def bind_one_then_lose_the_state(server: LosableServer, scheduler: Scheduler, directory: Path) -> None:
    """A one-slot pod, filled by a Run; then the server loses everything."""
    before = client(server, directory, TEST_AGENT)
    make_pod(before, "pod", "python", capacity={"runs": "1"}, namespace=server.namespace)
    make_run(before, "before", "python", namespace=server.namespace)
    wait_until(lambda: assigned(before, "before", server.namespace), timeout=BIND_TIMEOUT, what="the first Run to bind")
    before.close()
    server.restart_with_lost_state()


def a_new_run_binds_to_the_new_pod(server: LosableServer, directory: Path) -> None:
    after = client(server, directory, TEST_AGENT)
    try:
        pod = make_pod(after, "pod", "python", capacity={"runs": "1"}, namespace=server.namespace)
        make_run(after, "after", "python", namespace=server.namespace)
        bound = wait_until(
            lambda: assigned(after, "after", server.namespace), timeout=BIND_TIMEOUT,
            what="the Run created after the loss to bind",
        )
        assert bound == "pod"
        run = get_run(after, "after", server.namespace)
        assert at(run, "status", "assignedPodUID") == at(pod, "metadata", "uid"), "bound to the pod the server has"
    finally:
        after.close()


def stop_and_replay(scheduler: Scheduler) -> None:
    assert scheduler.stop(timeout=10)
    log = scheduler.options.cycle_log
    assert log is not None
    assert replay.run(argparse.Namespace(file=str(log))) == 0, "the cycle log does not replay identically"


def test_a_scheduler_whose_server_lost_its_state_relists_and_binds_new_runs(server: LosableServer, tmp_path: Path) -> None:
    # a short watch timeout: a watch the new server holds silent ends soon, and the version read
    # after it shows resourceVersions gone back (unless the list after an unreachable server did)
    scheduler = scheduler_on(server, tmp_path, watch_timeout=5)
    try:
        bind_one_then_lose_the_state(server, scheduler, tmp_path)
        a_new_run_binds_to_the_new_pod(server, tmp_path)
        assert (scheduler.metrics.value("kruntimes_scheduler_server_resets_total", {"reason": "resource_version_went_back"}) or 0) >= 1
    finally:
        stop_and_replay(scheduler)


def test_a_leader_that_recreates_its_lease_after_a_quick_restart_relists_and_binds_new_runs(
    server: LosableServer, tmp_path: Path
) -> None:
    # the restart is shorter than the renew deadline, so the leader keeps leading: its next renewal
    # finds the Lease gone and creates it. The watch timeout is long; the informers' read after
    # their broken watches may show the loss first, and then the Lease is taken in the new term.
    election = LeaderElectionOptions(namespace=server.lease_namespace, lease_duration=15.0, renew_deadline=10.0, retry_period=0.5)
    scheduler = scheduler_on(server, tmp_path, leader_election=election, watch_timeout=300)
    try:
        bind_one_then_lose_the_state(server, scheduler, tmp_path)
        a_new_run_binds_to_the_new_pod(server, tmp_path)
        resets = {reason: scheduler.metrics.value("kruntimes_scheduler_server_resets_total", {"reason": reason}) or 0
                  for reason in get_args(ServerReset)}
        assert sum(resets.values()) >= 1, resets
        assert scheduler.is_leader()
    finally:
        stop_and_replay(scheduler)
