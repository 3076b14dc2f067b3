"""The Helm chart on the real API server: ``helm install`` creates the CRDs, the ServiceAccount and the
RBAC, and the scheduler running with that ServiceAccount's token binds Runs; ``helm upgrade`` from an
earlier chart version leaves the running scheduler its Lease, its identity and its credentials.

Each test has a control plane of its own: the chart owns cluster-scoped objects (CRDs, ClusterRoles)
that deploy/ applies on the session's plane, and Helm refuses to adopt objects another tool made.
No kubelet runs, so the Deployment makes no pods; the scheduler runs here as a process instead, with
a TokenRequest token of the chart's ServiceAccount, as a pod of the Deployment would."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kruntimes import __version__
from tests.controlplane import session as controlplane
from tests.controlplane.server import ControlPlane
from tests.deploy import helm
from tests.polling import wait_until

from .support import SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, SchedulerProcess, create, dumps, kubectl, ready_runtime_pod, run_manifest, runs

PREVIOUS = "0.0.1"
"""The chart version the upgrade starts from: this chart, packaged under an earlier version and
appVersion (so the image tag changes too, as in a real upgrade). The objects' names are pinned to
deploy/'s by tests/deploy/test_chart.py, so a rename between versions fails there."""

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{SCHEDULER_NAMESPACE}/leases/kruntimes-scheduler"
ELECTION = ("--leader-elect", f"--leader-elect-resource-namespace={SCHEDULER_NAMESPACE}", "--metrics-bind-address", "0")


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    yield from controlplane.private(tmp_path / "controlplane")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    directory = tmp_path / "helm"
    directory.mkdir()
    return directory


def helm_on(plane: ControlPlane, home: Path, *args: str) -> str:
    return helm.ok([*args, "--namespace", SCHEDULER_NAMESPACE], home, kubeconfig=plane.admin_kubeconfig)


def install(plane: ControlPlane, home: Path, chart: Path) -> None:
    helm_on(plane, home, "install", helm.RELEASE, str(chart), "--create-namespace")
    kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def get(plane: ControlPlane, path: str) -> dict[str, Any]:
    found = plane.request("GET", path)
    assert isinstance(found, dict)
    return found


def namespace_with_a_runtime_pod(plane: ControlPlane) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    plane.create_namespace(name)
    ready_runtime_pod(plane, name, "python-0", "python", {"runs": "10"})
    return name


def bind(plane: ControlPlane, namespace: str, name: str, scheduler: SchedulerProcess) -> None:
    create(plane, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", run_manifest(namespace, name, "python"))

    def phase() -> str:
        return str(runs(plane, namespace).get(name, {}).get("status", {}).get("phase", ""))

    try:
        wait_until(lambda: phase() == "Scheduled", timeout=60, interval=0.2, what=f"Run {name} bound")
    except AssertionError as failed:
        raise AssertionError(f"{failed}: {dumps(runs(plane, namespace))}\nthe scheduler's log ends:\n{scheduler.tail()}") from None


def start_scheduler(plane: ControlPlane, tmp_path: Path, identity: str) -> SchedulerProcess:
    kubeconfig = plane.service_account_kubeconfig(tmp_path / f"{identity}.kubeconfig", SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT)
    process = SchedulerProcess.start(kubeconfig, tmp_path / f"{identity}.log", *ELECTION, f"--leader-elect-identity={identity}")
    process.wait_ready()
    return process


def previous_chart(tmp_path: Path) -> Path:
    """The chart under version PREVIOUS, packaged (the links to deploy/ followed, as a published chart)."""
    assert tuple(map(int, PREVIOUS.split("."))) < tuple(map(int, __version__.split("."))), "PREVIOUS must be earlier"
    source = tmp_path / "previous" / "kruntimes-scheduler"
    shutil.copytree(helm.CHART, source, symlinks=False)
    chart = yaml.safe_load((source / "Chart.yaml").read_text())
    chart.update(version=PREVIOUS, appVersion=PREVIOUS)
    (source / "Chart.yaml").write_text(yaml.safe_dump(chart))
    return source


def test_the_installed_chart_lets_the_scheduler_bind_runs_as_the_charts_service_account(
    plane: ControlPlane, home: Path, tmp_path: Path
) -> None:
    install(plane, home, helm.CHART)
    status = helm_on(plane, home, "status", helm.RELEASE)
    assert "STATUS: deployed" in status, status
    deployment = get(plane, f"/apis/apps/v1/namespaces/{SCHEDULER_NAMESPACE}/deployments/kruntimes-scheduler")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"kruntimes-scheduler:{__version__}"
    namespace = namespace_with_a_runtime_pod(plane)
    scheduler = start_scheduler(plane, tmp_path, "chart")
    try:
        for i in range(3):
            bind(plane, namespace, f"r{i}", scheduler)
        assert get(plane, LEASE)["spec"]["holderIdentity"] == "chart"
        wait_until(lambda: any(e.get("reason") == "Scheduled" for e in get(plane, f"/api/v1/namespaces/{namespace}/events")["items"]),
                   timeout=30, interval=0.2, what="a Scheduled Event")
    finally:
        assert scheduler.stop() == 0, scheduler.tail()
    assert not scheduler.refused_requests(), scheduler.refused_requests()


def test_helm_upgrade_from_an_earlier_chart_version_keeps_the_running_schedulers_lease_and_credentials(
    plane: ControlPlane, home: Path, tmp_path: Path
) -> None:
    install(plane, home, previous_chart(tmp_path))
    account = get(plane, f"/api/v1/namespaces/{SCHEDULER_NAMESPACE}/serviceaccounts/{SCHEDULER_SERVICE_ACCOUNT}")
    namespace = namespace_with_a_runtime_pod(plane)
    scheduler = start_scheduler(plane, tmp_path, "before-upgrade")
    try:
        bind(plane, namespace, "before", scheduler)
        held = get(plane, LEASE)["spec"]
        assert held["holderIdentity"] == "before-upgrade"

        helm_on(plane, home, "upgrade", helm.RELEASE, str(helm.CHART))

        history = helm_on(plane, home, "history", helm.RELEASE)
        assert f"kruntimes-scheduler-{PREVIOUS}" in history and f"kruntimes-scheduler-{__version__}" in history, history
        deployment = get(plane, f"/apis/apps/v1/namespaces/{SCHEDULER_NAMESPACE}/deployments/kruntimes-scheduler")
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"kruntimes-scheduler:{__version__}"
        # The same ServiceAccount object (a token is bound to its uid), so the running scheduler's
        # credential stays valid; the Role still grants its Lease, which it keeps renewing.
        kept = get(plane, f"/api/v1/namespaces/{SCHEDULER_NAMESPACE}/serviceaccounts/{SCHEDULER_SERVICE_ACCOUNT}")
        assert kept["metadata"]["uid"] == account["metadata"]["uid"]
        upgraded = str(get(plane, LEASE)["spec"]["renewTime"])
        wait_until(lambda: str(get(plane, LEASE)["spec"]["renewTime"]) > upgraded, timeout=60, interval=0.5,
                   what="a Lease renewal after the upgrade")
        lease = get(plane, LEASE)["spec"]
        assert (lease["holderIdentity"], lease.get("leaseTransitions"), lease["acquireTime"]) == (
            "before-upgrade", held.get("leaseTransitions"), held["acquireTime"]
        ), dumps(lease)
        bind(plane, namespace, "after", scheduler)
    finally:
        assert scheduler.stop() == 0, scheduler.tail()
    assert not scheduler.refused_requests(), scheduler.refused_requests()
