"""The tests' one set of typed object builders: the JSON the API server sends, its decoded
records, the cluster state they make, and the same objects written to a running server.

Tests describe a world in a few keyword arguments; everything not named takes
the value a healthy cluster would show at :data:`NOW` (a Running, Ready pod
with a fresh heartbeat; a Pending Run asking for nothing but one ``runs``
slot). UIDs default to a value derived from namespace and name, so two calls
for the same object agree and objects in different namespaces never collide.
The writers (:func:`make_pod`, :func:`make_run`) stamp the wall clock instead,
since the server and the scheduler under test read it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from datetime import datetime, timedelta, timezone
from typing import Final, ParamSpec, TypeAlias, TypeVar

from returns.result import Result

from kruntimes.kubeclient.kube import PODS, RUNS, JSONObject, Kube

from kruntimes.pure.readers.kube import DecodeError, decode_pod, decode_run, decode_workspace
from kruntimes.pure.model.objects import (
    API_VERSION,
    CAPACITY_ANNOTATION_PREFIX,
    HEARTBEAT_CONDITION,
    RUNTIME_LABEL,
    TOPOLOGY_KEY,
    WORKSPACE_KIND,
    WORKSPACE_MODE_LOCAL,
    Object,
    Run,
)
from kruntimes.pure.model.times import format_time
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply

Json: TypeAlias = dict[str, object]
_P = ParamSpec("_P")
_T = TypeVar("_T")

NOW: Final = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
"""The instant every builder's defaults describe."""
NOW_TEXT: Final = format_time(NOW)
EARLIER_TEXT: Final = format_time(NOW - timedelta(hours=1))


def at(seconds: float) -> str:
    """RFC 3339 text for ``NOW + seconds`` (negative: in the past)."""
    return format_time(NOW + timedelta(seconds=seconds))


def _uid(kind: str, namespace: str, name: str) -> str:
    return f"uid-{kind}-{namespace}-{name}"


# --- pods ------------------------------------------------------------------------


def pod_json(
    name: str,
    runtime: str | None = "python",
    namespace: str = "default",
    capacity: Mapping[str, str] | None = None,
    ready: bool | None = True,
    phase: str = "Running",
    heartbeat_at: str | None = NOW_TEXT,
    heartbeat_status: str | None = "True",
    uid: str | None = None,
    resource_version: str = "1",
    deleting: bool = False,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Json:
    """A core/v1 Pod labelled ``runtime=<runtime>`` (``None``: no runtime label).

    ``capacity`` becomes ``kruntimes.io/capacity.<resource>`` annotations;
    ``ready=None`` omits the Ready condition; ``heartbeat_status=None`` omits
    the heartbeat condition; ``heartbeat_at=None`` omits its probe time.
    """
    all_labels: dict[str, str] = dict(labels or {})
    if runtime is not None:
        all_labels[RUNTIME_LABEL] = runtime
    all_annotations: dict[str, str] = dict(annotations or {})
    for resource, value in (capacity or {}).items():
        all_annotations[CAPACITY_ANNOTATION_PREFIX + resource] = value
    conditions: list[Json] = []
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    if heartbeat_status is not None:
        heartbeat: Json = {"type": HEARTBEAT_CONDITION, "status": heartbeat_status}
        if heartbeat_at is not None:
            heartbeat["lastProbeTime"] = heartbeat_at
        conditions.append(heartbeat)
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": uid or _uid("pod", namespace, name),
        "resourceVersion": resource_version,
        "labels": all_labels,
        "annotations": all_annotations,
    }
    if deleting:
        metadata["deletionTimestamp"] = NOW_TEXT
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "runtime", "image": "runtime:latest"}]},
        "status": {"phase": phase, "conditions": conditions},
    }


def _decoding(
    build: Callable[_P, Json], decode: Callable[[object], Result[_T, DecodeError]]
) -> Callable[_P, _T]:
    """``build`` then ``decode``, with ``build``'s exact signature; raises if undecodable."""

    def decoded(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return decode(build(*args, **kwargs)).unwrap()

    return decoded


decoded_pod: Final = _decoding(pod_json, decode_pod)
""":func:`pod_json`, decoded."""


# --- runs ------------------------------------------------------------------------------


def term(labels: Mapping[str, str] | None = None, expressions: Sequence[Json] | None = None) -> Json:
    """One affinity term over ``matchLabels``/``matchExpressions`` on the runtime-pod topology."""
    selector: Json = {}
    if labels is not None:
        selector["matchLabels"] = dict(labels)
    if expressions is not None:
        selector["matchExpressions"] = list(expressions)
    return {"labelSelector": selector, "topologyKey": TOPOLOGY_KEY}


def expression(key: str, operator: str, values: Sequence[str] | None = None) -> Json:
    """One ``matchExpressions`` entry."""
    result: Json = {"key": key, "operator": operator}
    if values is not None:
        result["values"] = list(values)
    return result


def affinity_json(
    required: Sequence[Json] = (),
    preferred: Sequence[tuple[int, Json]] = (),
    anti_required: Sequence[Json] = (),
    anti_preferred: Sequence[tuple[int, Json]] = (),
) -> Json:
    """``spec.affinity`` from terms built by :func:`term` (preferred ones with weights)."""
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"

    def part(req: Sequence[Json], pref: Sequence[tuple[int, Json]]) -> Json:
        result: Json = {}
        if req:
            result[required_key] = list(req)
        if pref:
            result[preferred_key] = [{"weight": w, "runAffinityTerm": t} for w, t in pref]
        return result

    result: Json = {}
    positive = part(required, preferred)
    negative = part(anti_required, anti_preferred)
    if positive:
        result["runAffinity"] = positive
    if negative:
        result["runAntiAffinity"] = negative
    return result


def run_json(
    name: str,
    runtime: str = "python",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, object] | None = None,
    affinity: Mapping[str, object] | None = None,
    phase: str = "",
    assigned_pod: str = "",
    assigned_pod_uid: str = "",
    uid: str | None = None,
    resource_version: str = "1",
    created: str | None = EARLIER_TEXT,
    workspace: str | None = None,
    cancel: bool = False,
    attempt: int = 0,
    conditions: Sequence[Json] | None = None,
    backoff: str | None = None,
    message: str = "",
) -> Json:
    """A ``kruntimes.io/v1alpha1`` Run; by default Pending (empty phase) and unassigned."""
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": uid or _uid("run", namespace, name),
        "resourceVersion": resource_version,
        "labels": dict(labels or {}),
    }
    if created is not None:
        metadata["creationTimestamp"] = created
    spec: Json = {"runtime": runtime}
    if requests is not None:
        spec["resources"] = {"requests": dict(requests)}
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    if workspace is not None:
        spec["workspace"] = {"name": workspace, "kind": WORKSPACE_KIND, "apiGroup": "kruntimes.io"}
    if cancel:
        spec["cancelRequested"] = True
    if backoff is not None:
        spec["retryPolicy"] = {"backoff": backoff}
    status: Json = {}
    if phase:
        status["phase"] = phase
    if assigned_pod:
        status["assignedPod"] = assigned_pod
    if assigned_pod_uid:
        status["assignedPodUID"] = assigned_pod_uid
    if attempt:
        status["attempt"] = attempt
    if conditions is not None:
        status["conditions"] = list(conditions)
    if message:
        status["message"] = message
    return {"apiVersion": API_VERSION, "kind": "Run", "metadata": metadata, "spec": spec, "status": status}


decoded_run: Final = _decoding(run_json, decode_run)
""":func:`run_json`, decoded."""


def active_run(
    name: str,
    pod: str,
    runtime: str = "python",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, object] | None = None,
    phase: str = "Running",
    uid: str | None = None,
    resource_version: str = "1",
    pod_uid: str = "",
) -> Run:
    """A decoded Run that is active on ``pod`` (consumes capacity, is an affinity target);
    ``pod_uid`` is the ``assignedPodUID`` the bind wrote (empty: the name alone, as a writer
    that leaves it out)."""
    return decoded_run(
        name,
        runtime=runtime,
        namespace=namespace,
        labels=labels,
        requests=requests,
        phase=phase,
        assigned_pod=pod,
        assigned_pod_uid=pod_uid,
        uid=uid,
        resource_version=resource_version,
    )


# --- workspaces ------------------------------------------------------------------------------


def workspace_json(
    name: str,
    runtime: str = "python",
    namespace: str = "default",
    mode: str = WORKSPACE_MODE_LOCAL,
    phase: str = "Bound",
    bound_pod: str = "",
    uid: str | None = None,
    resource_version: str = "1",
) -> Json:
    """A ``PersistentWorkspace``; by default Bound in RuntimePodLocal mode."""
    status: Json = {"phase": phase}
    if bound_pod:
        status["boundPod"] = bound_pod
    return {
        "apiVersion": API_VERSION,
        "kind": WORKSPACE_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or _uid("ws", namespace, name),
            "resourceVersion": resource_version,
        },
        "spec": {"runtime": runtime, "mode": mode},
        "status": status,
    }


decoded_workspace: Final = _decoding(workspace_json, decode_workspace)
""":func:`workspace_json`, decoded."""


# --- cluster states ---------------------------------------------------------------------------


def world(*objects: Object) -> ClusterState:
    """The cluster state the informers build from ``objects``: one ``ADDED`` event each, in order."""
    return reduce(lambda state, obj: apply(state, Event("ADDED", obj)), objects, EMPTY_STATE)


# --- objects written to a server ------------------------------------------------------------


def make_pod(
    kube: Kube,
    name: str,
    runtime: str | None = "python",
    *,
    namespace: str = "default",
    capacity: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    probed: datetime | None = None,
) -> JSONObject:
    """A Runtime Pod created on the server, then given the status runtimed leaves it in: Running,
    Ready, heartbeat probed at ``probed`` (default: now). ``ready=False`` leaves it as created,
    without a status; ``runtime=None`` writes no runtime label."""
    all_labels: dict[str, str] = dict(labels or {})
    if runtime is not None:
        all_labels[RUNTIME_LABEL] = runtime
    annotations = {CAPACITY_ANNOTATION_PREFIX + k: v for k, v in (capacity or {}).items()}
    body: JSONObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels, "annotations": annotations},
        "spec": {"containers": [{"name": "runtimed", "image": "runtimed"}]},
    }
    created = kube.create(PODS.path(namespace), body).unwrap()
    if not ready:
        return created
    metadata = created["metadata"]
    assert isinstance(metadata, dict)
    stamp = format_time(datetime.now(timezone.utc))
    probe = stamp if probed is None else format_time(probed)
    status = {
        "metadata": {"resourceVersion": metadata["resourceVersion"]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": stamp},
                {"type": HEARTBEAT_CONDITION, "status": "True", "lastProbeTime": probe, "lastTransitionTime": stamp},
            ],
        },
    }
    return kube.patch_status(PODS.path(namespace, name), json.dumps(status)).unwrap()


def make_run(
    kube: Kube,
    name: str,
    runtime: str = "python",
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    affinity: Mapping[str, object] | None = None,
    workspace: str | None = None,
    cancel: bool = False,
    status: Mapping[str, object] | None = None,
) -> JSONObject:
    """A Task Run created on the server as a user creates it (no uid, version or status); ``status``,
    when given, is then written as the scheduler or runtimed would have (a Run already bound,
    running or finished)."""
    spec: dict[str, object] = {"runtime": runtime, "mode": {"task": {}}}
    if requests is not None:
        spec["resources"] = {"requests": dict(requests)}
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    if workspace is not None:
        spec["workspace"] = {"name": workspace, "kind": WORKSPACE_KIND, "apiGroup": API_VERSION}
    if cancel:
        spec["cancelRequested"] = True
    body: JSONObject = {
        "apiVersion": API_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }
    created = kube.create(RUNS.path(namespace), body).unwrap()
    if status is None:
        return created
    return kube.patch_status(RUNS.path(namespace, name), json.dumps({"status": dict(status)})).unwrap()
