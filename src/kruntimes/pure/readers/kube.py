"""Decoding Kubernetes JSON into the scheduler's immutable records.

Every function here is total: any JSON value in, a ``Result`` out, never an
exception. Structural problems that make an object unusable (not an object, no
name) are ``Failure(DecodeError)``; problems in a Run's spec are kept inside
the decoded ``Run`` so the cycle can fail that Run with an actionable reason.
A malformed pod annotation or condition is ignored, as SPEC §1 requires.
This is a purely computational module with no side effects.

One module at about 800 lines: the decoders of Runs, pods and workspaces share the field
readers, the quantity and label rules and the one ``DecodeError``, so a rule is written once for
every kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime
from fractions import Fraction
from types import MappingProxyType
from typing import Final, Generic, NoReturn, TypeAlias, TypeVar, cast

from returns.result import Failure, Result, Success

from kruntimes.pure.model.objects import (
    NO_AFFINITY,
    API_VERSION,
    CAPACITY_ANNOTATION_PREFIX,
    DEFAULT_CAPACITY,
    EMPTY_LABELS,
    GROUP,
    HEARTBEAT_CONDITION,
    OPERATORS,
    RUNS_RESOURCE,
    RUNTIME_LABEL,
    TOPOLOGY_KEY,
    WORKSPACE_KIND,
    AffinityTerm,
    Condition,
    LabelSelector,
    Labels,
    Operator,
    Requirement,
    Resources,
    Run,
    RunAffinity,
    RunStatus,
    RuntimePod,
    WeightedTerm,
    Workspace,
    WorkspaceRef,
    frozen_labels,
    frozen_resources,
)
from kruntimes.pure.model.quantity import BOUNDS, MAX_LENGTH, Amount, Refusal, parse_quantity, read_quantity
from kruntimes.pure.model.times import MAX_DURATION_LENGTH, parse_duration, parse_time
from kruntimes.pure.readers.json import (
    Invalid,
    JsonError,
    JsonReason,
    OverlongNumber,
    as_list,
    as_map,
    at,
    join,
    map_of,
    text_of,
)

DecodeReason: TypeAlias = JsonReason

ONE_RUN: Final[Resources] = frozen_resources({RUNS_RESOURCE: 1})
"""``{runs: 1}``, what nearly every Run requests: shared, since a tracked Run's memory is the budget."""

MAX_TERMS: Final = 32
"""At most this many terms per affinity list (the CRD's bound; keeps hostile input cheap)."""

MAX_NAME: Final = 253
"""The longest name Kubernetes allows (a DNS subdomain); a longer runtime or workspace name
cannot name anything, and messages echo these names whole."""


DecodeError: TypeAlias = JsonError
"""Why an object could not be decoded at all: ``reason``, the field's ``path`` and a ``message``."""


Decoded: TypeAlias = RuntimePod | Run | Workspace

# --- sharing equal values across Runs ----------------------------------------------

_T = TypeVar("_T")
_H = TypeVar("_H", bound=Hashable)


class _Shared(Generic[_H, _T]):
    """A bounded table handing out one shared copy of equal immutable values.

    A tracked Run's memory is the budget (docs/performance.md): label maps,
    settled statuses and creation times repeat across many Runs, and each decode
    would otherwise keep its own equal copy. Sharing is invisible to callers (the
    values are immutable and compare equal either way), so this memo does not
    make decoding impure; the table is emptied when it reaches ``limit`` entries,
    which bounds it whatever the input.
    """

    __slots__ = ("_table", "_limit")

    def __init__(self, limit: int) -> None:
        self._table: dict[_H, _T] = {}
        self._limit = limit

    def get(self, key: _H) -> _T | None:
        return self._table.get(key)

    def put(self, key: _H, value: _T) -> _T:
        table = self._table
        if len(table) >= self._limit:
            table.clear()
        return table.setdefault(key, value)

    def shared(self, key: _H, build: Callable[[], _T]) -> _T:
        """The shared value for ``key``, built (and kept) the first time it is asked for."""
        found = self._table.get(key)
        return found if found is not None else self.put(key, build())


SHARED_LIMIT: Final = 1 << 16
"""Entries per sharing table (a few MiB at most)."""
_shared_labels: Final[_Shared[tuple[tuple[str, str], ...], Labels]] = _Shared(SHARED_LIMIT)
_shared_statuses: Final[_Shared[RunStatus, RunStatus]] = _Shared(SHARED_LIMIT)
_shared_times: Final[_Shared[str, datetime | None]] = _Shared(SHARED_LIMIT)
_shared_requests: Final[_Shared[tuple[tuple[str, object], ...], tuple[Resources, str | None, str | None]]] = _Shared(4096)

# --- lenient readers of Kubernetes fields ----------------------------------------------


def _string_map(value: object) -> Labels:
    """Keep only the string → string entries of a label/annotation map."""
    entries = as_map(value)
    if not entries:
        return EMPTY_LABELS
    return frozen_labels({k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, str)})


def _time_field(obj: Mapping[str, object], key: str) -> datetime | None:
    text = obj.get(key)
    return parse_time(text) if isinstance(text, str) else None


def _shared_time_field(obj: Mapping[str, object], key: str) -> datetime | None:
    """:func:`_time_field`, one shared ``datetime`` per distinct text (creation times
    come in bursts: many Runs share a second)."""
    text = obj.get(key)
    if not isinstance(text, str):
        return None
    found = _shared_times.get(text)
    if found is not None:
        return found
    parsed = parse_time(text)
    return parsed if parsed is None else _shared_times.put(text, parsed)


def _shared_labels_of(value: object) -> Labels:
    """:func:`_string_map` for a Run's labels: one shared read-only map per distinct
    label set (Runs of one app or team carry the same labels)."""
    entries = as_map(value)
    if not entries:
        return EMPTY_LABELS
    items = tuple(sorted((k, v) for k, v in entries.items() if isinstance(k, str) and isinstance(v, str)))
    if not items:
        return EMPTY_LABELS
    return _shared_labels.shared(items, lambda: MappingProxyType(dict(items)))


def _conditions(value: object) -> tuple[Condition, ...]:
    entries = as_list(value)
    if entries is None:
        return ()
    result: list[Condition] = []
    for item in entries:
        entry = as_map(item)
        if entry is None:
            continue
        type_ = entry.get("type")
        if not isinstance(type_, str):
            continue
        result.append(
            Condition(
                type=type_,
                status=text_of(entry, "status"),
                reason=text_of(entry, "reason"),
                message=text_of(entry, "message"),
                last_transition_time=_time_field(entry, "lastTransitionTime"),
                last_probe_time=_time_field(entry, "lastProbeTime"),
            )
        )
    return tuple(result)


_MAX_QUANTITY_BITS: Final = 4 * MAX_LENGTH
"""An integer of more bits has more digits than a quantity's text may have: refused unconverted."""


def _request_amount(value: object) -> Amount | Refusal:
    """A request's quantity: a string, or a JSON number from a hand-written file."""
    if isinstance(value, str):
        return read_quantity(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return Refusal.TOO_LONG if value.bit_length() > _MAX_QUANTITY_BITS else read_quantity(str(value))
    if isinstance(value, OverlongNumber):
        return Refusal.TOO_LONG
    if isinstance(value, float) and value == value and abs(value) < 1e18:
        return read_quantity(repr(value))
    return Refusal.MALFORMED


def _metadata(obj: Mapping[str, object]) -> Result[tuple[Mapping[str, object], str, str, str], DecodeError]:
    meta = as_map(obj.get("metadata"))
    if meta is None:
        return Failure(DecodeError("MissingField", "metadata", "metadata must be an object"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return Failure(DecodeError("MissingField", "metadata.name", "metadata.name must be a non-empty string"))
    namespace = meta.get("namespace", "default")
    if not isinstance(namespace, str) or not namespace:
        return Failure(DecodeError("WrongType", "metadata.namespace", "metadata.namespace must be a non-empty string"))
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        return Failure(DecodeError("MissingField", "metadata.uid", "metadata.uid must be a non-empty string"))
    return Success((meta, namespace, name, uid))


# --- pods ------------------------------------------------------------------------------


def capacity_from_annotations(annotations: Labels) -> Resources:
    """Default ``{runs: 2}``, then every positive ``kruntimes.io/capacity.<resource>`` (SPEC §1)."""
    capacity: dict[str, Amount] = dict(DEFAULT_CAPACITY)
    for key, text in annotations.items():
        if not key.startswith(CAPACITY_ANNOTATION_PREFIX):
            continue
        resource = key[len(CAPACITY_ANNOTATION_PREFIX) :]
        if not resource or "/" in resource:
            # A valid annotation key has one "/": a domain-prefixed resource
            # (example.com/gpu) cannot be advertised, as upstream (SPEC §1).
            continue
        value = parse_quantity(text)
        if value is not None and value > 0:
            capacity[resource] = value
    return frozen_resources(capacity)


_EMPTY_CAPACITY: Final = capacity_from_annotations({})


def decode_pod(value: object) -> Result[RuntimePod, DecodeError]:
    """A core/v1 Pod as a Runtime Pod; malformed annotations and conditions are ignored."""
    obj = as_map(value)
    if obj is None:
        return Failure(DecodeError("NotAnObject", "", "a Pod must be a JSON object"))
    return _metadata(obj).map(lambda m: _pod_from(obj, *m))


def _pod_from(obj: Mapping[str, object], meta: Mapping[str, object], namespace: str, name: str, uid: str) -> RuntimePod:
    # Read only what a Runtime Pod is made of: a heartbeat event (1,000 a second at 5,000
    # pods) would otherwise pay for every label, annotation and condition of the pod.
    status = map_of(obj, "status")
    ready, heartbeat = _pod_conditions(status.get("conditions"))
    labels = as_map(meta.get("labels"))
    runtime = labels.get(RUNTIME_LABEL, "") if labels else ""
    return RuntimePod(
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=text_of(meta, "resourceVersion"),
        runtime=runtime if isinstance(runtime, str) else "",
        phase=text_of(status, "phase"),
        deleting=meta.get("deletionTimestamp") is not None,
        ready=ready is not None and ready.get("status") == "True",
        heartbeat_ok=heartbeat is not None and heartbeat.get("status") == "True",
        heartbeat_at=_shared_time_field(heartbeat, "lastProbeTime") if heartbeat is not None else None,
        capacity=_pod_capacity(meta.get("annotations")),
    )


def _pod_conditions(value: object) -> tuple[Mapping[str, object] | None, Mapping[str, object] | None]:
    """The first ``Ready`` and the first heartbeat condition, as Kubernetes readers take them."""
    entries = as_list(value)
    ready: Mapping[str, object] | None = None
    heartbeat: Mapping[str, object] | None = None
    for item in entries or ():
        entry = as_map(item)
        if entry is None:
            continue
        type_ = entry.get("type")
        if type_ == "Ready" and ready is None:
            ready = entry
        elif type_ == HEARTBEAT_CONDITION and heartbeat is None:
            heartbeat = entry
    return ready, heartbeat


_shared_capacities: Final[_Shared[tuple[tuple[str, str], ...], Resources]] = _Shared(SHARED_LIMIT)


def _pod_capacity(value: object) -> Resources:
    """:func:`capacity_from_annotations` of the pod's string annotations, one shared value per
    distinct set of capacity annotations (the pods of a runtime advertise the same)."""
    entries = as_map(value)
    if not entries:
        return _EMPTY_CAPACITY
    items = tuple(
        (key, text) for key, text in entries.items()
        if isinstance(key, str) and key.startswith(CAPACITY_ANNOTATION_PREFIX) and isinstance(text, str)
    )
    if not items:
        return _EMPTY_CAPACITY
    return _shared_capacities.shared(items, lambda: capacity_from_annotations(dict(items)))


# --- workspaces --------------------------------------------------------------------------


def decode_workspace(value: object) -> Result[Workspace, DecodeError]:
    obj = as_map(value)
    if obj is None:
        return Failure(DecodeError("NotAnObject", "", "a PersistentWorkspace must be a JSON object"))

    def build(m: tuple[Mapping[str, object], str, str, str]) -> Workspace:
        meta, namespace, name, uid = m
        spec = map_of(obj, "spec")
        status = map_of(obj, "status")
        return Workspace(
            namespace=namespace,
            name=name,
            uid=uid,
            resource_version=text_of(meta, "resourceVersion"),
            runtime=text_of(spec, "runtime"),
            mode=text_of(spec, "mode"),
            phase=text_of(status, "phase"),
            bound_pod=text_of(status, "boundPod"),
        )

    return _metadata(obj).map(build)


# --- runs ------------------------------------------------------------------------------------


def decode_requests(value: object) -> tuple[Resources, str | None]:
    """SPEC §2: the usable requests, and the validation message when any entry is bad.

    The usable part (valid entries, zeros dropped, ``runs`` absent or zero → 1)
    is what an *active* Run counts even when it is invalid. An entry beyond the
    quantity bounds is bad too (:func:`decode_requests_bounded` tells it apart).
    """
    requests, error, beyond = decode_requests_bounded(value)
    return requests, error or beyond


_Requests: TypeAlias = tuple[Resources, str | None, str | None]


def decode_requests_bounded(value: object) -> _Requests:
    """:func:`decode_requests`, with an entry beyond the quantity bounds reported apart.

    Returns the usable requests, the SPEC §2 message for an entry that is not a
    non-negative integer quantity (``InvalidResources``), and the message for an
    entry beyond the bounds of ``quantity.BOUNDS`` (SPEC §1 revision 3: ``InvalidSpec``).
    """
    if value is None:
        return ONE_RUN, None, None
    entries = as_map(value)
    if entries is None:
        return (
            ONE_RUN,
            "spec.resources.requests must be a map of resource name to quantity",
            None,
        )
    # Runs repeat a handful of request maps: decode each text form once (only all-string
    # maps are memoized, so 1, 1.0 and True can never share an entry).
    items = tuple(entries.items())
    if all(type(name) is str and type(raw) is str for name, raw in items):
        found = _shared_requests.get(items)
        if found is not None:
            return found
        return _shared_requests.put(items, _requests_of(entries))
    return _requests_of(entries)


MAX_RESOURCE_NAME: Final = MAX_NAME + 1 + 63
"""The longest valid resource name: a qualified name, ``prefix/name``."""


def _bad_request_message(name: str) -> str:
    if len(name) > MAX_RESOURCE_NAME:
        # Longer than any resource name: its length is told rather than its text.
        return f"a resource request (named with {len(name)} characters) must be a non-negative integer"
    return f'resource request "{name}" must be a non-negative integer'


def _beyond_bounds_message(name: str, refusal: Refusal) -> str:
    entry = f"(an entry named with {len(name)} characters)" if len(name) > MAX_RESOURCE_NAME else f'"{name}"'
    return f"spec.resources.requests {entry} {refusal.value} ({BOUNDS})"


def _requests_of(entries: Mapping[str, object]) -> _Requests:
    valid: dict[str, Amount] = {}
    bad: list[str] = []
    beyond: dict[str, Refusal] = {}
    # YAML may carry non-string keys even where JSON cannot.
    for name, raw in cast(Mapping[object, object], entries).items():
        if not isinstance(name, str):
            continue
        amount = _request_amount(raw)
        if isinstance(amount, Refusal):
            if amount.beyond_bounds:
                beyond[name] = amount
            else:
                bad.append(name)
        elif isinstance(amount, Fraction) or amount < 0:
            bad.append(name)
        elif amount > 0:
            valid[name] = amount
    if not valid.get(RUNS_RESOURCE):
        valid[RUNS_RESOURCE] = 1
    error = _bad_request_message(min(bad)) if bad else None
    beyond_error = None
    if beyond:
        first = min(beyond)
        beyond_error = _beyond_bounds_message(first, beyond[first])
    if len(valid) == 1 and valid[RUNS_RESOURCE] == 1:
        return ONE_RUN, error, beyond_error  # the common request: one shared map instead of one per Run
    return frozen_resources(valid), error, beyond_error


# --- affinity (SPEC §3.5) -------------------------------------------------------------------

_LABEL_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
MAX_LABEL_NAME: Final = 63
MAX_LABEL_PREFIX: Final = 253
_MAX_KEY_SHOWN: Final = MAX_LABEL_PREFIX + 1 + MAX_LABEL_NAME
_LABEL_KEY_RULE: Final = (
    "an optional DNS subdomain prefix and /, then at most 63 characters: "
    "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)
_LABEL_VALUE_RULE: Final = (
    "empty or at most 63 characters: alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)


_valid_keys: Final[set[str]] = set()
_valid_values: Final[set[str]] = set()
"""Label keys and values already found valid (Runs repeat a few): a set lookup instead
of a regular expression per Run; each emptied at ``SHARED_LIMIT`` entries, like the
sharing tables. Two sets, since ``example.com/app`` is a valid key but not a valid value."""


def _remember(valid: set[str], text: str) -> None:
    if len(valid) >= SHARED_LIMIT:
        valid.clear()
    valid.add(text)


def valid_label_key(key: str) -> bool:
    """A Kubernetes label key: ``[prefix/]name`` (prefix a lowercase DNS subdomain ≤ 253, name ≤ 63)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > MAX_LABEL_PREFIX or _DNS_SUBDOMAIN.fullmatch(prefix) is None):
        return False
    if len(name) > MAX_LABEL_NAME or _LABEL_NAME.fullmatch(name) is None:
        return False
    _remember(_valid_keys, key)
    return True


def valid_label_value(value: str) -> bool:
    """A Kubernetes label value: empty, or a name of at most 63 characters."""
    if value and (len(value) > MAX_LABEL_NAME or _LABEL_NAME.fullmatch(value) is None):
        return False
    _remember(_valid_values, value)
    return True


def _shown_key(key: str) -> str:
    """The offending key as a message shows it: quoted with escapes; one longer than any
    valid key by its length only, so a hostile key cannot make the message large."""
    if len(key) > _MAX_KEY_SHOWN:
        return f"of {len(key)} characters"
    return json.dumps(key, ensure_ascii=False)


def _bad_key(key: str, path: str, lead: str) -> NoReturn:
    raise Invalid(path, f"{lead}{_shown_key(key)} is not a valid label key ({_LABEL_KEY_RULE})")


def _bad_value(key: str, path: str, lead: str) -> NoReturn:
    raise Invalid(path, f"{lead}{_shown_key(key)} is not a valid label value ({_LABEL_VALUE_RULE})")


def _selector(value: object, path: str) -> LabelSelector:
    # Paths are built only on failure: this runs for every Run with affinity.
    if value is None:
        raise Invalid(join(path, "labelSelector"), "is required")
    selector = as_map(value)
    if selector is None:
        raise Invalid(join(path, "labelSelector"), "must be an object")
    requirements: list[Requirement] = []
    match_labels = selector.get("matchLabels")
    if match_labels is not None:
        labels = as_map(match_labels)
        if labels is None:
            raise Invalid(join(path, "labelSelector.matchLabels"), "must be a map of strings")
        for key, label_value in labels.items():
            if not isinstance(key, str) or not key or not isinstance(label_value, str):
                raise Invalid(join(path, "labelSelector.matchLabels"), "must be a map of strings")
            if key not in _valid_keys and not valid_label_key(key):
                _bad_key(key, join(path, "labelSelector.matchLabels"), "key ")
            if label_value not in _valid_values and not valid_label_value(label_value):
                _bad_value(key, join(path, "labelSelector.matchLabels"), "value of key ")
            requirements.append(Requirement(key, "In", frozenset({label_value})))
    expressions = selector.get("matchExpressions")
    if expressions is not None:
        listed = as_list(expressions)
        if listed is None:
            raise Invalid(join(path, "labelSelector.matchExpressions"), "must be a list")
        for index, raw in enumerate(listed):
            requirements.append(_requirement(raw, path, index))
    if not requirements:
        raise Invalid(join(path, "labelSelector"), "must not be empty")
    return LabelSelector(tuple(requirements))


def _expression_path(term_path: str, index: int, field: str = "") -> str:
    expression_path = at(join(term_path, "labelSelector.matchExpressions"), index)
    return join(expression_path, field) if field else expression_path


def _requirement(value: object, term_path: str, index: int) -> Requirement:
    expression = as_map(value)
    if expression is None:
        raise Invalid(_expression_path(term_path, index), "must be an object")
    key = expression.get("key")
    if not isinstance(key, str) or not key:
        raise Invalid(_expression_path(term_path, index, "key"), "must be a non-empty string")
    operator = expression.get("operator")
    if not isinstance(operator, str) or operator not in OPERATORS:
        raise Invalid(_expression_path(term_path, index, "operator"), "must be one of In, NotIn, Exists, DoesNotExist")
    raw_values = expression.get("values")
    values: list[str] = []
    if raw_values is not None:
        listed = as_list(raw_values)
        if listed is None:
            raise Invalid(_expression_path(term_path, index, "values"), "must be a list of strings")
        for item in listed:
            if not isinstance(item, str):
                raise Invalid(_expression_path(term_path, index, "values"), "must be a list of strings")
            values.append(item)
    if operator in ("In", "NotIn") and not values:
        raise Invalid(_expression_path(term_path, index, "values"), f"must be non-empty for operator {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise Invalid(_expression_path(term_path, index, "values"), f"must be empty for operator {operator}")
    if key not in _valid_keys and not valid_label_key(key):
        _bad_key(key, _expression_path(term_path, index, "key"), "")
    for position, item in enumerate(values):
        if item not in _valid_values and not valid_label_value(item):
            _bad_value(key, at(_expression_path(term_path, index, "values"), position), "of key ")
    return Requirement(key, cast(Operator, operator), frozenset(values))


def _term(value: object, path: str) -> AffinityTerm:
    term = as_map(value)
    if term is None:
        raise Invalid(path, "must be an object")
    topology = term.get("topologyKey")
    if topology != TOPOLOGY_KEY:
        raise Invalid(join(path, "topologyKey"), f'must be "{TOPOLOGY_KEY}"')
    return AffinityTerm(_selector(term.get("labelSelector"), path))


def _terms(value: object, path: str) -> Sequence[object]:
    if value is None:
        return ()
    listed = as_list(value)
    if listed is None:
        raise Invalid(path, "must be a list")
    if len(listed) > MAX_TERMS:
        raise Invalid(path, f"must have at most {MAX_TERMS} terms")
    return listed


def _required(value: object, path: str) -> tuple[AffinityTerm, ...]:
    # f-strings rather than at()/join(): these paths are built for every term of every Run.
    return tuple(_term(item, f"{path}[{i}]") for i, item in enumerate(_terms(value, path)))


def _preferred(value: object, path: str) -> tuple[WeightedTerm, ...]:
    result: list[WeightedTerm] = []
    for i, item in enumerate(_terms(value, path)):
        entry = as_map(item)
        here = f"{path}[{i}]"
        if entry is None:
            raise Invalid(here, "must be an object")
        weight = entry.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise Invalid(join(here, "weight"), "must be an integer from 1 to 100")
        result.append(WeightedTerm(weight, _term(entry.get("runAffinityTerm"), f"{here}.runAffinityTerm")))
    return tuple(result)


_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"


def decode_affinity(value: object) -> Result[RunAffinity, str]:
    """Validate and compile ``spec.affinity`` (SPEC §3.5).

    The failure message names field paths and, for a key or value of invalid label
    syntax, the key; never a label value or other selector text.
    """
    if value is None:
        return Success(NO_AFFINITY)
    affinity = as_map(value)
    if affinity is None:
        return Failure("spec.affinity must be an object")
    try:
        parts: dict[str, Mapping[str, object]] = {}
        for name in ("runAffinity", "runAntiAffinity"):
            raw = affinity.get(name)
            if raw is None:
                parts[name] = {}
                continue
            part = as_map(raw)
            if part is None:
                raise Invalid(name, "must be an object")
            parts[name] = part
        pos, neg = parts["runAffinity"], parts["runAntiAffinity"]
        return Success(
            RunAffinity(
                required=_required(pos.get(_REQUIRED), f"runAffinity.{_REQUIRED}"),
                preferred=_preferred(pos.get(_PREFERRED), f"runAffinity.{_PREFERRED}"),
                anti_required=_required(neg.get(_REQUIRED), f"runAntiAffinity.{_REQUIRED}"),
                anti_preferred=_preferred(neg.get(_PREFERRED), f"runAntiAffinity.{_PREFERRED}"),
            )
        )
    except Invalid as problem:
        # Affinity details read "<path> <message>": they follow "invalid run affinity: ".
        return Failure(f"{problem.error.path} {problem.error.message}")


_NAME_CHARACTERS: Final = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
_SUBDOMAIN_CHARACTERS: Final = "lowercase alphanumerics, '-' and '.', each part between dots starting and ending with an alphanumeric"
WORKSPACE_API_GROUPS: Final = frozenset({API_VERSION, GROUP})
"""``spec.workspace.apiGroup`` values naming the PersistentWorkspace API: the CRD's default
``kruntimes.io/v1alpha1`` (what an API server hands over) and the bare group."""


def _workspace_ref(value: object) -> tuple[WorkspaceRef | None, str | None]:
    if value is None:
        return None, None
    ref = as_map(value)
    if ref is None:
        return None, "spec.workspace must be an object"
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        return None, "spec.workspace.name must be a non-empty string"
    if len(name) > MAX_NAME:
        return None, f"spec.workspace.name must be at most {MAX_NAME} characters"
    if _DNS_SUBDOMAIN.fullmatch(name) is None:  # no PersistentWorkspace can have another name
        return None, f"spec.workspace.name must be a DNS subdomain ({_SUBDOMAIN_CHARACTERS})"
    kind = ref.get("kind", WORKSPACE_KIND)
    if kind != WORKSPACE_KIND:
        return None, f"spec.workspace.kind must be {WORKSPACE_KIND}"
    api_group = ref.get("apiGroup", API_VERSION)
    if not isinstance(api_group, str) or api_group not in WORKSPACE_API_GROUPS:
        return None, f"spec.workspace.apiGroup must be {API_VERSION} (or {GROUP})"
    # One value for every spelling: a reference decodes equal however it was written.
    return WorkspaceRef(name=name), None


def _status(value: object) -> RunStatus:
    """The Run's status; a settled one (no message, conditions or completion time,
    as ``slim_run`` leaves it) is shared with every equal status: all the Runs on a
    pod in one phase have the same."""
    status = as_map(value) or {}
    attempt = status.get("attempt")
    decoded = RunStatus(
        phase=text_of(status, "phase"),
        assigned_pod=text_of(status, "assignedPod"),
        assigned_pod_uid=text_of(status, "assignedPodUID"),
        message=text_of(status, "message"),
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
        conditions=_conditions(status.get("conditions")),
        completion_time=_time_field(status, "completionTime"),
    )
    if decoded.conditions or decoded.message or decoded.completion_time is not None:
        return decoded
    found = _shared_statuses.get(decoded)
    return found if found is not None else _shared_statuses.put(decoded, decoded)


def decode_run(value: object) -> Result[Run, DecodeError]:
    """A Run; spec problems are recorded on it rather than failing the decode."""
    obj = as_map(value)
    if obj is None:
        return Failure(DecodeError("NotAnObject", "", "a Run must be a JSON object"))
    return _metadata(obj).map(lambda m: _run_from(obj, *m))


def _run_from(obj: Mapping[str, object], meta: Mapping[str, object], namespace: str, name: str, uid: str) -> Run:
    spec_error: str | None = None
    raw_spec = obj.get("spec")
    spec = as_map(raw_spec)
    if spec is None:
        spec = {}
        spec_error = "spec must be an object"
    runtime_value = spec.get("runtime", "")
    runtime = runtime_value if isinstance(runtime_value, str) else ""
    if not isinstance(runtime_value, str):
        spec_error = spec_error or "spec.runtime must be a string"
    elif len(runtime_value) > MAX_NAME:
        spec_error = spec_error or f"spec.runtime must be at most {MAX_NAME} characters"
    elif runtime_value and _LABEL_NAME.fullmatch(runtime_value) is None:
        # matched against the pods' runtime label, whose values cannot hold such characters: no
        # pod could ever take it (and the CRD's pattern refuses it), so it fails rather than waits
        spec_error = spec_error or f"spec.runtime must be made of {_NAME_CHARACTERS}"
    resources = spec.get("resources")
    resources_map = as_map(resources)
    requests, requests_error, requests_beyond = decode_requests_bounded((resources_map or {}).get("requests"))
    if resources is not None and resources_map is None:
        requests_error = "spec.resources must be an object"
    affinity_result = decode_affinity(spec.get("affinity"))
    affinity = affinity_result.value_or(NO_AFFINITY)
    affinity_error = affinity_result.swap().value_or(None)
    workspace, workspace_error = _workspace_ref(spec.get("workspace"))
    spec_error = spec_error or workspace_error
    cancel = spec.get("cancelRequested", False)
    if not isinstance(cancel, bool):
        spec_error = spec_error or "spec.cancelRequested must be a boolean"
        cancel = False
    spec_error = spec_error or requests_beyond
    retry = map_of(spec, "retryPolicy")
    backoff_text = retry.get("backoff")
    backoff = None
    if isinstance(backoff_text, str):
        if len(backoff_text) > MAX_DURATION_LENGTH:
            spec_error = spec_error or (
                f"spec.retryPolicy.backoff is longer than {MAX_DURATION_LENGTH} characters "
                "(a Go duration such as 500ms, 15s or 1m30s)"
            )
        else:
            # one Go refuses (not a duration, or past its range) counts as absent: base 1 s (SPEC §3.6)
            backoff = parse_duration(backoff_text)
    return Run(
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=text_of(meta, "resourceVersion"),
        creation_timestamp=_shared_time_field(meta, "creationTimestamp"),
        labels=_shared_labels_of(meta.get("labels")),
        runtime=runtime,
        requests=requests,
        requests_error=requests_error,
        affinity=affinity,
        affinity_error=affinity_error,
        workspace=workspace,
        cancel_requested=cancel,
        retry_backoff=backoff,
        spec_error=spec_error,
        status=_status(obj.get("status")),
    )


# --- by kind ---------------------------------------------------------------------------------


def decode_object(value: object) -> Result[Decoded, DecodeError]:
    """Dispatch on ``apiVersion``/``kind``: Pod, Run or PersistentWorkspace."""
    obj = as_map(value)
    if obj is None:
        return Failure(DecodeError("NotAnObject", "", "an object must be a JSON object"))
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if api_version == "v1" and kind == "Pod":
        return decode_pod(obj).map(_widen)
    if api_version == API_VERSION and kind == "Run":
        return decode_run(obj).map(_widen)
    if api_version == API_VERSION and kind == WORKSPACE_KIND:
        return decode_workspace(obj).map(_widen)
    return Failure(
        DecodeError(
            "UnknownKind",
            "kind",
            f"expected v1 Pod, {API_VERSION} Run or {API_VERSION} {WORKSPACE_KIND}",
        )
    )


def _widen(value: Decoded) -> Decoded:
    return value
