"""Cycle records: one scheduling cycle's inputs and decision, as one JSON line.

A ``CycleRecord`` holds everything ``plan_cycle`` read (the whole ``Snapshot``),
the registry it ran with (score plugin names and weights, filter names, in
registration order) and
the plan it returned. ``encode_record`` writes it as one line of JSON with sorted
keys; ``decode_record`` reads it back, and ``decode_record(encode_record(r)) ==
Success(r)`` for every record the scheduler can build, so ``kruntimes replay``
re-plans from exactly the values the scheduler saw.

A record whose line would not fit the log's per-record budget is written as a
*truncation marker* instead (``encode_truncated``): one short line naming the
Run's key, what the cycle decided and the record's size, without the inputs.
``decode_line`` reads either kind; a marker cannot be replayed, and says so.

Wire conventions: quantities are strings in :func:`format_quantity` form, times
RFC 3339 via :func:`format_time` (microseconds kept), durations via
:func:`format_duration`. The decoders of quantities and durations here are the
exact inverses of those formatters, without the bounds that the cluster-facing
parsers put on hostile input, so that no value the scheduler holds is lost.

This is a purely computational module with no side effects; the effect layer
(``effects``) and ``kruntimes simulate`` append the lines to a file.

One module at about 800 lines: the encoder and the decoder of one line format sit side by side so
each field is written and read in one place, and a change to one is seen beside the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Final, TypeAlias, cast, get_args

from returns.result import Failure, Result, Success

from kruntimes.pure.readers.json import (
    Invalid,
    JsonError,
    expect_int,
    expect_object,
    expect_string,
    field,
    get_bool,
    get_int,
    get_items,
    get_nullable,
    get_number,
    get_optional_string,
    get_string,
    join,
    loads,
    reading,
    wrong,
)
from kruntimes.pure.model.objects import (
    OPERATORS,
    AffinityTerm,
    Condition,
    LabelSelector,
    Labels,
    Operator,
    PodSlot,
    Requirement,
    Reservation,
    Resources,
    Run,
    RunAffinity,
    RunKey,
    RunStatus,
    RuntimePod,
    SchedulerConfig,
    Snapshot,
    Target,
    WeightedTerm,
    Workspace,
    WorkspaceRef,
    frozen_labels,
    frozen_resources,
)
from kruntimes.pure.model.plan import (
    Bind,
    Cancel,
    CycleError,
    CycleErrorReason,
    Delay,
    Fail,
    Plan,
    PodScore,
    Rejections,
    Skip,
    SkipWhy,
    Wait,
)
from kruntimes.pure.model.quantity import Amount, format_quantity, normalize
from kruntimes.pure.model.times import format_duration, format_time, parse_time

FORMAT_VERSION: Final = 1
"""Bumped when the line layout changes incompatibly; ``decode_record`` refuses others."""

MAX_LINE: Final = 64 * 1024 * 1024
"""A line longer than this is refused rather than parsed (a log line is a few KiB)."""

Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"

PluginWeights: TypeAlias = tuple[tuple[str, int], ...]
"""``(plugin name, weight)`` in registration order."""


@dataclass(frozen=True, slots=True)
class CycleRecord:
    """One cycle: its inputs, the registry it ran with, and what it decided."""

    snapshot: Snapshot
    weights: PluginWeights
    """The score plugins and their weights, in registration order (``Registry.weights``)."""
    plan: Result[Plan, CycleError]
    filters: tuple[str, ...] = ()
    """The filter plugins in registration order; empty when the writer did not log them."""


# --- encoding -------------------------------------------------------------------------


def _amounts(resources: Resources) -> dict[str, Json]:
    return {name: format_quantity(value) for name, value in resources.items()}


def _labels(labels: Labels) -> dict[str, Json]:
    return dict(labels)


def _time(value: datetime | None) -> Json:
    return None if value is None else format_time(value)


def _condition(condition: Condition) -> Json:
    return {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "last_transition_time": _time(condition.last_transition_time),
        "last_probe_time": _time(condition.last_probe_time),
    }


def _selector(selector: LabelSelector) -> Json:
    return [
        {"key": r.key, "operator": r.operator, "values": cast(list[Json], sorted(r.values))}
        for r in selector.requirements
    ]


def _term(term: AffinityTerm) -> Json:
    return {"selector": _selector(term.selector), "topology_key": term.topology_key}


def _weighted(term: WeightedTerm) -> Json:
    return {"weight": term.weight, "term": _term(term.term)}


def _affinity(affinity: RunAffinity) -> Json:
    return {
        "required": [_term(t) for t in affinity.required],
        "preferred": [_weighted(t) for t in affinity.preferred],
        "anti_required": [_term(t) for t in affinity.anti_required],
        "anti_preferred": [_weighted(t) for t in affinity.anti_preferred],
    }


def _run_status(status: RunStatus) -> Json:
    return {
        "phase": status.phase,
        "assigned_pod": status.assigned_pod,
        "assigned_pod_uid": status.assigned_pod_uid,
        "message": status.message,
        "attempt": status.attempt,
        "conditions": [_condition(c) for c in status.conditions],
        "completion_time": _time(status.completion_time),
    }


def _run(run: Run) -> Json:
    workspace: Json = None
    if run.workspace is not None:
        ref = run.workspace
        workspace = {"name": ref.name, "kind": ref.kind, "api_group": ref.api_group}
    return {
        "namespace": run.namespace,
        "name": run.name,
        "uid": run.uid,
        "resource_version": run.resource_version,
        "creation_timestamp": _time(run.creation_timestamp),
        "labels": _labels(run.labels),
        "runtime": run.runtime,
        "requests": _amounts(run.requests),
        "requests_error": run.requests_error,
        "affinity": _affinity(run.affinity),
        "affinity_error": run.affinity_error,
        "workspace": workspace,
        "cancel_requested": run.cancel_requested,
        "retry_backoff": None if run.retry_backoff is None else format_duration(run.retry_backoff),
        "spec_error": run.spec_error,
        "status": _run_status(run.status),
    }


def _pod(pod: RuntimePod) -> Json:
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "resource_version": pod.resource_version,
        "runtime": pod.runtime,
        "phase": pod.phase,
        "deleting": pod.deleting,
        "ready": pod.ready,
        "heartbeat_ok": pod.heartbeat_ok,
        "heartbeat_at": _time(pod.heartbeat_at),
        "capacity": _amounts(pod.capacity),
    }


def _workspace(workspace: Workspace) -> Json:
    return {
        "namespace": workspace.namespace,
        "name": workspace.name,
        "uid": workspace.uid,
        "resource_version": workspace.resource_version,
        "runtime": workspace.runtime,
        "mode": workspace.mode,
        "phase": workspace.phase,
        "bound_pod": workspace.bound_pod,
    }


def _reservation(reservation: Reservation) -> Json:
    return {
        "namespace": reservation.namespace,
        "run_uid": reservation.run_uid,
        "run_name": reservation.run_name,
        "resource_version": reservation.resource_version,
        "pod": reservation.pod,
        "pod_uid": reservation.pod_uid,
        "requests": _amounts(reservation.requests),
        "labels": _labels(reservation.labels),
    }


def _target(target: Target) -> Json:
    return {"pod": target.pod, "labels": _labels(target.labels), "run_uid": target.run_uid, "assumed": target.assumed}


def _snapshot(snapshot: Snapshot) -> Json:
    return {
        "key": {"namespace": snapshot.key.namespace, "name": snapshot.key.name},
        "run": None if snapshot.run is None else _run(snapshot.run),
        "pods": [{"pod": _pod(slot.pod), "usage": _amounts(slot.usage)} for slot in snapshot.pods],
        "targets": [_target(t) for t in snapshot.targets],
        "workspace": None if snapshot.workspace is None else _workspace(snapshot.workspace),
        "reservation": None if snapshot.reservation is None else _reservation(snapshot.reservation),
        "now": format_time(snapshot.now),
        "config": {"heartbeat_stale_after": format_duration(snapshot.config.heartbeat_stale_after)},
    }


def _rejections(rejections: Rejections) -> Json:
    return [[plugin, reason, count] for plugin, reason, count in rejections]


def plan_json(plan: Result[Plan, CycleError]) -> dict[str, Json]:
    """The plan as the log writes it: ``{"action": ..., fields...}`` (``Error`` for a ``CycleError``).

    Field names are the plan records' attribute names, so a replay diff names them.
    """
    if isinstance(plan, Failure):
        error = cast(CycleError, plan.failure())
        return {"action": "Error", "reason": error.reason, "message": error.message}
    value = plan.unwrap()
    if isinstance(value, Bind):
        return {
            "action": "Bind",
            "pod": value.pod,
            "pod_uid": value.pod_uid,
            "ranking": list(value.ranking),
            "scores": [
                {
                    "pod": s.pod,
                    "by_plugin": [[name, score] for name, score in s.by_plugin],
                    "total": s.total,
                }
                for s in value.scores
            ],
            "rejections": _rejections(value.rejections),
        }
    if isinstance(value, Wait):
        return {
            "action": "Wait",
            "message": value.message,
            "rejections": _rejections(value.rejections),
            "reason": value.reason,
        }
    if isinstance(value, Fail):
        return {"action": "Fail", "reason": value.reason, "message": value.message}
    if isinstance(value, Cancel):
        return {"action": "Cancel", "reason": value.reason, "message": value.message}
    if isinstance(value, Delay):
        return {"action": "Delay", "seconds": value.seconds}
    return {"action": "Skip", "why": value.why}


def encode_record(record: CycleRecord) -> str:
    """One line of JSON (no newline), keys sorted, ASCII only."""
    document: dict[str, Json] = {
        "v": FORMAT_VERSION,
        "snapshot": _snapshot(record.snapshot),
        "weights": [[name, weight] for name, weight in record.weights],
        "filters": list(record.filters),
        "plan": plan_json(record.plan),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# --- decoding ---------------------------------------------------------------------------


_DECIMAL: Final = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?")
_MAX_AMOUNT_TEXT: Final = 1024


def _amount(text: str, path: str) -> Amount:
    """The exact inverse of :func:`format_quantity` (plain decimals only)."""
    match = _DECIMAL.fullmatch(text) if len(text) <= _MAX_AMOUNT_TEXT else None
    if match is None:
        raise Invalid(path, f"must be a decimal quantity, not {text[:40]!r}")
    sign, whole, frac = match.group(1), match.group(2), match.group(3) or ""
    value: Amount = Fraction(int(whole + frac), 10 ** len(frac)) if frac else int(whole)
    return normalize(-value if sign else value)


def _resources(obj: Mapping[str, object], key: str, path: str) -> Resources:
    here = join(path, key)
    raw = expect_object(field(obj, key, path), here)
    amounts: dict[str, Amount] = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise wrong(join(here, name), "a quantity string", value)
        amounts[name] = _amount(value, join(here, name))
    return frozen_resources(amounts)


def _label_map(obj: Mapping[str, object], key: str, path: str) -> Labels:
    here = join(path, key)
    raw = expect_object(field(obj, key, path), here)
    for name, value in raw.items():
        if not isinstance(value, str):
            raise wrong(join(here, name), "a string", value)
    return frozen_labels(cast(Mapping[str, str], raw))


def _time_value(value: object, path: str) -> datetime:
    if not isinstance(value, str):
        raise wrong(path, "an RFC 3339 time string", value)
    parsed = parse_time(value)
    if parsed is None:
        raise Invalid(path, f"must be an RFC 3339 time, not {value[:40]!r}")
    return parsed


def _opt_time(obj: Mapping[str, object], key: str, path: str) -> datetime | None:
    return get_nullable(obj, key, path, _time_value)


_DURATION: Final = re.compile(r"(-?)([0-9]{1,20})(s|ms|us)")
_DURATION_UNIT_MICROS: Final = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _duration_value(value: object, path: str) -> timedelta:
    """The exact inverse of :func:`format_duration` (``N s|ms|us``), in integer microseconds."""
    if not isinstance(value, str):
        raise wrong(path, "a duration string", value)
    match = _DURATION.fullmatch(value)
    if match is None:
        raise Invalid(path, f"must be a duration such as 15s, 500ms or 250us, not {value[:40]!r}")
    micros = int(match.group(2)) * _DURATION_UNIT_MICROS[match.group(3)]
    try:
        return timedelta(microseconds=-micros if match.group(1) else micros)
    except OverflowError:
        raise Invalid(path, "is out of range") from None


def _condition_from(value: object, path: str) -> Condition:
    obj = expect_object(value, path)
    return Condition(
        type=get_string(obj, "type", path),
        status=get_string(obj, "status", path),
        reason=get_string(obj, "reason", path),
        message=get_string(obj, "message", path),
        last_transition_time=_opt_time(obj, "last_transition_time", path),
        last_probe_time=_opt_time(obj, "last_probe_time", path),
    )


def _requirement_from(value: object, path: str) -> Requirement:
    obj = expect_object(value, path)
    operator = get_string(obj, "operator", path)
    if operator not in OPERATORS:
        raise Invalid(join(path, "operator"), "must be one of In, NotIn, Exists, DoesNotExist")
    values = get_items(obj, "values", path, expect_string)
    return Requirement(get_string(obj, "key", path), cast(Operator, operator), frozenset(values))


def _term_from(value: object, path: str) -> AffinityTerm:
    obj = expect_object(value, path)
    requirements = get_items(obj, "selector", path, _requirement_from)
    return AffinityTerm(LabelSelector(requirements), get_string(obj, "topology_key", path))


def _weighted_from(value: object, path: str) -> WeightedTerm:
    obj = expect_object(value, path)
    return WeightedTerm(get_int(obj, "weight", path), _term_from(field(obj, "term", path), join(path, "term")))


def _affinity_from(value: object, path: str) -> RunAffinity:
    obj = expect_object(value, path)
    return RunAffinity(
        required=get_items(obj, "required", path, _term_from),
        preferred=get_items(obj, "preferred", path, _weighted_from),
        anti_required=get_items(obj, "anti_required", path, _term_from),
        anti_preferred=get_items(obj, "anti_preferred", path, _weighted_from),
    )


def _workspace_ref_from(value: object, path: str) -> WorkspaceRef:
    obj = expect_object(value, path)
    return WorkspaceRef(get_string(obj, "name", path), get_string(obj, "kind", path), get_string(obj, "api_group", path))


def _run_status_from(value: object, path: str) -> RunStatus:
    obj = expect_object(value, path)
    return RunStatus(
        phase=get_string(obj, "phase", path),
        assigned_pod=get_string(obj, "assigned_pod", path),
        assigned_pod_uid=get_string(obj, "assigned_pod_uid", path),
        message=get_string(obj, "message", path),
        attempt=get_int(obj, "attempt", path),
        conditions=get_items(obj, "conditions", path, _condition_from),
        completion_time=_opt_time(obj, "completion_time", path),
    )


def _run_from(value: object, path: str) -> Run:
    obj = expect_object(value, path)
    return Run(
        namespace=get_string(obj, "namespace", path),
        name=get_string(obj, "name", path),
        uid=get_string(obj, "uid", path),
        resource_version=get_string(obj, "resource_version", path),
        creation_timestamp=_opt_time(obj, "creation_timestamp", path),
        labels=_label_map(obj, "labels", path),
        runtime=get_string(obj, "runtime", path),
        requests=_resources(obj, "requests", path),
        requests_error=get_optional_string(obj, "requests_error", path),
        affinity=_affinity_from(field(obj, "affinity", path), join(path, "affinity")),
        affinity_error=get_optional_string(obj, "affinity_error", path),
        workspace=get_nullable(obj, "workspace", path, _workspace_ref_from),
        cancel_requested=get_bool(obj, "cancel_requested", path),
        retry_backoff=get_nullable(obj, "retry_backoff", path, _duration_value),
        spec_error=get_optional_string(obj, "spec_error", path),
        status=_run_status_from(field(obj, "status", path), join(path, "status")),
    )


def _pod_from(value: object, path: str) -> RuntimePod:
    obj = expect_object(value, path)
    return RuntimePod(
        namespace=get_string(obj, "namespace", path),
        name=get_string(obj, "name", path),
        uid=get_string(obj, "uid", path),
        resource_version=get_string(obj, "resource_version", path),
        runtime=get_string(obj, "runtime", path),
        phase=get_string(obj, "phase", path),
        deleting=get_bool(obj, "deleting", path),
        ready=get_bool(obj, "ready", path),
        heartbeat_ok=get_bool(obj, "heartbeat_ok", path),
        heartbeat_at=_opt_time(obj, "heartbeat_at", path),
        capacity=_resources(obj, "capacity", path),
    )


def _slot_from(value: object, path: str) -> PodSlot:
    obj = expect_object(value, path)
    return PodSlot(_pod_from(field(obj, "pod", path), join(path, "pod")), _resources(obj, "usage", path))


def _target_from(value: object, path: str) -> Target:
    obj = expect_object(value, path)
    return Target(
        pod=get_string(obj, "pod", path),
        labels=_label_map(obj, "labels", path),
        run_uid=get_string(obj, "run_uid", path),
        assumed=get_bool(obj, "assumed", path),
    )


def _workspace_from(value: object, path: str) -> Workspace:
    obj = expect_object(value, path)
    return Workspace(
        namespace=get_string(obj, "namespace", path),
        name=get_string(obj, "name", path),
        uid=get_string(obj, "uid", path),
        resource_version=get_string(obj, "resource_version", path),
        runtime=get_string(obj, "runtime", path),
        mode=get_string(obj, "mode", path),
        phase=get_string(obj, "phase", path),
        bound_pod=get_string(obj, "bound_pod", path),
    )


def _reservation_from(value: object, path: str) -> Reservation:
    obj = expect_object(value, path)
    return Reservation(
        namespace=get_string(obj, "namespace", path),
        run_uid=get_string(obj, "run_uid", path),
        run_name=get_string(obj, "run_name", path),
        resource_version=get_string(obj, "resource_version", path),
        pod=get_string(obj, "pod", path),
        pod_uid=get_string(obj, "pod_uid", path),
        requests=_resources(obj, "requests", path),
        labels=_label_map(obj, "labels", path),
    )


def _snapshot_from(value: object, path: str) -> Snapshot:
    obj = expect_object(value, path)
    key = expect_object(field(obj, "key", path), join(path, "key"))
    config = expect_object(field(obj, "config", path), join(path, "config"))
    return Snapshot(
        key=RunKey(get_string(key, "namespace", join(path, "key")), get_string(key, "name", join(path, "key"))),
        run=get_nullable(obj, "run", path, _run_from),
        pods=get_items(obj, "pods", path, _slot_from),
        targets=get_items(obj, "targets", path, _target_from),
        workspace=get_nullable(obj, "workspace", path, _workspace_from),
        reservation=get_nullable(obj, "reservation", path, _reservation_from),
        now=_time_value(field(obj, "now", path), join(path, "now")),
        config=SchedulerConfig(
            heartbeat_stale_after=_duration_value(
                field(config, "heartbeat_stale_after", join(path, "config")),
                join(path, "config.heartbeat_stale_after"),
            )
        ),
    )


def _plugin_from(value: object, path: str) -> tuple[str, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise wrong(path, "a [name, weight] pair", value)
    pair = cast(list[object], value)
    return expect_string(pair[0], f"{path}[0]"), expect_int(pair[1], f"{path}[1]")


def _rejection_from(value: object, path: str) -> tuple[str, str, int]:
    if not isinstance(value, list) or len(value) != 3:
        raise wrong(path, "a [plugin, reason, count] triple", value)
    triple = cast(list[object], value)
    return (
        expect_string(triple[0], f"{path}[0]"),
        expect_string(triple[1], f"{path}[1]"),
        expect_int(triple[2], f"{path}[2]"),
    )


def _score_from(value: object, path: str) -> PodScore:
    obj = expect_object(value, path)
    return PodScore(
        pod=get_string(obj, "pod", path),
        by_plugin=get_items(obj, "by_plugin", path, _plugin_from),
        total=get_int(obj, "total", path),
    )


_SKIP_WHYS: Final[frozenset[str]] = frozenset(get_args(SkipWhy))
_ERROR_REASONS: Final[frozenset[str]] = frozenset(get_args(CycleErrorReason))


def _plan_from(value: object, path: str) -> Result[Plan, CycleError]:
    obj = expect_object(value, path)
    action = get_string(obj, "action", path)
    plan: Plan
    if action == "Error":
        reason = get_string(obj, "reason", path)
        if reason not in _ERROR_REASONS:
            raise Invalid(join(path, "reason"), f"must be one of {', '.join(sorted(_ERROR_REASONS))}")
        return Failure(CycleError(cast(CycleErrorReason, reason), get_string(obj, "message", path)))
    if action == "Bind":
        plan = Bind(
            pod=get_string(obj, "pod", path),
            pod_uid=get_string(obj, "pod_uid", path),
            ranking=get_items(obj, "ranking", path, expect_string),
            scores=get_items(obj, "scores", path, _score_from),
            rejections=get_items(obj, "rejections", path, _rejection_from),
        )
    elif action == "Wait":
        plan = Wait(
            message=get_string(obj, "message", path),
            rejections=get_items(obj, "rejections", path, _rejection_from),
            reason=get_string(obj, "reason", path),
        )  # a log written before the recheck interval was the parking lot's carries "requeue_after": unread
    elif action == "Fail":
        plan = Fail(reason=get_string(obj, "reason", path), message=get_string(obj, "message", path))
    elif action == "Cancel":
        plan = Cancel(reason=get_string(obj, "reason", path), message=get_string(obj, "message", path))
    elif action == "Delay":
        plan = Delay(seconds=get_number(obj, "seconds", path))
    elif action == "Skip":
        why = get_string(obj, "why", path)
        if why not in _SKIP_WHYS:
            raise Invalid(join(path, "why"), f"must be one of {', '.join(sorted(_SKIP_WHYS))}")
        plan = Skip(cast(SkipWhy, why))
    else:
        raise Invalid(join(path, "action"), "must be one of Bind, Wait, Fail, Cancel, Delay, Skip, Error", "UnknownKind")
    return Success(plan)


def decode_record(text: str) -> Result[CycleRecord, JsonError]:
    """Read one line written by :func:`encode_record`; a ``Failure`` names the field, never raises.
    A truncation marker is a ``Failure`` too (it holds no record): read logs with :func:`decode_line`."""
    return decode_line(text).bind(_whole)


def decode_line(text: str) -> Result[CycleRecord | TruncatedRecord, JsonError]:
    """Read one line of a cycle log: a record (:func:`encode_record`) or the marker standing
    for one too large for the log (:func:`encode_truncated`); never raises."""
    if len(text) > MAX_LINE:
        return Failure(JsonError("WrongType", "", f"line longer than {MAX_LINE} characters"))
    try:
        document = loads(text)
    except ValueError as exc:
        return Failure(JsonError("NotAnObject", "", f"not JSON: {exc}"))
    return reading(lambda: _line_from(document))


def _whole(line: CycleRecord | TruncatedRecord) -> Result[CycleRecord, JsonError]:
    if isinstance(line, TruncatedRecord):
        return Failure(JsonError("UnknownKind", TRUNCATED, "a record too large for the log: only its marker was written"))
    return Success(line)


def _line_from(document: object) -> CycleRecord | TruncatedRecord:
    obj = expect_object(document, "")
    if TRUNCATED in obj:
        return _truncated_from(obj)
    return _record_from(obj)


# --- records too large for the log ----------------------------------------------------------

TRUNCATED: Final = "truncated"
"""The key of a truncation marker's one field beside ``v``."""


@dataclass(frozen=True, slots=True)
class TruncatedRecord:
    """The marker written instead of a record too large for the log: which cycle it was and
    how large its line would have been. The inputs are not there, so it cannot be replayed."""

    key: RunKey
    action: str
    """The plan's action (``Bind``, ``Wait``, ... or ``Error``), as :func:`plan_json` names it."""
    size: int
    """Bytes of the record's line as it would have been written (newline included)."""


def _action(plan: Result[Plan, CycleError]) -> str:
    """:func:`plan_json`'s ``action``, without encoding the plan (a large one is why we are here)."""
    if isinstance(plan, Failure):
        return "Error"
    return type(plan.unwrap()).__name__


def encode_truncated(record: CycleRecord, size: int) -> str:
    """The marker line (no newline) for ``record``, whose line is ``size`` bytes: a few hundred
    bytes at most (a Run's key is two names Kubernetes bounds), ASCII, keys sorted."""
    key = record.snapshot.key
    document: dict[str, Json] = {
        "v": FORMAT_VERSION,
        TRUNCATED: {"key": {"namespace": key.namespace, "name": key.name}, "action": _action(record.plan), "bytes": size},
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _truncated_from(obj: Mapping[str, object]) -> TruncatedRecord:
    _version(obj)
    marker = expect_object(field(obj, TRUNCATED, ""), TRUNCATED)
    key = expect_object(field(marker, "key", TRUNCATED), join(TRUNCATED, "key"))
    here = join(TRUNCATED, "key")
    size = get_int(marker, "bytes", TRUNCATED)
    if size < 0:
        raise Invalid(join(TRUNCATED, "bytes"), "must not be negative")
    return TruncatedRecord(
        RunKey(get_string(key, "namespace", here), get_string(key, "name", here)), get_string(marker, "action", TRUNCATED), size
    )


def _version(obj: Mapping[str, object]) -> None:
    version = get_int(obj, "v", "")
    if version != FORMAT_VERSION:
        raise Invalid("v", f"unsupported record format {version} (expected {FORMAT_VERSION})", "UnknownKind")


def _record_from(document: object) -> CycleRecord:
    obj = expect_object(document, "")
    _version(obj)
    return CycleRecord(
        snapshot=_snapshot_from(field(obj, "snapshot", ""), "snapshot"),
        weights=get_items(obj, "weights", "", _plugin_from),
        plan=_plan_from(field(obj, "plan", ""), "plan"),
        filters=get_items(obj, "filters", "", expect_string),
    )


# --- comparing plans ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One field where two plans differ; values are JSON text, ``absent`` when missing."""

    path: str
    logged: str
    replayed: str


ABSENT: Final = "(absent)"


def _show(value: Json) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _comparable(plan: dict[str, Json]) -> dict[str, Json]:
    """Scores keyed by pod then plugin, rejections by ``plugin/reason``: diffs then say
    ``plan.scores[runtime-c].LeastLoaded`` rather than list positions."""
    result = dict(plan)
    scores = plan.get("scores")
    if isinstance(scores, list):
        by_pod: dict[str, Json] = {}
        for score in scores:
            if isinstance(score, dict) and isinstance(score.get("by_plugin"), list):
                row: dict[str, Json] = {}
                for pair in cast(list[list[Json]], score["by_plugin"]):
                    row[str(pair[0])] = pair[1]
                row["total"] = score.get("total")
                by_pod[f"[{score.get('pod')}]"] = row
        result["scores"] = by_pod
    rejections = plan.get("rejections")
    if isinstance(rejections, list):
        result["rejections"] = {
            f"[{r[0]}/{r[1]}]": r[2] for r in cast(list[list[Json]], rejections) if len(r) == 3
        }
    return result


def _flat(items: list[Json]) -> bool:
    """A list of scalars only (a ranking): compared whole, not index by index."""
    return all(not isinstance(item, (list, dict)) for item in items)


def _step(path: str, key: str) -> str:
    return path + key if key.startswith("[") else join(path, key)


def _diff(logged: Json, replayed: Json, path: str, out: list[FieldDiff]) -> None:
    if isinstance(logged, dict) and isinstance(replayed, dict):
        for key in sorted(set(logged) | set(replayed)):
            here = _step(path, key)
            if key not in logged:
                out.append(FieldDiff(here, ABSENT, _show(replayed[key])))
            elif key not in replayed:
                out.append(FieldDiff(here, _show(logged[key]), ABSENT))
            else:
                _diff(logged[key], replayed[key], here, out)
        return
    if isinstance(logged, list) and isinstance(replayed, list) and not (_flat(logged) and _flat(replayed)):
        for index in range(max(len(logged), len(replayed))):
            here = f"{path}[{index}]"
            if index >= len(logged):
                out.append(FieldDiff(here, ABSENT, _show(replayed[index])))
            elif index >= len(replayed):
                out.append(FieldDiff(here, _show(logged[index]), ABSENT))
            else:
                _diff(logged[index], replayed[index], here, out)
        return
    if logged != replayed:
        out.append(FieldDiff(path, _show(logged), _show(replayed)))


def diff_plans(logged: Result[Plan, CycleError], replayed: Result[Plan, CycleError]) -> tuple[FieldDiff, ...]:
    """Field-by-field differences (``plan.pod``, ``plan.scores[0].total``...); empty when equal.

    When the action differs, the action comes first and then every other field of
    each side against ``(absent)``: fields of two plan kinds do not correspond.
    """
    left, right = _comparable(plan_json(logged)), _comparable(plan_json(replayed))
    if left["action"] != right["action"]:
        return (FieldDiff("plan.action", _show(left["action"]), _show(right["action"])),) + tuple(
            FieldDiff(f"plan.{k}", _show(v), ABSENT) for k, v in left.items() if k != "action"
        ) + tuple(FieldDiff(f"plan.{k}", ABSENT, _show(v)) for k, v in right.items() if k != "action")
    out: list[FieldDiff] = []
    _diff(cast(Json, left), cast(Json, right), "plan", out)
    return tuple(out)
