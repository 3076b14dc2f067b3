"""Sharded replicas (overlays/sharded) under the RBAC that overlay installs, on the real API server."""

from __future__ import annotations

from pathlib import Path

from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import REPO, SchedulerProcess, apply_rendered, kubectl, ready_runtime_pod
from .test_modes import ELECTION, _kubeconfig, _namespace, _phase, _run


def test_sharded_replicas_split_the_namespaces_and_take_over_a_killed_ones(
    private_plane: ControlPlane, tmp_path: Path, processes: list[SchedulerProcess]
) -> None:
    plane = private_plane
    kubectl(plane, "apply", "--server-side", "-f", str(REPO / "deploy" / "crds"))
    apply_rendered(plane, REPO / "deploy" / "overlays" / "sharded")
    namespaces = [_namespace(plane) for _ in range(4)]
    for namespace in namespaces:
        ready_runtime_pod(plane, namespace, "python-0", "python", {"runs": "10"})
    kubeconfig = _kubeconfig(plane, tmp_path)
    for identity in ("a", "b"):
        process = SchedulerProcess.start(kubeconfig, tmp_path / f"{identity}.log", *ELECTION, "--shard-by-namespace",
                                         f"--leader-elect-identity={identity}", "--metrics-bind-address", "0")
        processes.append(process)
        process.wait_ready()
    for namespace in namespaces:
        _run(plane, namespace, "first")
    wait_until(lambda: all(_phase(plane, n, "first") == "Scheduled" for n in namespaces), timeout=90, interval=0.3,
               what="a Run bound in every namespace")

    def holders() -> dict[str, str]:
        """Namespace -> the replica holding its assignment Lease."""
        listed = plane.request(
            "GET", "/apis/coordination.k8s.io/v1/namespaces/kruntimes-system/leases?labelSelector=kruntimes.io/shard-role%3Dassignment"
        )
        assert isinstance(listed, dict)
        return {str(lease["metadata"]["labels"]["kruntimes.io/shard-namespace"]): str(lease["spec"].get("holderIdentity"))
                for lease in listed["items"]}

    wait_until(lambda: set(holders().values()) == {"a", "b"}, timeout=60, interval=0.3, what="both replicas holding namespaces")
    owner = holders()[namespaces[0]]
    processes[0 if owner == "a" else 1].kill()  # the replica serving the first test namespace
    for namespace in namespaces:
        _run(plane, namespace, "second")
    wait_until(lambda: all(_phase(plane, n, "second") == "Scheduled" for n in namespaces), timeout=90, interval=0.3,
               what="every namespace served by the survivor")
