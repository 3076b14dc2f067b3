"""Fixtures: a fresh dev cluster per test, a client for the test's own writes, and in-process schedulers.

Every scheduler a test starts writes a cycle log; at teardown the log must replay
with every record identical (SPEC: each decision is reproducible from its inputs).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kruntimes.commands import replay
from kruntimes.devcluster import DevCluster, SimulatorSettings
from kruntimes.kubeclient.kube import Kube, load_configuration
from kruntimes.effects.runner import Scheduler, SchedulerOptions

from tests.controlplane import session as controlplane
from tests.controlplane.server import ControlPlane
from tests.realserver.support import REPO, apply_rendered

from .helpers import TEST_AGENT
from .servers import RealCluster

SchedulerFactory = Callable[..., Scheduler]


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    """A dev cluster whose simulator keeps Runtime Pods Running, Ready and heartbeating every second."""
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0), bookmark_interval=1.0) as running:
        yield running


@pytest.fixture
def bare_cluster() -> Iterator[DevCluster]:
    """A dev cluster without the simulator: only what the test writes exists."""
    with DevCluster.start(simulator=None, bookmark_interval=1.0) as running:
        yield running


def _client(cluster: DevCluster | RealCluster, directory: Path, agent: str) -> Kube:
    loaded = load_configuration(str(cluster.kubeconfig_path(directory))).unwrap()
    return Kube(loaded.configuration, request_timeout=10, user_agent=agent)


def _scheduler_client(cluster: DevCluster | RealCluster, directory: Path, agent: str) -> Kube:
    """On the real server the scheduler runs on its own ServiceAccount's token, under deploy/ RBAC."""
    path = cluster.scheduler_kubeconfig(directory) if isinstance(cluster, RealCluster) else cluster.kubeconfig_path(directory)
    loaded = load_configuration(str(path)).unwrap()
    return Kube(loaded.configuration, request_timeout=10, user_agent=agent)


@pytest.fixture
def kube(cluster: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    client = _client(cluster, tmp_path, TEST_AGENT)
    yield client
    client.close()


@pytest.fixture
def bare_kube(bare_cluster: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    client = _client(bare_cluster, tmp_path, TEST_AGENT)
    yield client
    client.close()


def _factory(cluster: DevCluster | RealCluster, tmp_path: Path) -> Iterator[SchedulerFactory]:
    started: list[tuple[Scheduler, Kube]] = []

    def start(**overrides: Any) -> Scheduler:
        identity = overrides.pop("identity", f"test-{len(started)}")
        options = SchedulerOptions(
            identity=identity,
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            heartbeat_stale_after=timedelta(seconds=15),
            cycle_log=tmp_path / f"cycles-{identity}.jsonl",
            watch_timeout=30,
        )
        options = dataclasses.replace(options, **overrides)
        client = _scheduler_client(cluster, tmp_path, f"kruntimes-scheduler/{identity}")
        scheduler = Scheduler(client, options)
        scheduler.start()
        started.append((scheduler, client))
        assert scheduler.wait_ready(10), "scheduler did not become ready"
        if options.leader_election is None:
            # leading with its queue open: a Run created from now on is planned by its own event
            # (a new leader's backlog is planned only as slots free)
            assert scheduler.wait_leading(10), "scheduler did not start leading"
        return scheduler

    yield start
    for scheduler, client in started:
        assert scheduler.stop(timeout=10)
        client.close()
        log = scheduler.options.cycle_log
        if log is not None and log.exists() and log.stat().st_size > 0:
            # the replay command itself (not through cli.main, which imports every subcommand)
            assert replay.run(argparse.Namespace(file=str(log))) == 0, f"cycle log {log} does not replay identically"


@pytest.fixture
def scheduler(cluster: DevCluster, tmp_path: Path) -> Iterator[SchedulerFactory]:
    """Start schedulers against ``cluster`` (stopped, and their cycle logs replayed, at teardown)."""
    yield from _factory(cluster, tmp_path)


@pytest.fixture
def bare_scheduler(bare_cluster: DevCluster, tmp_path: Path) -> Iterator[SchedulerFactory]:
    yield from _factory(bare_cluster, tmp_path)


# --- the same tests on both servers -------------------------------------------------------------

Server = DevCluster | RealCluster


@pytest.fixture(scope="module")
def real_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane of this module's own (its tests share its default namespace in turn)."""
    for plane in controlplane.private(tmp_path_factory.mktemp("controlplane")):
        apply_rendered(plane, REPO / "deploy")
        yield plane


def _server(request: pytest.FixtureRequest, *, simulate: bool, bookmark_interval: float = 1.0) -> Iterator[Server]:
    if request.param == "dev":
        simulator = SimulatorSettings(heartbeat_interval=1.0) if simulate else None
        with DevCluster.start(simulator=simulator, bookmark_interval=bookmark_interval) as running:
            yield running
        return
    real = RealCluster(request.getfixturevalue("real_plane"), simulate=simulate)
    try:
        yield real
    finally:
        real.close()


@pytest.fixture(params=["dev", "real"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The dev cluster, then the real kube-apiserver; Runtime Pods kept Ready by a simulator on each."""
    yield from _server(request, simulate=True)


@pytest.fixture(params=["dev", "real"])
def bare_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """Either server with no simulator: only what the test writes exists."""
    yield from _server(request, simulate=False)


@pytest.fixture(params=["dev", "real"])
def quiet_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """Either server with no simulator, whose watches get a bookmark about once a minute (as
    kube-apiserver's do), not every second: a watch of nothing stays silent that long."""
    yield from _server(request, simulate=False, bookmark_interval=60.0)


@pytest.fixture
def quiet_server_kube(quiet_server: Server, tmp_path: Path) -> Iterator[Kube]:
    client = _client(quiet_server, tmp_path, TEST_AGENT)
    yield client
    client.close()


@pytest.fixture
def server_kube(server: Server, tmp_path: Path) -> Iterator[Kube]:
    client = _client(server, tmp_path, TEST_AGENT)
    yield client
    client.close()


@pytest.fixture
def bare_server_kube(bare_server: Server, tmp_path: Path) -> Iterator[Kube]:
    client = _client(bare_server, tmp_path, TEST_AGENT)
    yield client
    client.close()


@pytest.fixture
def server_scheduler(server: Server, tmp_path: Path) -> Iterator[SchedulerFactory]:
    yield from _factory(server, tmp_path)


@pytest.fixture
def bare_server_scheduler(bare_server: Server, tmp_path: Path) -> Iterator[SchedulerFactory]:
    yield from _factory(bare_server, tmp_path)
