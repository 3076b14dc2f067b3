"""Fixtures: a fresh dev cluster per test (starting one takes milliseconds), with and without the simulator.

``server_kube`` runs a test twice: on the dev cluster and on a real kube-apiserver (a control plane of
the module's own, emptied before each test). The dev cluster's API behaviour is judged by the real
server's: a test that passes on one only is a dev-cluster defect, or a difference named in
docs/devcluster.md and pinned by a test.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import pytest
import urllib3
import yaml

from kruntimes.devcluster import DevCluster, SimulatorSettings
from kruntimes.devcluster.resources import kruntimes_crds
from kruntimes.kubeclient.kube import Kube as Kube_
from kruntimes.kubeclient.kube import load_configuration
from kruntimes.runtimesim.client import ClientSettings, SimulatorClient
from kruntimes.runtimesim.decide import RunSettings
from tests.controlplane import session as controlplane
from tests.controlplane.server import ControlPlane
from tests.realserver.support import kubectl as admin_kubectl
from tests.kubectl import Kubectl

from .helpers import Kube, close_api, kube_for, request_json, wait_until


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


# --- the same requests against a real kube-apiserver --------------------------------------------

_RESET_KINDS: Final = (
    "apis/kruntimes.io/v1alpha1/namespaces/{ns}/runs",
    "apis/kruntimes.io/v1alpha1/namespaces/{ns}/runtimes",
    "apis/kruntimes.io/v1alpha1/namespaces/{ns}/persistentworkspaces",
    "api/v1/namespaces/{ns}/pods",
    "api/v1/namespaces/{ns}/events",
    "apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
)


@pytest.fixture(scope="module")
def real_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane of this module's own, serving the CRDs the dev cluster serves."""
    for plane in controlplane.private(tmp_path_factory.mktemp("controlplane")):
        manifests = "---\n".join(yaml.safe_dump(crd) for crd in kruntimes_crds())
        admin_kubectl(plane, "apply", "--server-side", "-f", "-", stdin=manifests)
        # a CRD just created may have no conditions yet, which `kubectl wait` reports as an error
        wait_until(lambda: subprocess.run(["kubectl", "--kubeconfig", str(plane.admin_kubeconfig), "wait",
                                           "--for=condition=Established", "--timeout=10s", "crd", "--all"],
                                          capture_output=True, check=False).returncode == 0,
                   timeout=90, interval=1.0, what="the CRDs to be Established")
        yield plane


def _reset(plane: ControlPlane) -> None:
    """Empty every namespace of what an earlier test wrote (namespaces stay: no controller deletes them)."""
    namespaces = plane.request("GET", "/api/v1/namespaces")
    assert isinstance(namespaces, dict)
    for item in namespaces["items"]:
        ns = item["metadata"]["name"]
        if ns.startswith("kube-") and ns != "kube-system":
            continue
        runs = plane.request("GET", f"/apis/kruntimes.io/v1alpha1/namespaces/{ns}/runs")
        assert isinstance(runs, dict)
        for run in runs["items"]:
            if run["metadata"].get("finalizers"):
                plane.request_patch(f"/apis/kruntimes.io/v1alpha1/namespaces/{ns}/runs/{run['metadata']['name']}",
                                    {"metadata": {"finalizers": None}})
        for kind in _RESET_KINDS:
            plane.request("DELETE", "/" + kind.format(ns=ns))


@pytest.fixture(params=["dev", "real"])
def server_kube(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kube]:
    """The official client against the dev cluster, then against a real kube-apiserver: what a test
    asserts through it must hold on both (or the dev cluster is wrong)."""
    if request.param == "dev":
        with DevCluster.start(simulator=None) as running:
            k = kube_for(running.kubeconfig_path(tmp_path))
            yield k
            close_api(k.api)
        return
    plane: ControlPlane = request.getfixturevalue("real_plane")
    _reset(plane)
    k = kube_for(plane.admin_kubeconfig)
    yield k
    close_api(k.api)


@pytest.fixture(params=["dev", "real"])
def server_kubectl(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kubectl]:
    """The real kubectl against the dev cluster with its simulator, then against a real kube-apiserver
    with the runtime simulator as an API client (heartbeats every second, Runs done after 0.3 s)."""
    if request.param == "dev":
        sim_cluster = request.getfixturevalue("sim_cluster")
        yield Kubectl(sim_cluster.kubeconfig_path(tmp_path), tmp_path / "kube-cache", server="dev")
        return
    plane: ControlPlane = request.getfixturevalue("real_plane")
    _reset(plane)
    admin = Kube_(load_configuration(str(plane.admin_kubeconfig)).unwrap().configuration, request_timeout=10,
                  user_agent="kruntimes-tests")
    simulator = SimulatorClient(admin, ClientSettings(namespace="default", follow_runtimes=True, heartbeat_interval=1.0,
                                                      runs=RunSettings(duration=0.3), qps=0))
    simulator.start()
    try:
        assert simulator.wait_synced(30), "the runtime simulator did not sync"
        yield Kubectl(plane.admin_kubeconfig, tmp_path / "kube-cache", server="real")
    finally:
        simulator.stop()
        admin.close()


class _Authorized(urllib3.PoolManager):
    """A pool that sends a bearer token with every request, whatever headers the caller passes."""

    def __init__(self, token: str, ca_pem: bytes) -> None:
        super().__init__(retries=False, cert_reqs="CERT_REQUIRED", ca_cert_data=ca_pem.decode())
        self._authorization = f"Bearer {token}"

    # the same signature PoolManager itself narrows from RequestMethods (and marks as urllib3 does)
    def urlopen(self, method: str, url: str, redirect: bool = True, **kw: Any) -> urllib3.BaseHTTPResponse:  # type: ignore[override]
        kw["headers"] = {**(kw.get("headers") or {}), "Authorization": self._authorization}
        return super().urlopen(method, url, redirect, **kw)


@dataclass(frozen=True)
class Api:
    """One server as raw HTTP sees it: its address and a client allowed to do anything there."""

    server: Literal["dev", "real"]
    url: str
    http: urllib3.PoolManager

    def resource_version(self) -> int:
        """The server's current resourceVersion, as a list of Runs reports it."""
        code, listed, _ = request_json(self.http, "GET", self.url + "/apis/kruntimes.io/v1alpha1/runs?limit=1")
        assert code == 200, listed
        return int(listed["metadata"]["resourceVersion"])


@pytest.fixture(params=["dev", "real"])
def server_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """Raw HTTP to the dev cluster, then to a real kube-apiserver (emptied before the test)."""
    if request.param == "dev":
        with DevCluster.start(simulator=None) as running:
            pool = urllib3.PoolManager(retries=False)
            yield Api("dev", running.url, pool)
            pool.clear()
        return
    plane: ControlPlane = request.getfixturevalue("real_plane")
    _reset(plane)
    pool = _Authorized(plane.admin_token, plane.ca_pem)
    yield Api("real", plane.server, pool)
    pool.clear()
