"""The runtime simulator's decisions, as functions of plain values.

This is a purely computational module: no I/O, no clock (the time is an argument: ``now`` in
seconds for deciding *when*, ``stamp`` in RFC 3339 for what is written), no randomness, no state.
Inputs are JSON objects as the API server returns them (read, never mutated); outputs are frozen
values or fresh JSON the caller may send. The drivers that perform the effects are
``kruntimes.devcluster.simulator.RuntimeSimulator`` (in process) and
``kruntimes.runtimesim.client.SimulatorClient`` (over HTTP).

What is simulated, after upstream's Runtime controller and runtimed:

- a **fleet** (a ``Runtime`` object, or one named on the command line) wants ``replicas`` Runtime
  Pods named ``<runtime>-<i>``, labelled ``runtime=<runtime>``, with the capacity annotations
  ``kruntimes.io/capacity.<resource>``;
- a pod is made **Running and Ready** at once, and its ``kruntimes.io/RuntimedReady`` heartbeat's
  ``lastProbeTime`` is refreshed every heartbeat interval;
- a **Run** bound to a live simulated pod goes Scheduled → Running at once and Running →
  Succeeded (or Failed, for the chosen share of Runs) after the run duration; a bound Run whose
  ``spec.cancelRequested`` is set becomes Cancelled.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, final

Obj: TypeAlias = dict[str, Any]
"""A JSON object."""

KRUNTIMES_GROUP: Final = "kruntimes.io"
HEARTBEAT: Final = "kruntimes.io/RuntimedReady"
CAPACITY_PREFIX: Final = "kruntimes.io/capacity."
RUNTIME_LABEL: Final = "runtime"
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
ACTIVE_PHASES: Final = frozenset({"Scheduled", "Running"})
"""The phases in which a bound Run is the simulated runtime's to execute."""
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed", "Cancelled", "Timeout"})
READY_CONDITIONS: Final = ("PodScheduled", "Initialized", "ContainersReady", "Ready")


# --- fleets and their pods --------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Owner:
    """The controller reference a Runtime's pods carry."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> Obj:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid, "controller": True, "blockOwnerDeletion": True}


@final
@dataclass(frozen=True, slots=True)
class Fleet:
    """A set of Runtime Pods the simulator keeps."""

    namespace: str
    runtime: str
    """The ``runtime`` label of its pods, and their names' prefix."""
    replicas: int
    capacity: tuple[tuple[str, str], ...] = (("runs", "2"),)
    """(resource, quantity), sorted; each becomes a ``kruntimes.io/capacity.<resource>`` annotation."""
    owner: Owner | None = None
    """The Runtime the pods belong to; ``None`` for a fleet named on the command line."""
    template: Mapping[str, Any] = field(default_factory=dict)
    """The Runtime's ``spec.template`` (pod metadata and spec), or empty."""


@final
@dataclass(frozen=True, slots=True)
class PodStyle:
    """How one driver's pods differ from another's."""

    manager: str
    """The ``app.kubernetes.io/managed-by`` label of every pod it makes: the API client only ever
    sees (watches) and touches pods that carry its own value."""
    runtime_image: str
    """The runtime container's image when the fleet has no template."""
    runtimed_image: str
    node_name: str | None = None
    """The dev cluster places pods on a node of its own; ``None`` leaves ``spec.nodeName`` unset."""
    scheduling_gate: str | None = None
    """On a real cluster a pod must stay out of kube-scheduler's and every kubelet's hands (the
    simulator plays the kubelet): a scheduling gate keeps it unscheduled, so none runs it and the
    pod garbage collector leaves it alone, as it would not a pod bound to a node that does not exist."""


def fleet_of_runtime(runtime: Mapping[str, Any]) -> Fleet:
    """The fleet a ``Runtime`` object wants: none while it is being deleted."""
    meta = runtime.get("metadata") or {}
    spec = runtime.get("spec") or {}
    value = spec.get("replicas", 1)
    replicas = max(0, value) if isinstance(value, int) and not isinstance(value, bool) else 1
    if meta.get("deletionTimestamp"):
        replicas = 0
    resources = (spec.get("capacity") or {}).get("resources") if isinstance(spec.get("capacity"), Mapping) else None
    capacity = tuple(sorted((str(k), str(v)) for k, v in resources.items())) if isinstance(resources, Mapping) else ()
    template = spec.get("template")
    owner = Owner(str(runtime.get("apiVersion", f"{KRUNTIMES_GROUP}/v1alpha1")), "Runtime", str(meta.get("name", "")), str(meta.get("uid", "")))
    return Fleet(str(meta.get("namespace", "")), owner.name, replicas, capacity, owner, template if isinstance(template, Mapping) else {})


def pod_names(fleet: Fleet) -> tuple[str, ...]:
    return tuple(f"{fleet.runtime}-{i}" for i in range(fleet.replicas))


def capacity_annotations(fleet: Fleet) -> dict[str, str]:
    return {f"{CAPACITY_PREFIX}{resource}": quantity for resource, quantity in fleet.capacity}


def controller_of(pod: Mapping[str, Any]) -> Owner | None:
    """The Runtime that controls ``pod``, if one does."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("kind") == "Runtime" and ref.get("controller") and str(ref.get("apiVersion", "")).startswith(KRUNTIMES_GROUP + "/"):
            return Owner(str(ref["apiVersion"]), "Runtime", str(ref.get("name", "")), str(ref.get("uid", "")))
    return None


def pod_manifest(fleet: Fleet, name: str, style: PodStyle) -> Obj:
    """The pod the controller creates: the template's containers plus the ``runtimed`` sidecar."""
    template_meta = fleet.template.get("metadata") or {}
    spec: Obj = _json_copy(fleet.template.get("spec") or {})
    containers = spec.get("containers") or [{"name": "runtime", "image": style.runtime_image}]
    spec["containers"] = [*containers, {"name": "runtimed", "image": style.runtimed_image}]
    spec.setdefault("restartPolicy", "Always")
    if style.node_name is not None:
        spec.setdefault("nodeName", style.node_name)
    if style.scheduling_gate is not None:
        spec.pop("nodeName", None)  # a gated pod may not name a node
        spec["schedulingGates"] = [{"name": style.scheduling_gate}]
    metadata: Obj = {
        "name": name,
        "namespace": fleet.namespace,
        "labels": {**(template_meta.get("labels") or {}), RUNTIME_LABEL: fleet.runtime, MANAGED_BY: style.manager},
        "annotations": {**(template_meta.get("annotations") or {}), **capacity_annotations(fleet)},
    }
    if fleet.owner is not None:
        metadata["ownerReferences"] = [fleet.owner.reference()]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@final
@dataclass(frozen=True, slots=True)
class FleetPlan:
    """What a fleet's pods need, in the order to do it."""

    delete: tuple[str, ...] = ()
    """Pods of a Runtime that is gone or was replaced (another uid), and pods beyond ``replicas``."""
    create: tuple[str, ...] = ()
    annotate: tuple[tuple[str, Mapping[str, str]], ...] = ()
    """(pod, its annotations as they should be): the capacity changed."""
    start: tuple[str, ...] = ()
    """Pods wanted and not Running yet."""


def plan_fleet(fleet: Fleet, pods: Mapping[str, Mapping[str, Any]]) -> FleetPlan:
    """What to do about ``pods``: every pod this fleet may own, by name (for a Runtime's fleet, the
    pods its name controls, whatever their owner's uid). A pod being deleted is left to finish, and
    its name is not reused until it is gone."""
    wanted = set(pod_names(fleet))
    uid = fleet.owner.uid if fleet.owner is not None else None
    delete: list[str] = []
    annotate: list[tuple[str, Mapping[str, str]]] = []
    start: list[str] = []
    for name in sorted(pods):
        pod = pods[name]
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        owner = controller_of(pod)
        if (owner.uid if owner is not None else None) != uid or name not in wanted:
            delete.append(name)
            continue
        annotations = desired_annotations(pod, fleet)
        if annotations is not None:
            annotate.append((name, annotations))
        if not is_running(pod):
            start.append(name)
    create = tuple(sorted(wanted - pods.keys()))
    return FleetPlan(tuple(delete), create, tuple(annotate), tuple(start))


def desired_annotations(pod: Mapping[str, Any], fleet: Fleet) -> dict[str, str] | None:
    """The pod's annotations with the fleet's capacity in place of its own; ``None`` when unchanged."""
    current: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    merged = {k: v for k, v in current.items() if not k.startswith(CAPACITY_PREFIX)} | capacity_annotations(fleet)
    return None if merged == dict(current) else merged


def annotation_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    """A JSON merge patch of ``metadata.annotations`` from ``current`` to ``desired`` (``None`` removes)."""
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in desired})
    return patch


def is_running(pod: Mapping[str, Any]) -> bool:
    """Running and not being deleted: a pod the simulator keeps heart-beating."""
    return (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Running, not being deleted, and its first ``Ready`` condition ``True`` (as the scheduler reads it)."""
    if not is_running(pod):
        return False
    ready = next((c for c in (pod.get("status") or {}).get("conditions") or () if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    return ready is not None and ready.get("status") == "True"


def ready_replicas(fleet: Fleet, pods: Mapping[str, Mapping[str, Any]]) -> int:
    wanted = set(pod_names(fleet))
    return sum(1 for name, pod in pods.items() if name in wanted and is_running(pod))


def runtime_status(runtime: Mapping[str, Any], ready: int) -> Obj | None:
    """The Runtime's status with ``readyReplicas``; ``None`` when unchanged."""
    current = runtime.get("status") or {}
    status = {**current, "readyReplicas": ready}
    return None if status == current else status


# --- pod status ------------------------------------------------------------------------------------


def set_condition(conditions: Sequence[Obj], type_: str, status: str, stamp: str, *, reason: str = "", message: str = "", probe: bool = False) -> list[Obj]:
    """``conditions`` with ``type_`` set in its place (appended when absent); ``lastTransitionTime``
    moves only when the status does. The other conditions are shared, not copied (neither input
    is mutated)."""
    old = next((c for c in conditions if c.get("type") == type_), None)
    cond: Obj = {"type": type_, "status": status}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    if probe:
        cond["lastProbeTime"] = stamp
    cond["lastTransitionTime"] = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else stamp
    out = [c for c in conditions if c.get("type") != type_]
    index = next((i for i, c in enumerate(conditions) if c.get("type") == type_), len(out))
    out.insert(index, cond)
    return out


def pod_status(pod: Mapping[str, Any], stamp: str, *, beat: bool) -> Obj | None:
    """Running, Ready and (with ``beat``) a heartbeat probed at ``stamp``: the whole status, so a
    Pending pod becomes usable in one write; ``None`` when it would change nothing."""
    current: Mapping[str, Any] = pod.get("status") or {}
    status: Obj = dict(current)  # the keys set below are replaced, not mutated
    started = status.get("startTime") or stamp
    conditions: list[Obj] = list(status.get("conditions") or [])
    for type_ in READY_CONDITIONS:
        conditions = set_condition(conditions, type_, "True", stamp)
    if beat:
        conditions = set_condition(conditions, HEARTBEAT, "True", stamp, reason="Heartbeat", message="runtimed is serving", probe=True)
    status.update(
        phase="Running",
        conditions=conditions,
        startTime=started,
        hostIP="127.0.0.1",
        podIP="127.0.0.1",
        containerStatuses=[
            {"name": c.get("name", ""), "ready": True, "started": True, "restartCount": 0, "image": c.get("image", ""), "imageID": "", "state": {"running": {"startedAt": started}}}
            for c in (pod.get("spec") or {}).get("containers") or ()
        ],
    )
    return None if status == current else status


# --- Runs ----------------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class RunSettings:
    duration: float
    """Seconds from Running to the end."""
    fail_percent: int = 0
    """The share of Runs (0..100) that end Failed instead of Succeeded, chosen by UID: the same Run
    always gets the same outcome, whichever driver or replica decides."""


@final
@dataclass(frozen=True, slots=True)
class Ignore:
    """Not the simulator's: not bound, or finished. Forget it."""


@final
@dataclass(frozen=True, slots=True)
class Park:
    """Bound to a pod that is not a live simulated one (yet): look again when that pod is."""

    pod: str


@final
@dataclass(frozen=True, slots=True)
class Write:
    """Write ``phase`` now (``run_status``)."""

    phase: str
    started: float | None
    """When the Run's execution started, to remember (it ends ``duration`` later); ``None`` once it ends."""


@final
@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to write before ``until``."""

    until: float
    started: float


RunStep: TypeAlias = Ignore | Park | Write | Wait
Outcome: TypeAlias = Literal["Succeeded", "Failed"]


def is_active(run: Mapping[str, Any]) -> bool:
    status = run.get("status") or {}
    return bool(status.get("assignedPod")) and status.get("phase") in ACTIVE_PHASES


def assignment(run: Mapping[str, Any]) -> tuple[str, str]:
    """(``status.assignedPod``, ``status.assignedPodUID``), empty strings when unset."""
    status = run.get("status") or {}
    return str(status.get("assignedPod") or ""), str(status.get("assignedPodUID") or "")


def outcome(uid: str, fail_percent: int) -> Outcome:
    return "Failed" if zlib.crc32(uid.encode()) % 100 < fail_percent else "Succeeded"


def run_step(run: Mapping[str, Any], *, pod_live: bool, started: float | None, now: float, settings: RunSettings) -> RunStep:
    """What a bound Run gets next. ``pod_live``: its assigned pod is a live pod of this simulator
    (with the assigned UID, when one is set); ``started``: when this driver saw its execution start
    (``None`` when it has not: a Run found Running, after a restart, starts over now)."""
    if not is_active(run):
        return Ignore()
    if not pod_live:
        return Park(assignment(run)[0])
    if (run.get("spec") or {}).get("cancelRequested") is True:
        return Write("Cancelled", None)
    if (run.get("status") or {}).get("phase") == "Scheduled":
        return Write("Running", now)
    since = now if started is None else started
    due = since + settings.duration
    if now < due:
        return Wait(due, since)
    return Write(outcome(str((run.get("metadata") or {}).get("uid", "")), settings.fail_percent), None)


_ENDINGS: Final[Mapping[str, tuple[str, str, str, str, str]]] = {
    # phase: the Running condition's reason and message, the Completed condition's status, reason and message
    "Succeeded": ("Completed", "run finished", "True", "Succeeded", "run succeeded"),
    "Failed": ("Failed", "run failed", "False", "Failed", "run failed"),
    "Cancelled": ("Cancelled", "cancelled by user", "False", "Cancelled", "cancelled by user"),
}


def run_status(run: Mapping[str, Any], phase: str, stamp: str) -> Obj:
    """The Run's status once it is ``phase`` (Running, Succeeded, Failed or Cancelled) at ``stamp``."""
    status: Obj = dict(run.get("status") or {})
    conditions: list[Obj] = list(status.get("conditions") or [])
    if phase == "Running":
        pod = status.get("assignedPod", "")
        conditions = set_condition(conditions, "Running", "True", stamp, reason="Started", message=f"running on runtime pod {pod}")
    else:
        reason, message, completed, completed_reason, completed_message = _ENDINGS[phase]
        conditions = set_condition(conditions, "Running", "False", stamp, reason=reason, message=message)
        conditions = set_condition(conditions, "Completed", completed, stamp, reason=completed_reason, message=completed_message)
        status["completionTime"] = stamp
    status.update(phase=phase, conditions=conditions)
    return status


def _json_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_copy(v) for v in value]
    return value
