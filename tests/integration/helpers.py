"""Glue for the controller's end-to-end tests: objects, polling, and checks over the write history."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.kube import PODS, RUNS, WORKSPACES, JSONObject, Kube
from kruntimes.pure.model.times import format_time
from tests.polling import wait_until as wait_until

from .servers import RealCluster  # re-exported for the integration tests

T = TypeVar("T")
NS = "default"
TEST_AGENT = "kruntimes-tests"




def at(obj: object, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def now_text() -> str:
    return format_time(datetime.now(timezone.utc))


def selector(**labels: str) -> dict[str, object]:
    return {"matchLabels": dict(labels)}


def term(**labels: str) -> dict[str, object]:
    return {"labelSelector": selector(**labels), "topologyKey": "kruntimes.io/runtime-pod"}


def get_run(kube: Kube, name: str, namespace: str = NS) -> JSONObject:
    return kube.get(RUNS.path(namespace, name)).unwrap()


def waiting(kube: Kube, name: str, namespace: str = NS) -> JSONObject | None:
    """The Run once it carries a status message (the scheduler wrote its Pending reason), else ``None``."""
    run = get_run(kube, name, namespace)
    return run if at(run, "status", "message") else None


def phase_of(kube: Kube, name: str, namespace: str = NS) -> str:
    return str(at(get_run(kube, name, namespace), "status", "phase") or "")


def assigned(kube: Kube, name: str, namespace: str = NS) -> str | None:
    """The Run's pod once it is Scheduled (or later), else ``None``."""
    run = get_run(kube, name, namespace)
    pod = at(run, "status", "assignedPod")
    return str(pod) if pod and at(run, "status", "phase") in ("Scheduled", "Running", "Ready") else None


def set_run_phase(kube: Kube, name: str, phase: str, *, pod: str | None = None, namespace: str = NS) -> JSONObject:
    """Write a Run's status as runtimed would (phase, and optionally its pod)."""
    current = get_run(kube, name, namespace)
    status: dict[str, object] = {"phase": phase}
    if pod is not None:
        status["assignedPod"] = pod
        status["assignedPodUID"] = str(at(kube.get(PODS.path(namespace, pod)).unwrap(), "metadata", "uid"))
    body = json.dumps({"metadata": {"resourceVersion": at(current, "metadata", "resourceVersion")}, "status": status})
    return kube.patch_status(RUNS.path(namespace, name), body).unwrap()


def make_workspace(kube: Kube, name: str, runtime: str, *, namespace: str = NS) -> JSONObject:
    body = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "PersistentWorkspace",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtime": runtime, "mode": "RuntimePodLocal"},
    }
    return kube.create(WORKSPACES.path(namespace), body).unwrap()


def set_workspace_status(kube: Kube, name: str, phase: str, pod: str | None = None, *, namespace: str = NS) -> JSONObject:
    current = kube.get(WORKSPACES.path(namespace, name)).unwrap()
    body = {
        "metadata": {"resourceVersion": at(current, "metadata", "resourceVersion")},
        "status": {"phase": phase, "boundPod": pod},
    }
    return kube.patch_status(WORKSPACES.path(namespace, name), json.dumps(body)).unwrap()


# --- the write history ------------------------------------------------------------------


def run_writes(cluster: DevCluster | RealCluster) -> list[Any]:
    return [w for w in cluster.history() if w.resource.plural == "runs"]


def max_usage_by_pod(cluster: DevCluster | RealCluster, namespace: str = NS) -> dict[str, int]:
    """The most Runs (by ``runs`` request, default 1) ever active at once on each pod, over every
    committed version of every Run, in commit order."""
    active: dict[str, tuple[str, int]] = {}
    usage: dict[str, int] = {}
    peak: dict[str, int] = {}
    for write in run_writes(cluster):
        if write.namespace != namespace:
            continue
        obj = write.object
        uid = str(at(obj, "metadata", "uid"))
        before = active.pop(uid, None)
        if before is not None:
            usage[before[0]] -= before[1]
        phase = at(obj, "status", "phase")
        pod = at(obj, "status", "assignedPod")
        if write.event_type != "DELETED" and phase in ("Scheduled", "Running", "Ready") and pod:
            requested = int(at(obj, "spec", "resources", "requests", "runs") or 1)
            active[uid] = (str(pod), requested)
            usage[str(pod)] = usage.get(str(pod), 0) + requested
            peak[str(pod)] = max(peak.get(str(pod), 0), usage[str(pod)])
    return peak


def writers_of_run_status(cluster: DevCluster) -> set[str]:
    """User agents that wrote a Run's status (the scheduler's, the tests' own runtimed stand-in...)."""
    return {w.user_agent for w in run_writes(cluster) if w.subresource == "status"}


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback test server)
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def events_for(kube: Kube, run: str, namespace: str = NS) -> list[JSONObject]:
    items, _ = kube.list(f"/api/v1/namespaces/{namespace}/events").unwrap()
    return [e for e in items if at(e, "involvedObject", "name") == run]


def names(items: Iterable[JSONObject]) -> list[str]:
    return [str(at(item, "metadata", "name")) for item in items]


def ready_pods(kube: Kube, namespace: str = NS) -> int:
    """Runtime Pods that are Running with a Ready condition (what a test waits for before scheduling)."""
    items, _ = kube.list(f"/api/v1/namespaces/{namespace}/pods").unwrap()
    return sum(
        1
        for pod in items
        if at(pod, "status", "phase") == "Running"
        and any(c.get("type") == "Ready" and c.get("status") == "True" for c in at(pod, "status", "conditions") or [])
    )
