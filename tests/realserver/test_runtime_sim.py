"""The runtime simulator against the real kube-apiserver: its pods, the scheduler under deploy/ RBAC
binding a burst of Runs onto them, and ``kruntimes runtime-sim`` as an operator runs it.

The real server has no kubelet, controller manager or garbage collector: the simulator is what
makes pods Running, and what deletes the pods a deleted Runtime owned.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from kruntimes.kubeclient.kube import Kube, load_configuration
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.client import MANAGER, USER_AGENT, ClientSettings, SimulatorClient
from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import create, kubectl

KRUNTIMES = Path(sys.executable).with_name("kruntimes")
OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def runtime_manifest(namespace: str, name: str, *, replicas: int, runs: str = "2") -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "capacity": {"resources": {"runs": runs}}, "template": {"spec": {"containers": [{"name": "runtime", "image": "img"}]}}},
    }


def documented_role(namespace: str) -> str:
    """The Role docs/operations.md says the simulator needs, for ``namespace``."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text[text.index("### The permissions it needs"):]
    match = re.search(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None
    return match.group(1).replace("namespace: load-test", f"namespace: {namespace}")


def simulator_kubeconfig(plane: ControlPlane, namespace: str, path: Path) -> Path:
    """A ServiceAccount of ``namespace`` holding only the documented Role; its TokenRequest kubeconfig."""
    kubectl(plane, "-n", namespace, "create", "serviceaccount", "runtime-sim")
    kubectl(plane, "apply", "-f", "-", stdin=documented_role(namespace))
    kubectl(plane, "-n", namespace, "create", "rolebinding", "runtime-sim", "--role=kruntimes-runtime-sim", f"--serviceaccount={namespace}:runtime-sim")
    return plane.service_account_kubeconfig(path, namespace, "runtime-sim")


def pods(plane: ControlPlane, namespace: str, selector: str) -> dict[str, dict[str, Any]]:
    listed = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    assert isinstance(listed, dict)
    return {p["metadata"]["name"]: p for p in listed["items"]}


def runs(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    listed = plane.request("GET", f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs")
    assert isinstance(listed, dict)
    return list(listed["items"])


def test_a_burst_drains_through_the_scheduler_onto_simulated_pods_each_under_its_own_rbac(
    deployed: ControlPlane, namespace: str, scheduler_log: Path, tmp_path: Path
) -> None:
    kubeconfig = simulator_kubeconfig(deployed, namespace, tmp_path / "runtime-sim.kubeconfig")
    # a Runtime object too, so the Role's Runtime verbs are used (its pods serve another runtime)
    create(deployed, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runtimes", runtime_manifest(namespace, "go", replicas=1))
    done = subprocess.run(
        [str(KRUNTIMES), "runtime-sim", "--kubeconfig", str(kubeconfig), "-n", namespace, "--follow-runtimes",
         "--runtime", "python", "--replicas", "10", "--capacity", "runs=2", "--run-duration", "500ms",
         "--create-runs", "150", "--qps", "0", "--until-done", "--timeout", "120s", "--cleanup", "--progress-interval", "5s"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert re.search(r"all 150 finished [0-9.]+s after the first was created", done.stderr), done.stderr[-2000:]
    assert "pods over their capacity: none" in done.stderr, done.stderr[-2000:]
    assert re.search(r"^simulated for .* [0-9]+ conflicts, 0 errors$", done.stderr, flags=re.MULTILINE), done.stderr[-2000:]
    assert re.search(r"most Runs at once on one pod: 2\b", done.stderr), done.stderr[-2000:]
    assert re.search(r"cleaned up: 11 pods, 150 Runs deleted", done.stderr), done.stderr[-2000:]
    go = deployed.request("GET", f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runtimes/go")
    assert isinstance(go, dict) and go["status"]["readyReplicas"] == 1
    assert pods(deployed, namespace, f"app.kubernetes.io/managed-by={MANAGER}") == {}
    # an ApiError reads "HTTP 403 ..."; the namespace's random name may hold the digits 403
    assert "refused" not in done.stderr and "HTTP 403" not in done.stderr, done.stderr[-2000:]
    assert "forbidden" not in done.stderr.lower(), done.stderr[-2000:]


def test_a_runtime_object_gets_ready_pods_and_they_go_with_it(deployed: ControlPlane, namespace: str) -> None:
    kube = Kube(load_configuration(str(deployed.admin_kubeconfig)).unwrap().configuration, user_agent=USER_AGENT)
    client = SimulatorClient(kube, ClientSettings(namespace=namespace, follow_runtimes=True, heartbeat_interval=1.0, qps=0))
    client.start()
    try:
        create(deployed, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runtimes", runtime_manifest(namespace, "python", replicas=2, runs="3"))

        def ready() -> dict[str, dict[str, Any]] | None:
            found = pods(deployed, namespace, "runtime=python")
            return found if len(found) == 2 and all(decide.is_ready(p) for p in found.values()) else None

        found = wait_until(ready, timeout=30, what="two ready pods")
        for pod in found.values():
            assert pod["metadata"]["annotations"]["kruntimes.io/capacity.runs"] == "3"
            beat = next(c for c in pod["status"]["conditions"] if c["type"] == decide.HEARTBEAT)
            assert beat["status"] == "True" and beat["lastProbeTime"]
        first = next(c for c in found["python-0"]["status"]["conditions"] if c["type"] == decide.HEARTBEAT)["lastProbeTime"]
        wait_until(
            lambda: next(c for c in pods(deployed, namespace, "runtime=python")["python-0"]["status"]["conditions"] if c["type"] == decide.HEARTBEAT)["lastProbeTime"] > first,
            timeout=30, what="the heartbeat to advance",
        )
        kubectl(deployed, "-n", namespace, "delete", "runtime", "python", "--wait=false")
        wait_until(lambda: pods(deployed, namespace, "runtime=python") == {}, timeout=30, what="the deleted Runtime's pods to go (no garbage collector here)")
        assert client.counters.errors == 0
    finally:
        client.stop()
        kube.close()


def test_ctrl_c_stops_the_command_which_exits_0_and_cleans_up(deployed: ControlPlane, namespace: str) -> None:
    proc = subprocess.Popen(
        [str(KRUNTIMES), "runtime-sim", "--kubeconfig", str(deployed.admin_kubeconfig), "-n", namespace,
         "--runtime", "python", "--replicas", "3", "--cleanup"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_until(
            lambda: len(found := pods(deployed, namespace, "runtime=python")) == 3 and all(decide.is_ready(p) for p in found.values()),
            timeout=60, what="three ready pods",
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "stopped by SIGINT" in err and "cleaned up: 3 pods" in err, err[-3000:]
    assert pods(deployed, namespace, "runtime=python") == {}


def test_a_namespace_that_does_not_exist_is_refused(deployed: ControlPlane) -> None:
    done = subprocess.run(
        [str(KRUNTIMES), "runtime-sim", "--kubeconfig", str(deployed.admin_kubeconfig), "-n", "no-such-namespace", "--runtime", "python"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2 and "namespace no-such-namespace does not exist" in done.stderr, done.stderr
