"""Fixtures for tests that need the real kube-apiserver: deploy/ applied, a namespace per test,
the scheduler's own ServiceAccount credential."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane import session as controlplane
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.server import ControlPlane

from .support import REPO, SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, SchedulerProcess, kubectl


@pytest.fixture(scope="session")
def deployed(control_plane: ControlPlane) -> ControlPlane:
    """``kubectl apply -k deploy/`` on the session's control plane (idempotent across workers)."""
    kubectl(control_plane, "apply", "--server-side", "--force-conflicts", "-k", str(REPO / "deploy"))
    kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    return control_plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> str:
    """A namespace of this test's own (namespaces never finish deleting here: no controller manager)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.create_namespace(name)
    return name


@pytest.fixture
def scheduler_kubeconfig(deployed: ControlPlane, tmp_path: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of the deploy/ ServiceAccount the scheduler runs as."""
    return deployed.service_account_kubeconfig(
        tmp_path / "scheduler.kubeconfig", SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT
    )


@pytest.fixture(scope="module")
def private_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: for RBAC the shared one must not see, or restarts."""
    yield from controlplane.private(tmp_path_factory.mktemp("controlplane"))


@pytest.fixture
def fault_proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the session's API server: ``fault_proxy.faults`` takes the
    dev cluster's rules; a kubeconfig naming ``fault_proxy.server`` sends a client through it."""
    with FaultProxy.before(control_plane) as proxy:
        yield proxy
    assert proxy.failures == [], "the proxy itself failed"


@pytest.fixture
def scheduler_log(scheduler_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """``kruntimes scheduler`` under deploy/ RBAC for ``namespace``, ready and leading; its log.
    A request the API server refused (401, 403) anywhere in that log fails the test."""
    # deploy/ grants the one Lease the Deployment uses, so a test of its own may not elect on another
    running = SchedulerProcess.start(
        scheduler_kubeconfig, tmp_path / "scheduler.log", "--namespace", namespace, "--leader-elect=false",
        "--metrics-bind-address", "0",
    )
    try:
        running.wait_ready()  # from now on each new Run is planned by its own event
        yield running.log
    finally:
        assert running.stop() == 0, running.tail()
    assert not running.refused_requests(), running.refused_requests()


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    """Scheduler processes a test starts: stopped at the end, and none may have had a request refused."""
    started: list[SchedulerProcess] = []
    yield started
    for process in started:
        process.stop()
    for process in started:
        assert not process.refused_requests(), process.refused_requests()
