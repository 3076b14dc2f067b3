"""Scenario files for ``kruntimes simulate``: decoded into values, or an error naming the field.

A scenario is a set of Kubernetes objects (as ``kubectl get -o yaml`` prints
them), optional assumed reservations, the clock and the config, and the Run keys
to cycle. :func:`decode_scenario` turns already-parsed documents (the command
reads the YAML/JSON) into a :class:`Scenario` or a :class:`ScenarioError` naming
the document and the field. This is a purely computational module.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, cast

from returns.pipeline import is_successful
from returns.result import Failure, Result, Success

from kruntimes.pure.model.objects import Object
from kruntimes.pure.readers.json import (
    Invalid,
    JsonError,
    at,
    describe,
    expect_int,
    expect_list,
    expect_map,
    expect_string,
    join,
    only_keys,
)
from kruntimes.pure.readers.kube import decode_object, decode_requests
from kruntimes.pure.model.objects import (
    API_VERSION,
    DEFAULT_CONFIG,
    EMPTY_LABELS,
    WORKSPACE_KIND,
    Reservation,
    Run,
    RunKey,
    RuntimePod,
    SchedulerConfig,
    frozen_labels,
    frozen_resources,
)
from kruntimes.pure.model.quantity import Amount, parse_nonnegative_integer
from kruntimes.pure.model.times import MAX_DURATION_LENGTH, format_time, parse_duration, parse_time


DEFAULT_NAMESPACE: Final = "default"
DEFAULT_RESOURCE_VERSION: Final = "1"
SCENARIO_KEYS: Final = ("now", "config", "objects", "reservations", "cycles")
CONFIG_KEYS: Final = ("heartbeatStaleAfter",)
RESERVATION_KEYS: Final = (
    "namespace",
    "runUID",
    "runName",
    "pod",
    "podUID",
    "requests",
    "labels",
    "resourceVersion",
)
_KINDS: Final = {
    ("v1", "Pod"): "Pod",
    (API_VERSION, "Run"): "Run",
    (API_VERSION, WORKSPACE_KIND): WORKSPACE_KIND,
}


# --- scenario ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScenarioError:
    """Why a scenario is unusable: which document, which field, what is wrong."""

    document: str
    """The file name, with ``(document N)`` (1-based) when it holds several YAML documents."""
    path: str
    """The field, e.g. ``objects[3].metadata.name``; "" for the document as a whole."""
    message: str

    def __str__(self) -> str:
        where = f"{self.document}: {self.path}" if self.path else self.document
        return f"{where}: {self.message}"

    @staticmethod
    def at(document: str, error: JsonError) -> ScenarioError:
        """``error`` (a field of ``document``) as a scenario error."""
        return ScenarioError(document, error.path, error.message)


@dataclass(frozen=True, slots=True)
class Scenario:
    now: datetime
    """The clock of every cycle."""
    config: SchedulerConfig
    objects: tuple[Object, ...]
    reservations: tuple[Reservation, ...]
    cycles: tuple[RunKey, ...] | None
    """``None``: every Pending Run once, oldest first (SPEC §12)."""


def _time(value: object, path: str) -> datetime:
    text = expect_string(value, path)
    parsed = parse_time(text)
    if parsed is None:
        raise Invalid(path, f"must be an RFC 3339 time such as 2026-01-01T00:00:00Z, not {text[:64]!r}")
    return parsed


def _string_map(value: object, path: str) -> dict[str, str]:
    return {key: expect_string(item, join(path, key)) for key, item in expect_map(value, path).items()}


def _check_conditions(status: Mapping[str, object], path: str) -> None:
    if status.get("conditions") is None:
        return
    here = join(path, "conditions")
    for index, item in enumerate(expect_list(status["conditions"], here)):
        entry = expect_map(item, at(here, index))
        for field in ("lastProbeTime", "lastTransitionTime"):
            if entry.get(field) is not None:
                _time(entry[field], join(at(here, index), field))


def _uid(kind: str, namespace: str, name: str) -> str:
    """A deterministic UUID-shaped uid for a hand-written object without one."""
    digest = hashlib.sha256(f"kruntimes-simulate/{kind}/{namespace}/{name}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _object(value: object, path: str, now: datetime) -> Object:
    """Check what the decoder would silently drop, fill hand-written defaults, decode."""
    obj = expect_map(value, path)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    known = _KINDS.get((api_version, kind)) if isinstance(api_version, str) and isinstance(kind, str) else None
    if known is None:
        if kind in ("Pod", "Run", WORKSPACE_KIND):
            expected = "v1" if kind == "Pod" else API_VERSION
            raise Invalid(join(path, "apiVersion"), f"must be {expected} for kind {kind}, not {api_version!r}")
        raise Invalid(
            join(path, "kind"),
            f"unknown kind {kind!r} (expected v1 Pod, {API_VERSION} Run or {API_VERSION} {WORKSPACE_KIND})",
        )
    meta_path = join(path, "metadata")
    if "metadata" not in obj:
        raise Invalid(meta_path, "is required")
    meta = dict(expect_map(obj["metadata"], meta_path))
    name = expect_string(meta.get("name"), join(meta_path, "name"), nonempty=True) if "name" in meta else ""
    if not name:
        raise Invalid(join(meta_path, "name"), "is required")
    namespace = meta.get("namespace")
    if namespace is None:
        namespace = meta["namespace"] = DEFAULT_NAMESPACE
    namespace = expect_string(namespace, join(meta_path, "namespace"), nonempty=True)
    for field in ("uid", "resourceVersion"):
        if meta.get(field) is not None:
            expect_string(meta[field], join(meta_path, field), nonempty=True)
    if meta.get("uid") is None:
        meta["uid"] = _uid(known, namespace, name)
    if meta.get("resourceVersion") is None:
        meta["resourceVersion"] = DEFAULT_RESOURCE_VERSION
    for field in ("labels", "annotations"):
        if meta.get(field) is not None:
            _string_map(meta[field], join(meta_path, field))
    for field in ("creationTimestamp", "deletionTimestamp"):
        if meta.get(field) is not None:
            _time(meta[field], join(meta_path, field))
    if known == "Run" and meta.get("creationTimestamp") is None:
        meta["creationTimestamp"] = format_time(now)
    if obj.get("status") is not None:
        status_path = join(path, "status")
        status_map = expect_map(obj["status"], status_path)
        _check_conditions(status_map, status_path)
        if known == "Run":
            if status_map.get("completionTime") is not None:
                _time(status_map["completionTime"], join(status_path, "completionTime"))
            if status_map.get("attempt") is not None:
                expect_int(status_map["attempt"], join(status_path, "attempt"))
    if known == "Run":
        _check_run_spec(obj, path)
    filled = dict(obj)
    filled["metadata"] = meta
    decoded = decode_object(filled)
    if not is_successful(decoded):
        problem = decoded.failure().within(path)
        raise Invalid(problem.path, problem.message, problem.reason)
    return decoded.unwrap()


def _check_run_spec(obj: Mapping[str, object], path: str) -> None:
    """Only what a Run's decoder would drop silently; other spec problems fail the Run in a cycle
    (a backoff longer than the bound among them: the scheduler fails such a Run, so does simulate)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return
    retry = cast(Mapping[str, object], spec).get("retryPolicy")
    if isinstance(retry, Mapping):
        backoff = cast(Mapping[str, object], retry).get("backoff")
        if backoff is not None:
            here = join(path, "spec.retryPolicy.backoff")
            text = expect_string(backoff, here)
            if len(text) <= MAX_DURATION_LENGTH and parse_duration(text) is None:
                raise Invalid(here, f"must be a Go duration such as 500ms, 15s or 1m, not {text!r}")


def _config(value: object, path: str) -> SchedulerConfig:
    if value is None:
        return DEFAULT_CONFIG
    obj = expect_map(value, path)
    only_keys(obj, CONFIG_KEYS, path)
    config = DEFAULT_CONFIG
    if obj.get("heartbeatStaleAfter") is not None:
        here = join(path, "heartbeatStaleAfter")
        text = expect_string(obj["heartbeatStaleAfter"], here)
        stale = parse_duration(text)
        if stale is None:
            raise Invalid(here, f"must be a Go duration such as 500ms, 15s or 1m, not {text[:64]!r}")
        config = SchedulerConfig(heartbeat_stale_after=stale)
    return config


def _cycle_key(value: object, path: str) -> RunKey:
    text = expect_string(value, path, nonempty=True)
    key = RunKey.parse(text if "/" in text else f"{DEFAULT_NAMESPACE}/{text}")
    if key is None:
        raise Invalid(path, f"must be a Run key namespace/name (or a name in {DEFAULT_NAMESPACE}), not {text!r}")
    return key


def _reservation(value: object, path: str, objects: Sequence[Object]) -> Reservation:
    obj = expect_map(value, path)
    only_keys(obj, RESERVATION_KEYS, path)

    def text(key: str, *, required: bool = False) -> str | None:
        if obj.get(key) is None:
            if required:
                raise Invalid(join(path, key), "is required")
            return None
        return expect_string(obj[key], join(path, key), nonempty=True)

    namespace = text("namespace") or DEFAULT_NAMESPACE
    run_uid, run_name, pod = text("runUID"), text("runName"), text("pod", required=True)
    assert pod is not None
    runs = [o for o in objects if isinstance(o, Run) and o.namespace == namespace]
    run: Run | None
    if run_uid is not None:
        run = next((r for r in runs if r.uid == run_uid), None)
        if run_name is None and run is None:
            raise Invalid(join(path, "runName"), f"is required: no Run in {namespace} has uid {run_uid!r}")
    elif run_name is not None:
        run = next((r for r in runs if r.name == run_name), None)
        if run is None:
            raise Invalid(join(path, "runName"), f"no Run named {run_name!r} in namespace {namespace} (give runUID)")
    else:
        raise Invalid(join(path, "runUID"), "runUID or runName is required")
    pod_obj = next((o for o in objects if isinstance(o, RuntimePod) and (o.namespace, o.name) == (namespace, pod)), None)

    if obj.get("requests") is not None:
        here = join(path, "requests")
        amounts: dict[str, Amount] = {}
        for name, raw in expect_map(obj["requests"], here).items():
            quantity = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
            amount = parse_nonnegative_integer(quantity) if isinstance(quantity, str) else None
            if amount is None:
                shown = repr(raw[:64]) if isinstance(raw, str) else describe(raw)
                raise Invalid(join(here, name), f"must be a non-negative integer quantity, not {shown}")
            if amount:
                amounts[name] = amount
        requests = frozen_resources(amounts)
    else:
        requests = run.requests if run is not None else decode_requests(None)[0]
    labels = (
        frozen_labels(_string_map(obj["labels"], join(path, "labels")))
        if obj.get("labels") is not None
        else (run.labels if run is not None else EMPTY_LABELS)
    )
    return Reservation(
        namespace=namespace,
        run_uid=run_uid if run_uid is not None else (run.uid if run is not None else ""),
        run_name=run_name if run_name is not None else (run.name if run is not None else ""),
        resource_version=text("resourceVersion") or (run.resource_version if run is not None else ""),
        pod=pod,
        pod_uid=text("podUID") or (pod_obj.uid if pod_obj is not None else ""),
        requests=requests,
        labels=labels,
    )


def _object_list(values: Sequence[object], path: str, now: datetime) -> list[tuple[str, Object]]:
    """Objects with their paths; a ``v1 List`` item is flattened (``items[i]``)."""
    found: list[tuple[str, Object]] = []
    for index, value in enumerate(values):
        here = at(path, index)
        if isinstance(value, Mapping) and value.get("kind") == "List":
            items = expect_list(cast(Mapping[str, object], value).get("items", []), join(here, "items"))
            found.extend(_object_list(items, join(here, "items"), now))
        else:
            found.append((here, _object(value, here, now)))
    return found


def _check_duplicates(found: Sequence[tuple[str, Object]]) -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for path, obj in found:
        key = (type(obj).__name__, obj.namespace, obj.name)
        if key in seen:
            raise Invalid(path, f"duplicate {key[0]} {obj.namespace}/{obj.name} (first at {seen[key]})")
        seen[key] = path


def decode_scenario(documents: Sequence[object], source: str, default_now: datetime) -> Result[Scenario, ScenarioError]:
    """A scenario from parsed YAML/JSON documents (``None`` documents, i.e. empty ones, are skipped).

    Accepted shapes: one scenario map (``now``, ``config``, ``objects``,
    ``reservations``, ``cycles``); one Kubernetes object, ``List`` or bare list
    of objects; or several documents, each one of those. ``default_now`` is the clock when the
    scenario has no ``now``. Objects may omit ``metadata.namespace``
    (``default``), ``uid`` (derived from kind, namespace and name),
    ``resourceVersion`` (``"1"``) and, for Runs, ``creationTimestamp`` (the
    scenario's ``now``).
    """
    present = [(index, doc) for index, doc in enumerate(documents) if doc is not None]
    several = len(present) > 1

    def where(index: int) -> str:
        return f"{source} (document {index + 1})" if several else source

    if not present:
        return Failure(ScenarioError(source, "", "is empty: expected a scenario map or Kubernetes objects"))
    first_index, first = present[0]
    if not several and isinstance(first, Mapping) and "kind" not in first:
        try:
            return Success(_scenario_map(expect_map(first, ""), default_now))
        except Invalid as problem:
            return Failure(ScenarioError.at(where(first_index), problem.error))
    found: list[tuple[str, str, Object]] = []
    for index, doc in present:
        try:
            if isinstance(doc, Mapping) and "kind" not in doc:
                raise Invalid("", "a scenario map (now/config/objects/...) must be the only document in the file")
            if isinstance(doc, Mapping) and doc.get("kind") == "List":
                items = expect_list(cast(Mapping[str, object], doc).get("items", []), "items")
                found.extend((where(index), p, o) for p, o in _object_list(items, "items", default_now))
            elif isinstance(doc, Sequence) and not isinstance(doc, (str, bytes)):
                # A bare list of objects (e.g. a JSON array): as the items of a List.
                found.extend((where(index), p, o) for p, o in _object_list(doc, "", default_now))
            else:
                found.append((where(index), "", _object(doc, "", default_now)))
        except Invalid as problem:
            return Failure(ScenarioError.at(where(index), problem.error))
    seen: dict[tuple[str, str, str], str] = {}
    for document, path, obj in found:
        key = (type(obj).__name__, obj.namespace, obj.name)
        if key in seen:
            message = f"duplicate {key[0]} {obj.namespace}/{obj.name} (first in {seen[key]})"
            return Failure(ScenarioError(document, path, message))
        seen[key] = f"{document} {path}".strip()
    return Success(Scenario(default_now, DEFAULT_CONFIG, tuple(o for _, _, o in found), (), None))


def _scenario_map(doc: Mapping[str, object], default_now: datetime) -> Scenario:
    only_keys(doc, SCENARIO_KEYS, "")
    now = _time(doc["now"], "now") if doc.get("now") is not None else default_now
    config = _config(doc.get("config"), "config")
    raw_objects = expect_list(doc["objects"], "objects") if doc.get("objects") is not None else ()
    found = _object_list(raw_objects, "objects", now)
    _check_duplicates(found)
    objects = tuple(o for _, o in found)
    raw_reservations = expect_list(doc["reservations"], "reservations") if doc.get("reservations") is not None else ()
    reservations = tuple(
        _reservation(value, f"reservations[{index}]", objects) for index, value in enumerate(raw_reservations)
    )
    seen: dict[tuple[str, str], int] = {}
    for index, reservation in enumerate(reservations):
        key = (reservation.namespace, reservation.run_uid)
        if key in seen:
            raise Invalid(f"reservations[{index}]", f"the Run already has a reservation (reservations[{seen[key]}])")
        seen[key] = index
    cycles: tuple[RunKey, ...] | None = None
    if doc.get("cycles") is not None:
        cycles = tuple(_cycle_key(value, f"cycles[{index}]") for index, value in enumerate(expect_list(doc["cycles"], "cycles")))
    return Scenario(now, config, objects, reservations, cycles)
