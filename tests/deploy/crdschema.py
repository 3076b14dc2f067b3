"""Validate objects against the CRDs of ``deploy/crds/`` the way the API server would, in Python.

Three parts, applied in the API server's order:

1. **Defaulting** (:func:`apply_defaults`): ``default`` values of the structural schema fill
   absent fields whose parent object exists.
2. **OpenAPI v3 validation** with ``jsonschema`` on a schema converted by :func:`to_json_schema`:
   ``x-kubernetes-*`` keys are dropped (``x-kubernetes-int-or-string`` is already expressed by the
   schema's ``anyOf`` of integer and string, and a ``pattern`` only constrains strings, as on the
   server); ``format: int32``/``int64`` become numeric bounds; an object with declared
   ``properties`` and neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields``
   refuses unknown fields, as ``kubectl apply``'s default strict field validation does (the server
   would otherwise prune them silently).
3. **CEL rules** (``x-kubernetes-validations``): there is no CEL interpreter here, so each rule is
   mirrored by a small Python predicate in :data:`RULES` / :data:`TRANSITION_RULES`, keyed by the
   rule's exact CEL text. Each mirror states the same predicate as the CEL rule; a rule in a CRD
   without a mirror is an error (so editing a rule forces editing its mirror). Transition rules
   (those that read ``oldSelf``) run only on updates, where the old object has the same field.
   A mirror that raises (a missing field the CEL expression would dereference) counts as a
   rejection, as a CEL evaluation error does.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

# --- jsonschema (untyped package: the few members used, with their signatures) -------------


class _SchemaError(Protocol):
    message: str

    @property
    def absolute_path(self) -> Sequence[str | int]: ...


class _Validator(Protocol):
    def iter_errors(self, instance: object) -> Iterable[_SchemaError]: ...


_jsonschema = importlib.import_module("jsonschema")
_draft = cast(Callable[[Mapping[str, Any]], _Validator], _jsonschema.Draft202012Validator)

JSON = Any
Source = Literal["schema", "rule"]

INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
DROPPED = frozenset({"description", "default", "format", "nullable", "example", "externalDocs"})


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason the server would refuse the object: where, what, and which layer said so."""

    path: str
    message: str
    source: Source

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message} [{self.source}]"


def openapi_schema(crd: Mapping[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return cast(dict[str, Any], v["schema"]["openAPIV3Schema"])
    raise KeyError(f"{crd['metadata']['name']} serves no version {version}")


# --- 1. defaulting ------------------------------------------------------------------------------


def apply_defaults(schema: Mapping[str, Any], value: JSON) -> JSON:
    """A copy of ``value`` with schema defaults filled in wherever the parent object exists."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            out[key] = apply_defaults(sub, item) if sub is not None else copy.deepcopy(item)
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = apply_defaults(sub, copy.deepcopy(sub["default"]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], item) for item in value]
    return copy.deepcopy(value)


# --- 2. structural schema -> JSON Schema -------------------------------------------------------


def to_json_schema(node: Mapping[str, Any]) -> dict[str, Any]:
    """The structural schema ``node`` as a JSON Schema (2020-12) with strict unknown-field handling."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in DROPPED:
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = copy.deepcopy(value)
    fmt = node.get("format")
    if node.get("type") == "integer" and isinstance(fmt, str) and fmt in INT_BOUNDS:
        low, high = INT_BOUNDS[fmt]
        out.setdefault("minimum", low)
        out.setdefault("maximum", high)
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _show(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def schema_problems(schema: Mapping[str, Any], obj: JSON) -> list[Problem]:
    validator = _draft(to_json_schema(schema))
    return [Problem(_show(list(e.absolute_path)), e.message, "schema") for e in validator.iter_errors(obj)]


# --- 3. CEL rules, mirrored -------------------------------------------------------------------------

Predicate = Callable[[Any], bool]
Transition = Callable[[Any, Any], bool]


def _has(obj: Mapping[str, Any], key: str) -> bool:
    """CEL ``has(self.key)``: the field is present."""
    return key in obj


def _size(value: Sized) -> int:
    """CEL ``size(x)`` / ``x.size()``."""
    return len(value)


def _selector_not_empty(term: Mapping[str, Any]) -> bool:
    if not _has(term, "labelSelector"):
        return False
    sel = term["labelSelector"]
    return (_has(sel, "matchLabels") and _size(sel["matchLabels"]) > 0) or (
        _has(sel, "matchExpressions") and _size(sel["matchExpressions"]) > 0
    )


def _entrypoint_relative(spec: Mapping[str, Any]) -> bool:
    task = spec["mode"].get("task")
    if task is None or not _has(task, "entrypoint"):
        return True
    if _has(spec, "source") and _has(spec["source"], "inline"):
        return True
    entry = str(task["entrypoint"])
    return not entry.startswith("/") and ".." not in entry.split("/")


def _inline_path_relative(source: Mapping[str, Any]) -> bool:
    if not _has(source, "inlinePath"):
        return True
    path = str(source["inlinePath"])
    return not path.startswith("/") and not any(_size(segment) == 0 or segment in (".", "..") for segment in path.split("/"))


def _inline_path_only_for_inline_functions(spec: Mapping[str, Any]) -> bool:
    return not _has(spec, "source") or not _has(spec["source"], "inlinePath") or (_has(spec["mode"], "function") and _has(spec["source"], "inline"))


def _inline_function_names_its_path(spec: Mapping[str, Any]) -> bool:
    return not _has(spec["mode"], "function") or not _has(spec, "source") or not _has(spec["source"], "inline") or _has(spec["source"], "inlinePath")


def _same_optional(new: Mapping[str, Any], old: Mapping[str, Any], key: str) -> bool:
    """CEL ``has(self.k) == has(oldSelf.k) && (!has(self.k) || self.k == oldSelf.k)``."""
    return _has(new, key) == _has(old, key) and (not _has(new, key) or new[key] == old[key])


def _run_spec_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    return (
        new["runtime"] == old["runtime"]
        and new["mode"] == old["mode"]
        and all(_same_optional(new, old, k) for k in ("source", "env", "timeout", "retryPolicy", "resources"))
    )


def _cancel_one_way(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    return not _has(old, "cancelRequested") or not old["cancelRequested"] or (_has(new, "cancelRequested") and bool(new["cancelRequested"]))


def _artifact_store_matches(store: Mapping[str, Any]) -> bool:
    return (store["driver"] == "filesystem" and _has(store, "filesystem") and not _has(store, "s3")) or (
        store["driver"] == "s3" and _has(store, "s3") and not _has(store, "filesystem")
    )


def _containers(spec: Mapping[str, Any]) -> list[Any]:
    return cast(list[Any], spec["template"]["spec"]["containers"])


def _first_container_is_runtime(spec: Mapping[str, Any]) -> bool:
    return _size(_containers(spec)) > 0 and _containers(spec)[0]["name"] == "runtime"


def _runtime_image_length(spec: Mapping[str, Any]) -> bool:
    containers = _containers(spec)
    if _size(containers) == 0:
        return True
    image = containers[0]["image"]  # no has(): an absent image is an evaluation error, as in CEL
    return 0 < _size(image) <= 2048


DNS_SUBDOMAIN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _service_account_dns(spec: Mapping[str, Any]) -> bool:
    pod = spec["template"]["spec"]
    return not _has(pod, "serviceAccountName") or re.search(DNS_SUBDOMAIN, pod["serviceAccountName"]) is not None


VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)  # fmt: skip
"""The inline members of core/v1 VolumeSource, in the order of the Runtime workspace rule."""

WORKSPACE_ONE_SOURCE = " + ".join(f"(has(self.{n})?1:0)" for n in VOLUME_SOURCES) + " <= 1"

RULES: dict[str, Predicate] = {
    # Run: every affinity term (required and preferred, affinity and anti-affinity)
    "has(self.labelSelector) && ((has(self.labelSelector.matchLabels) && size(self.labelSelector.matchLabels) > 0)"
    " || (has(self.labelSelector.matchExpressions) && size(self.labelSelector.matchExpressions) > 0))": _selector_not_empty,
    # Run spec.mode, spec.source, spec
    "has(self.task) != has(self.function)": lambda m: _has(m, "task") != _has(m, "function"),
    "!(has(self.inline) && has(self.repoURL))": lambda s: not (_has(s, "inline") and _has(s, "repoURL")),
    "!has(self.commitSHA) || has(self.repoURL)": lambda s: not _has(s, "commitSHA") or _has(s, "repoURL"),
    "!has(self.inlinePath) || (!self.inlinePath.startsWith('/')"
    " && !self.inlinePath.split('/').exists(segment, size(segment) == 0 || segment == '.' || segment == '..'))": _inline_path_relative,
    "!has(self.mode.task) || !has(self.mode.task.entrypoint) || (has(self.source) && has(self.source.inline))"
    " || (!self.mode.task.entrypoint.startsWith('/') && !self.mode.task.entrypoint.split('/').exists(segment, segment == '..'))": _entrypoint_relative,
    "!has(self.source) || !has(self.source.inlinePath) || (has(self.mode.function) && has(self.source.inline))": _inline_path_only_for_inline_functions,
    "!has(self.mode.function) || !has(self.source) || !has(self.source.inline) || has(self.source.inlinePath)": _inline_function_names_its_path,
    # artifact stores (Runtime spec, Run status) and artifact references (Run status)
    "(self.driver == 'filesystem' && has(self.filesystem) && !has(self.s3))"
    " || (self.driver == 's3' && has(self.s3) && !has(self.filesystem))": _artifact_store_matches,
    "has(self.filesystem) != has(self.s3)": lambda loc: _has(loc, "filesystem") != _has(loc, "s3"),
    "(self.driver == 'filesystem' && has(self.location.filesystem)) || (self.driver == 's3' && has(self.location.s3))": lambda ref: (
        ref["driver"] == "filesystem" and _has(ref["location"], "filesystem")
    )
    or (ref["driver"] == "s3" and _has(ref["location"], "s3")),
    # Runtime spec, spec.workspace
    "self.template.spec.containers.size() > 0 && self.template.spec.containers[0].name == 'runtime'": _first_container_is_runtime,
    "self.template.spec.containers.size() == 0 || (self.template.spec.containers[0].image.size() > 0"
    " && self.template.spec.containers[0].image.size() <= 2048)": _runtime_image_length,
    "!has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy == 'Always'": lambda s: (
        not _has(s["template"]["spec"], "restartPolicy") or s["template"]["spec"]["restartPolicy"] == "Always"
    ),
    "!has(self.template.spec.ephemeralContainers) || self.template.spec.ephemeralContainers.size() == 0": lambda s: (
        not _has(s["template"]["spec"], "ephemeralContainers") or _size(s["template"]["spec"]["ephemeralContainers"]) == 0
    ),
    f"!has(self.template.spec.serviceAccountName) || self.template.spec.serviceAccountName.matches('{DNS_SUBDOMAIN}')": _service_account_dns,
    WORKSPACE_ONE_SOURCE: lambda ws: sum(1 for n in VOLUME_SOURCES if _has(ws, n)) <= 1,
}
"""CEL rule text -> the same predicate in Python, evaluated on ``self``."""

TRANSITION_RULES: dict[str, Transition] = {
    "self.runtime == oldSelf.runtime && has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)"
    " && self.mode == oldSelf.mode && has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env)"
    " && has(self.timeout) == has(oldSelf.timeout) && (!has(self.timeout) || self.timeout == oldSelf.timeout)"
    " && has(self.retryPolicy) == has(oldSelf.retryPolicy) && (!has(self.retryPolicy) || self.retryPolicy == oldSelf.retryPolicy)"
    " && has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)": _run_spec_immutable,
    "has(self.workspace) == has(oldSelf.workspace) && (!has(self.workspace) || self.workspace == oldSelf.workspace)"
    " && has(self.affinity) == has(oldSelf.affinity) && (!has(self.affinity) || self.affinity == oldSelf.affinity)": lambda new, old: (
        _same_optional(new, old, "affinity") and _same_optional(new, old, "workspace")
    ),
    "!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested || (has(self.cancelRequested) && self.cancelRequested)": _cancel_one_way,
}
"""CEL transition rule text (reads ``oldSelf``) -> the same predicate on ``(self, oldSelf)``."""


@dataclass(frozen=True, slots=True)
class Rule:
    path: str
    rule: str
    message: str

    @property
    def is_transition(self) -> bool:
        return "oldSelf" in self.rule


def rules(schema: Mapping[str, Any], path: str = "") -> Iterator[Rule]:
    """Every ``x-kubernetes-validations`` entry of a schema, with the schema path it sits on."""
    for entry in schema.get("x-kubernetes-validations", ()):
        yield Rule(path, str(entry["rule"]), str(entry.get("message", "")))
    for name, sub in schema.get("properties", {}).items():
        yield from rules(sub, f"{path}.{name}" if path else name)
    for key, mark in (("items", "[*]"), ("additionalProperties", ".*")):
        sub = schema.get(key)
        if isinstance(sub, Mapping):
            yield from rules(sub, path + mark)


def rule_problems(schema: Mapping[str, Any], value: JSON, old: JSON | None, path: str = "") -> list[Problem]:
    """Evaluate the mirrored CEL rules along ``value`` (and ``old`` for transition rules)."""
    found: list[Problem] = []
    kind = schema.get("type")
    if (kind == "object" and not isinstance(value, dict)) or (kind == "array" and not isinstance(value, list)):
        return found  # the schema layer reports the type; CEL does not run on a mistyped value
    for entry in schema.get("x-kubernetes-validations", ()):
        text, message = str(entry["rule"]), str(entry.get("message", entry["rule"]))
        try:
            if text in TRANSITION_RULES:
                ok = old is None or TRANSITION_RULES[text](value, old)
            elif text in RULES:
                ok = RULES[text](value)
            else:
                raise LookupError(f"no Python mirror for CEL rule at {path or '<root>'}: {text}")
        except (KeyError, IndexError, TypeError, AttributeError) as problem:
            ok, message = False, f"{message} (evaluation error: {problem!r})"
        if not ok:
            found.append(Problem(path, message, "rule"))
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                before = old.get(key) if isinstance(old, dict) else None
                found.extend(rule_problems(sub, item, before, f"{path}.{key}" if path else key))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):  # list items are not correlated with old ones (atomic lists)
            found.extend(rule_problems(schema["items"], item, None, f"{path}[{i}]"))
    return found


# --- all three --------------------------------------------------------------------------------------


def problems(crd: Mapping[str, Any], obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Problem]:
    """Why the API server would refuse to store ``obj`` (an update of ``old`` when given); [] when accepted."""
    schema = openapi_schema(crd)
    expected = f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
    head = []
    if obj.get("apiVersion") != expected or obj.get("kind") != crd["spec"]["names"]["kind"]:
        head.append(Problem("", f"expected {expected} {crd['spec']['names']['kind']}", "schema"))
    value = apply_defaults(schema, obj)
    before = apply_defaults(schema, old) if old is not None else None
    return head + schema_problems(schema, value) + rule_problems(schema, value, before)


def defaulted(crd: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], apply_defaults(openapi_schema(crd), obj))
