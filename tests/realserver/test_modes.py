"""Every way deploy/ runs the scheduler, under the RBAC that way installs, on the real API server:
leader election on the Deployment's Lease, sharded replicas (overlays/sharded), namespaced
RoleBindings (components/namespaced) and secure metrics checked by the real TokenReview and
SubjectAccessReview (components/metrics-secure). Any request the API server refuses fails the test."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from tests.controlplane.server import ControlPlane
from tests.deploy.manifests import overlay
from tests.polling import wait_until

from .support import (
    REPO, SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, SchedulerProcess, apply_rendered, create, kubectl,
    ready_runtime_pod, run_manifest, runs,
)

DEPLOY = REPO / "deploy"
ELECTION = ("--leader-elect", f"--leader-elect-resource-namespace={SCHEDULER_NAMESPACE}",
            "--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms")


def _namespace(plane: ControlPlane) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    plane.create_namespace(name)
    return name


def _phase(plane: ControlPlane, namespace: str, name: str) -> str:
    return str(runs(plane, namespace).get(name, {}).get("status", {}).get("phase", ""))


def _run(plane: ControlPlane, namespace: str, name: str) -> None:
    create(plane, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", run_manifest(namespace, name, "python"))


def _kubeconfig(plane: ControlPlane, tmp_path: Path, name: str = "scheduler") -> Path:
    return plane.service_account_kubeconfig(tmp_path / f"{name}.kubeconfig", SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT)


def test_a_standby_takes_the_deployments_lease_when_the_leader_is_killed(
    private_plane: ControlPlane, tmp_path: Path, processes: list[SchedulerProcess]
) -> None:
    plane = private_plane
    apply_rendered(plane, DEPLOY)
    namespace = _namespace(plane)
    ready_runtime_pod(plane, namespace, "python-0", "python", {"runs": "10"})
    kubeconfig = _kubeconfig(plane, tmp_path)
    for identity in ("a", "b"):
        process = SchedulerProcess.start(kubeconfig, tmp_path / f"{identity}.log", *ELECTION,
                                         f"--leader-elect-identity={identity}", "--namespace", namespace,
                                         "--metrics-bind-address", "0")
        processes.append(process)
        process.wait_ready()
    _run(plane, namespace, "first")
    wait_until(lambda: _phase(plane, namespace, "first") == "Scheduled", timeout=60, interval=0.2, what="first bound")
    lease = plane.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{SCHEDULER_NAMESPACE}/leases/kruntimes-scheduler")
    assert isinstance(lease, dict)
    holder = lease["spec"]["holderIdentity"]
    leader = processes[0] if holder == "a" else processes[1]
    assert holder in ("a", "b")
    leader.kill()
    _run(plane, namespace, "second")
    wait_until(lambda: _phase(plane, namespace, "second") == "Scheduled", timeout=60, interval=0.2,
               what="second bound by the standby")
    taken = plane.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{SCHEDULER_NAMESPACE}/leases/kruntimes-scheduler")
    assert isinstance(taken, dict) and taken["spec"]["holderIdentity"] == ("b" if holder == "a" else "a")


def test_secure_metrics_ask_the_real_api_server_who_may_scrape(
    private_plane: ControlPlane, tmp_path: Path, processes: list[SchedulerProcess]
) -> None:
    plane = private_plane
    apply_rendered(plane, overlay(tmp_path, resources=[DEPLOY], components=[DEPLOY / "components" / "metrics-secure"]))
    namespace = _namespace(plane)
    for account in ("scraper", "stranger"):
        kubectl(plane, "create", "serviceaccount", "-n", namespace, account)
    kubectl(plane, "create", "clusterrolebinding", f"scraper-{namespace}", "--clusterrole=kruntimes:metrics-reader",
            f"--serviceaccount={namespace}:scraper")
    process = SchedulerProcess.start(_kubeconfig(plane, tmp_path), tmp_path / "secure.log", "--leader-elect=false",
                                     "--namespace", namespace, "--metrics-secure", "--metrics-bind-address=127.0.0.1:0")
    processes.append(process)
    process.wait_ready()
    metrics = process.url("metrics")
    assert metrics.startswith("https://127.0.0.1:")
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # the scheduler's own self-signed serving certificate

    def scrape(token: str | None) -> int:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        request = urllib.request.Request(f"{metrics}/metrics", headers=headers)
        try:
            with urllib.request.urlopen(request, context=insecure, timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as refused:
            return int(refused.code)

    assert scrape(plane.service_account_token(namespace, "scraper")) == 200
    assert scrape(plane.service_account_token(namespace, "stranger")) == 403
    assert scrape(None) == 401


def test_namespaced_rolebindings_are_enough_for_the_namespaces_they_name(
    private_plane: ControlPlane, tmp_path: Path, processes: list[SchedulerProcess]
) -> None:
    plane = private_plane
    namespace = _namespace(plane)
    apply_rendered(plane, overlay(tmp_path, resources=[DEPLOY], components=[DEPLOY / "components" / "namespaced"]))
    kubectl(plane, "delete", "clusterrolebinding", "kruntimes:scheduler", "--ignore-not-found")
    kubectl(plane, "create", "rolebinding", "kruntimes:scheduler", "-n", namespace, "--clusterrole=kruntimes:scheduler",
            f"--serviceaccount={SCHEDULER_NAMESPACE}:{SCHEDULER_SERVICE_ACCOUNT}")
    ready_runtime_pod(plane, namespace, "python-0", "python", {"runs": "1"})
    process = SchedulerProcess.start(_kubeconfig(plane, tmp_path), tmp_path / "namespaced.log", "--leader-elect=false",
                                     "--namespace", namespace, "--metrics-bind-address", "0")
    processes.append(process)
    process.wait_ready()
    _run(plane, namespace, "only")
    wait_until(lambda: _phase(plane, namespace, "only") == "Scheduled", timeout=60, interval=0.2, what="bound")
