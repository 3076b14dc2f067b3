"""Helpers for tests on the real control plane: kubectl as the admin, Runtime Pods made by hand."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

from tests.controlplane.server import ControlPlane

REPO: Final = Path(__file__).resolve().parents[2]
SCHEDULER_NAMESPACE: Final = "kruntimes-system"
SCHEDULER_SERVICE_ACCOUNT: Final = "kruntimes-scheduler"
HEARTBEAT: Final = "kruntimes.io/RuntimedReady"


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as the admin; a non-zero exit fails the test with kubectl's own words."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(plane.admin_kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr or done.stdout}"
    return done.stdout


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_runtime_pod(plane: ControlPlane, namespace: str, name: str, runtime: str, capacity: dict[str, str]) -> dict[str, Any]:
    """A Runtime Pod as runtimed leaves it: Running, Ready, with a fresh heartbeat and capacity annotations."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"runtime": runtime},
            "annotations": {f"kruntimes.io/capacity.{k}": v for k, v in capacity.items()},
        },
        "spec": {"containers": [{"name": "runtime", "image": "kruntimes/runtime:test"}]},
    }
    created = plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert isinstance(created, dict)
    stamp = now()
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": stamp} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ] + [{"type": HEARTBEAT, "status": "True", "lastTransitionTime": stamp, "lastProbeTime": stamp, "reason": "Heartbeat"}]
    status = {"phase": "Running", "conditions": conditions, "startTime": stamp, "podIP": "127.0.0.1", "hostIP": "127.0.0.1"}
    patched = plane.request_patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status})
    assert isinstance(patched, dict)
    return patched


def run_manifest(namespace: str, name: str, runtime: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtime": runtime, "mode": {"task": {}}, **spec},
    }


def create(plane: ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    created = plane.request("POST", path, body)
    assert isinstance(created, dict)
    return created


def runs(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    listed = plane.request("GET", f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs")
    assert isinstance(listed, dict)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def dumps(value: object) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
