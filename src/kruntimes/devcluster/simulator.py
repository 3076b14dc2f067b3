"""The runtime simulator: what the kruntimes Runtime controller and runtimed would do, on the dev cluster.

For every ``Runtime`` it keeps ``spec.replicas`` Runtime Pods named
``<runtime>-<n>`` from its ``spec.template`` plus a ``runtimed`` container (labels ``runtime=<name>``, capacity annotations
``kruntimes.io/capacity.<resource>``, owned by the Runtime), marks them
Running and Ready, and refreshes the ``kruntimes.io/RuntimedReady``
heartbeat's ``lastProbeTime``. Optionally it executes Runs bound to its pods:
Scheduled -> Running -> Succeeded after a fixed duration.

It is level-triggered: any change to runtimes, pods (or runs, when executing)
wakes one reconcile pass over the current state. Every write goes through
:class:`ObjectService`, so it appears in watches and the write history under
the user agent :data:`USER_AGENT`, and carries the resourceVersion it read
(a conflict is simply retried on the next pass).
"""

from __future__ import annotations

import copy
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, final

from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.resources import KRUNTIMES_GROUP, ResourceDef
from kruntimes.devcluster.service import ObjectService
from kruntimes.devcluster.store import WriteContext
from kruntimes.devcluster.times import rfc3339
from kruntimes.devcluster.types import GroupResource, Obj

_P = ParamSpec("_P")

USER_AGENT: Final = "kruntimes-devcluster/simulator"
RUNTIMES: Final = GroupResource(KRUNTIMES_GROUP, "runtimes")
RUNS: Final = GroupResource(KRUNTIMES_GROUP, "runs")
PODS: Final = GroupResource("", "pods")
HEARTBEAT: Final = "kruntimes.io/RuntimedReady"
CAPACITY_PREFIX: Final = "kruntimes.io/capacity."
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "kruntimes-devcluster"}


@final
@dataclass(frozen=True, slots=True)
class SimulatorSettings:
    heartbeat_interval: float = 5.0
    """Seconds between heartbeats (lastProbeTime has whole-second precision, so below 1 s it moves once a second)."""
    execute_runs: float | None = None
    """Seconds a Run assigned to a simulated pod takes from Running to Succeeded; None leaves Runs alone."""


def set_condition(conditions: list[Obj], type_: str, status: str, now: str, *, reason: str = "", message: str = "", probe: bool = False) -> list[Obj]:
    """Conditions with ``type_`` set; ``lastTransitionTime`` moves only when the status does."""
    out = [dict(c) for c in conditions if c.get("type") != type_]
    old = next((c for c in conditions if c.get("type") == type_), None)
    cond: Obj = {"type": type_, "status": status}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    if probe:
        cond["lastProbeTime"] = now
    cond["lastTransitionTime"] = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    index = next((i for i, c in enumerate(conditions) if c.get("type") == type_), len(out))
    out.insert(index, cond)
    return out


def _replicas(runtime: Obj) -> int:
    value = runtime.get("spec", {}).get("replicas", 1)
    return max(0, value) if isinstance(value, int) and not isinstance(value, bool) else 1


def _capacity_annotations(runtime: Obj) -> dict[str, str]:
    resources = (runtime.get("spec", {}).get("capacity") or {}).get("resources") or {}
    return {f"{CAPACITY_PREFIX}{k}": str(v) for k, v in resources.items()} if isinstance(resources, dict) else {}


def _owner_uid(pod: Obj) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Runtime" and str(ref.get("apiVersion", "")).startswith(KRUNTIMES_GROUP + "/") and ref.get("controller"):
            return str(ref.get("uid"))
    return None


@final
class RuntimeSimulator:
    """Reconciles Runtimes into Runtime Pods on a background thread (see the module docstring)."""

    def __init__(self, service: ObjectService, settings: SimulatorSettings = SimulatorSettings(), *, clock: Callable[[], float] = time.time) -> None:
        self._service = service
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_beat: dict[tuple[str, str], float] = {}
        self._paused: set[tuple[str, str]] = set()
        self._run_started: dict[str, float] = {}

    # -- control ------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        resources = [RUNTIMES, PODS] + ([RUNS] if self.settings.execute_runs is not None else [])
        sub = self._service.store.subscribe(resources, since=self._service.store.resource_version)
        self._stop.clear()

        def loop() -> None:
            try:
                while not self._stop.is_set():
                    try:
                        wait = self.reconcile()
                    except Exception:  # keep simulating; a bug here must not silently freeze the pods
                        traceback.print_exc(file=sys.stderr)
                        wait = 1.0
                    if sub.get(wait) is not None:
                        sub.drain()
            finally:
                self._service.store.unsubscribe(sub)

        self._sub = sub
        self._thread = threading.Thread(target=loop, name="devcluster-simulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            self._sub.close()
            thread.join()

    def pause_heartbeat(self, namespace: str, pod: str) -> None:
        """Stop refreshing one pod's heartbeat (it goes stale after the scheduler's staleAfter)."""
        with self._lock:
            self._paused.add((namespace, pod))

    def resume_heartbeat(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._paused.discard((namespace, pod))
            self._last_beat.pop((namespace, pod), None)

    # -- one pass -----------------------------------------------------------------------

    def _rd(self, resource: GroupResource) -> ResourceDef | None:
        return self._service.registry.storage(resource)

    def reconcile(self) -> float:
        """One level-triggered pass; returns the seconds until the next timed action is due."""
        with self._lock:
            runtime_rd, pod_rd = self._rd(RUNTIMES), self._rd(PODS)
            if runtime_rd is None or pod_rd is None:
                return 1.0
            runtimes, _ = self._service.store.list_objects(RUNTIMES)
            pods, _ = self._service.store.list_objects(PODS)
            by_owner: dict[str, list[Obj]] = {}
            for pod in pods:
                uid = _owner_uid(pod)
                if uid is not None:
                    by_owner.setdefault(uid, []).append(pod)
            live_uids = set()
            for runtime in runtimes:
                live_uids.add(runtime["metadata"]["uid"])
                self._guard(self._reconcile_runtime, runtime_rd, pod_rd, runtime, by_owner.get(runtime["metadata"]["uid"], []))
            for uid, owned in by_owner.items():
                if uid not in live_uids:
                    for pod in owned:
                        self._guard(self._delete_pod, pod_rd, pod)
            next_due = self._heartbeats(pod_rd, [p for p in pods if _owner_uid(p) in live_uids])
            if self.settings.execute_runs is not None:
                next_due = min(next_due, self._execute_runs(pods))
            return max(0.05, min(next_due, 1.0))

    @staticmethod
    def _guard(action: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            action(*args, **kwargs)
        except ApiError:
            pass  # conflict / not found / gone namespace: the next pass sees the new state

    def _context(self, verb: str, subresource: str = "") -> WriteContext:
        return WriteContext(verb, subresource, USER_AGENT)

    def _reconcile_runtime(self, runtime_rd: ResourceDef, pod_rd: ResourceDef, runtime: Obj, owned: list[Obj]) -> None:
        meta = runtime["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        desired = 0 if meta.get("deletionTimestamp") else _replicas(runtime)
        wanted = {f"{name}-{i}" for i in range(desired)}
        have = {p["metadata"]["name"]: p for p in owned}
        annotations = _capacity_annotations(runtime)
        for pod_name in sorted(wanted - have.keys()):
            self._guard(self._create_pod, pod_rd, runtime, pod_name, annotations)
        for pod_name, pod in have.items():
            if pod_name not in wanted:
                self._guard(self._delete_pod, pod_rd, pod)
                continue
            self._guard(self._sync_pod, pod_rd, runtime, pod, annotations)
        ready = sum(1 for n, p in have.items() if n in wanted and p.get("status", {}).get("phase") == "Running")
        status = {**(runtime.get("status") or {}), "readyReplicas": ready}
        if status != runtime.get("status"):
            body = {**runtime, "status": status}
            self._guard(self._service.update, runtime_rd, namespace, name, body, self._context("update", "status"))

    def _create_pod(self, pod_rd: ResourceDef, runtime: Obj, pod_name: str, annotations: Mapping[str, str]) -> None:
        meta = runtime["metadata"]
        template = runtime.get("spec", {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        containers = spec.get("containers") or [{"name": "runtime", "image": "kruntimes/runtime:devcluster"}]
        # the upstream controller adds the runtimed sidecar to the template's containers
        spec["containers"] = [*containers, {"name": "runtimed", "image": "kruntimes/runtimed:devcluster"}]
        spec.setdefault("nodeName", "devcluster-node")
        spec.setdefault("restartPolicy", "Always")
        pod: Obj = {
            "metadata": {
                "name": pod_name,
                "namespace": meta["namespace"],
                "labels": {**(template_meta.get("labels") or {}), "runtime": meta["name"], **MANAGED_BY},
                "annotations": {**(template_meta.get("annotations") or {}), **annotations},
                "ownerReferences": [
                    {"apiVersion": runtime["apiVersion"], "kind": "Runtime", "name": meta["name"], "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
                ],
            },
            "spec": spec,
        }
        created = self._service.create(pod_rd, str(meta["namespace"]), pod, self._context("create"))
        self._write_pod_status(pod_rd, created, force_beat=True)

    def _delete_pod(self, pod_rd: ResourceDef, pod: Obj) -> None:
        meta = pod["metadata"]
        self._service.delete(pod_rd, str(meta["namespace"]), str(meta["name"]), self._context("delete"), preconditions={"uid": meta["uid"]})
        self._last_beat.pop((str(meta["namespace"]), str(meta["name"])), None)

    def _sync_pod(self, pod_rd: ResourceDef, runtime: Obj, pod: Obj, annotations: Mapping[str, str]) -> None:
        meta = pod["metadata"]
        current = {k: v for k, v in (meta.get("annotations") or {}).items()}
        merged = {k: v for k, v in current.items() if not k.startswith(CAPACITY_PREFIX)} | dict(annotations)
        if merged != current:
            body = copy.deepcopy(pod)
            body["metadata"]["annotations"] = merged
            pod = self._service.update(pod_rd, str(meta["namespace"]), str(meta["name"]), body, self._context("update"))
        if pod.get("status", {}).get("phase") != "Running":
            self._write_pod_status(pod_rd, pod, force_beat=True)

    def _write_pod_status(self, pod_rd: ResourceDef, pod: Obj, *, force_beat: bool = False) -> None:
        """Running + Ready + a fresh heartbeat; the whole status so a Pending pod becomes usable in one write."""
        meta = pod["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        now_s = rfc3339(self._clock())
        status = copy.deepcopy(pod.get("status") or {})
        started = status.get("startTime") or now_s
        conditions = list(status.get("conditions") or [])
        for type_ in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            conditions = set_condition(conditions, type_, "True", now_s)
        paused = key in self._paused
        if not paused or force_beat:
            conditions = set_condition(conditions, HEARTBEAT, "True", now_s, reason="Heartbeat", message="runtimed is serving", probe=True)
        status.update(
            phase="Running",
            conditions=conditions,
            startTime=started,
            hostIP="127.0.0.1",
            podIP="127.0.0.1",
            containerStatuses=[
                {"name": c.get("name", ""), "ready": True, "started": True, "restartCount": 0, "image": c.get("image", ""), "imageID": "", "state": {"running": {"startedAt": started}}}
                for c in pod.get("spec", {}).get("containers") or []
            ],
        )
        if status == pod.get("status"):
            return
        body = {**pod, "status": status}
        self._service.update(pod_rd, key[0], key[1], body, self._context("update", "status"))
        self._last_beat[key] = time.monotonic()

    def _heartbeats(self, pod_rd: ResourceDef, pods: list[Obj]) -> float:
        interval = max(0.05, self.settings.heartbeat_interval)
        now = time.monotonic()
        next_due = interval
        for pod in pods:
            meta = pod["metadata"]
            key = (str(meta["namespace"]), str(meta["name"]))
            if key in self._paused or meta.get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Running":
                continue
            last = self._last_beat.get(key)
            if last is None or now - last >= interval:
                self._guard(self._write_pod_status, pod_rd, pod)
                self._last_beat[key] = now
                last = now
            next_due = min(next_due, last + interval - now)
        return next_due

    def _execute_runs(self, pods: list[Obj]) -> float:
        duration = self.settings.execute_runs
        run_rd = self._rd(RUNS)
        if duration is None or run_rd is None:
            return 1.0
        ours = {(str(p["metadata"]["namespace"]), str(p["metadata"]["name"])) for p in pods if _owner_uid(p) is not None and p.get("status", {}).get("phase") == "Running"}
        runs, _ = self._service.store.list_objects(RUNS)
        now = time.monotonic()
        next_due = 1.0
        seen = set()
        for run in runs:
            meta, status = run["metadata"], run.get("status") or {}
            uid = str(meta["uid"])
            if (str(meta["namespace"]), str(status.get("assignedPod", ""))) not in ours:
                continue
            phase = status.get("phase")
            if phase == "Scheduled":
                self._guard(self._set_run_phase, run_rd, run, "Running")
                self._run_started[uid] = now
                next_due = min(next_due, duration)
            elif phase == "Running":
                started = self._run_started.setdefault(uid, now)
                if now - started >= duration:
                    self._guard(self._set_run_phase, run_rd, run, "Succeeded")
                else:
                    next_due = min(next_due, started + duration - now)
            seen.add(uid)
        self._run_started = {u: t for u, t in self._run_started.items() if u in seen}
        return next_due

    def _set_run_phase(self, run_rd: ResourceDef, run: Obj, phase: str) -> None:
        now_s = rfc3339(self._clock())
        status: dict[str, Any] = copy.deepcopy(run.get("status") or {})
        conditions = list(status.get("conditions") or [])
        pod = status.get("assignedPod", "")
        if phase == "Running":
            conditions = set_condition(conditions, "Running", "True", now_s, reason="Started", message=f"running on runtime pod {pod}")
        else:
            conditions = set_condition(conditions, "Running", "False", now_s, reason="Completed", message="run finished")
            conditions = set_condition(conditions, "Completed", "True", now_s, reason="Succeeded", message="run succeeded")
            status["completionTime"] = now_s
        status.update(phase=phase, conditions=conditions)
        meta = run["metadata"]
        self._service.update(run_rd, str(meta["namespace"]), str(meta["name"]), {**run, "status": status}, self._context("update", "status"))
