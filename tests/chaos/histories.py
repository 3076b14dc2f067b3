"""Hand-made write histories for the checker's unit tests: a tiny builder that numbers versions."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kruntimes.verify import HistoryRecord, Resource

RUNS = Resource("kruntimes.io", "runs")
PODS = Resource("", "pods")
WORKSPACES = Resource("kruntimes.io", "persistentworkspaces")
LEASES = Resource("coordination.k8s.io", "leases")
EVENTS = Resource("", "events")
SCHED = "kruntimes-scheduler/a"
USER = "kubectl"
STAMP = "2025-01-01T00:00:00Z"
T0 = 1735689600.0  # STAMP as a POSIX time


class History:
    """Appends records with increasing resourceVersions and times; remembers each object's last version."""

    def __init__(self) -> None:
        self.records: list[HistoryRecord] = []
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 0
        self.time = T0

    def _add(self, resource: Resource, verb: str, subresource: str, obj: dict[str, Any], agent: str, event: str = "") -> dict[str, Any]:
        self.rv += 1
        self.time += 0.01
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        name = str(obj["metadata"]["name"])
        namespace = str(obj["metadata"].get("namespace", "default"))
        key = (resource.plural, name)
        kind = event or ("ADDED" if key not in self.objects else "MODIFIED")
        self.records.append(HistoryRecord(self.rv, kind, verb, resource, subresource, namespace, name, obj, agent, self.time))
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        return obj

    def advance(self, seconds: float) -> None:
        self.time += seconds

    # --- pods ---

    def pod(self, name: str, runtime: str = "python", capacity: Mapping[str, str] | None = None, uid: str = "") -> dict[str, Any]:
        annotations = {f"kruntimes.io/capacity.{k}": v for k, v in (capacity or {}).items()}
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "labels": {"runtime": runtime}, "annotations": annotations},
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2100-01-01T00:00:00Z"},
                ],
            },
        }
        return self._add(PODS, "create", "", obj, "simulator")

    def set_capacity(self, name: str, capacity: Mapping[str, str]) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects[("pods", name)])
        obj["metadata"]["annotations"] = {f"kruntimes.io/capacity.{k}": v for k, v in capacity.items()}
        return self._add(PODS, "update", "", obj, "simulator")

    def delete_pod(self, name: str) -> None:
        self._add(PODS, "delete", "", self.objects[("pods", name)], "simulator", "DELETED")

    # --- runs ---

    def run(self, name: str, runtime: str = "python", requests: Mapping[str, str] | None = None, namespace: str = "default",
            **spec: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"runtime": runtime, **spec}
        if requests is not None:
            body["resources"] = {"requests": dict(requests)}
        obj = {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "creationTimestamp": STAMP},
            "spec": body,
            "status": {"phase": "Pending"},
        }
        return self._add(RUNS, "create", "", obj, USER)

    def status(self, name: str, agent: str = SCHED, verb: str = "patch", subresource: str = "status", **status: Any) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects[("runs", name)])
        obj["status"] = {**obj.get("status", {}), **status}
        obj["status"] = {k: v for k, v in obj["status"].items() if v is not None}
        return self._add(RUNS, verb, subresource, obj, agent)

    def bind(self, name: str, pod: str, agent: str = SCHED, pod_uid: str = "") -> dict[str, Any]:
        return self.status(
            name,
            agent,
            phase="Scheduled",
            assignedPod=pod,
            assignedPodUID=pod_uid or f"uid-{pod}",
            message=None,
            conditions=[{"type": "Scheduled", "status": "True", "reason": "Assigned", "message": f"assigned to runtime pod {pod}"}],
        )

    def wait(self, name: str, message: str, agent: str = SCHED) -> dict[str, Any]:
        return self.status(
            name, agent, phase="Pending", message=message,
            conditions=[{"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": message}],
        )

    def fail(self, name: str, reason: str, message: str, agent: str = SCHED, phase: str = "Failed") -> dict[str, Any]:
        return self.status(
            name, agent, phase=phase, message=message, completionTime=STAMP,
            conditions=[
                {"type": "Running", "status": "False", "reason": reason, "message": message},
                {"type": "Completed", "status": "False", "reason": reason, "message": message},
            ],
        )

    def finish(self, name: str) -> dict[str, Any]:
        return self.status(name, "simulator", verb="update", phase="Succeeded")

    def reset(self, name: str) -> dict[str, Any]:
        """What runtimed does for a retry: back to Pending, unassigned."""
        return self.status(name, USER, verb="update", phase="Pending", assignedPod=None, assignedPodUID=None, message=None)

    def delete_run(self, name: str) -> None:
        self._add(RUNS, "delete", "", self.objects[("runs", name)], USER, "DELETED")

    # --- others ---

    def lease(self, holder: str, agent: str = "") -> dict[str, Any]:
        obj = {"metadata": {"name": "kruntimes-scheduler", "namespace": "default"}, "spec": {"holderIdentity": holder}}
        return self._add(LEASES, "update", "", obj, agent or f"kruntimes-scheduler/{holder or 'x'}")

    def event(self, agent: str = SCHED, namespace: str = "default") -> dict[str, Any]:
        return self._add(EVENTS, "create", "", {"metadata": {"name": f"e{self.rv}", "namespace": namespace}}, agent)

    # --- sharded mode's Leases (in namespace "default", group "g") ---

    def member(self, identity: str, *, delete_by: str = "", group: str = "g") -> dict[str, Any]:
        """Create (or renew) ``identity``'s membership Lease; with ``delete_by``, that replica deletes it (a fence)."""
        name = f"{group}-member-{identity}"
        labels = {"kruntimes.io/shard-group": group, "kruntimes.io/shard-role": "member"}
        obj = {"metadata": {"name": name, "namespace": "default", "labels": labels},
               "spec": {"holderIdentity": identity, "leaseDurationSeconds": 3}}
        if delete_by:
            return self._add(LEASES, "delete", "", self.objects[("leases", name)], f"kruntimes-scheduler/{delete_by}", "DELETED")
        verb = "update" if ("leases", name) in self.objects else "create"
        return self._add(LEASES, verb, "", obj, f"kruntimes-scheduler/{identity}")

    def assign(self, namespace: str, holder: str, *, by: str = "", group: str = "g") -> dict[str, Any]:
        """Write the assignment Lease of ``namespace`` with ``holder`` ("" = released), by ``by`` (default: the holder)."""
        name = f"{group}-ns-{namespace}"
        labels = {"kruntimes.io/shard-group": group, "kruntimes.io/shard-role": "assignment", "kruntimes.io/shard-namespace": namespace}
        obj = {"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": {"holderIdentity": holder} if holder else {}}
        verb = "update" if ("leases", name) in self.objects else "create"
        return self._add(LEASES, verb, "", obj, f"kruntimes-scheduler/{by or holder}")

    def raw(self, resource: Resource, verb: str, obj: dict[str, Any], agent: str, subresource: str = "") -> dict[str, Any]:
        return self._add(resource, verb, subresource, obj, agent)
