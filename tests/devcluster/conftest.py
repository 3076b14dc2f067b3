"""Fixtures: a fresh dev cluster per test (starting one takes milliseconds), with and without the simulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.devcluster import DevCluster, SimulatorSettings

from .helpers import Kube, Kubectl, close_api, kube_for


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    """A dev cluster without the runtime simulator: only what the test writes exists."""
    with DevCluster.start(simulator=None) as c:
        yield c


@pytest.fixture
def sim_cluster() -> Iterator[DevCluster]:
    """A dev cluster whose simulator heartbeats every second and finishes Runs after 0.3 s."""
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0, execute_runs=0.3)) as c:
        yield c


@pytest.fixture
def kube(cluster: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    k = kube_for(cluster.kubeconfig_path(tmp_path))
    yield k
    close_api(k.api)


@pytest.fixture
def sim_kube(sim_cluster: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    k = kube_for(sim_cluster.kubeconfig_path(tmp_path))
    yield k
    close_api(k.api)


@pytest.fixture
def kubectl(sim_cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(sim_cluster.kubeconfig_path(tmp_path), tmp_path / "kube-cache")
