"""The CRDs of ``deploy/crds/``: upstream wire facts, and every example manifest judged by them.

Schema checks use ``jsonschema`` on the converted structural schema (see ``crdschema``); the CEL
rules (``x-kubernetes-validations``) are evaluated by explicit Python mirrors of the same predicates,
keyed by the exact CEL text, because no CEL interpreter is available here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kruntimes.pure.readers.kube import decode_requests

from . import crdschema
from .manifests import CRDS, EXAMPLES, crds, load_all, load_one, walk

CRD = crds()
KINDS = ("Run", "Runtime", "PersistentWorkspace")
VALID = sorted((EXAMPLES / "valid").glob("*.yaml"))
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))
AFFINITY_LISTS = (
    ("runAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("runAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("runAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("runAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
)


def schema_of(kind: str) -> dict[str, Any]:
    return crdschema.openapi_schema(CRD[kind])


def at(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def run(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"runtime": "python", "mode": {"task": {}}}
    body.update(spec)
    return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "r", "namespace": "default"}, "spec": body}


def problems(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[crdschema.Problem]:
    return crdschema.problems(CRD[obj["kind"]], obj, old)


# --- the CRDs themselves: names, scope, columns, subresources -------------------------------------


def test_three_crds_with_upstream_names_and_short_names() -> None:
    assert sorted(CRD) == sorted(KINDS)
    expected = {"Run": ("runs", "run", "rn"), "Runtime": ("runtimes", "runtime", "rt"), "PersistentWorkspace": ("persistentworkspaces", "persistentworkspace", "pw")}
    for kind, (plural, singular, short) in expected.items():
        crd = CRD[kind]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["metadata"]["name"] == f"{plural}.kruntimes.io"
        spec = crd["spec"]
        assert spec["group"] == "kruntimes.io" and spec["scope"] == "Namespaced"
        assert spec["names"] == {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular, "shortNames": [short]}
        (version,) = spec["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    def columns(kind: str) -> list[tuple[str, str, str]]:
        return [(c["name"], c["type"], c["jsonPath"]) for c in CRD[kind]["spec"]["versions"][0]["additionalPrinterColumns"]]

    age = ("Age", "date", ".metadata.creationTimestamp")
    assert columns("Run") == [("Phase", "string", ".status.phase"), ("Assigned Pod", "string", ".status.assignedPod"), ("Runtime", "string", ".spec.runtime"), age]
    assert columns("Runtime") == [
        ("Image", "string", ".spec.template.spec.containers[0].image"),
        ("Replicas", "integer", ".spec.replicas"),
        ("Ready", "integer", ".status.readyReplicas"),
        age,
    ]
    assert columns("PersistentWorkspace") == [("Phase", "string", ".status.phase"), ("Runtime", "string", ".spec.runtime"), ("Bound Pod", "string", ".status.boundPod"), age]


def test_the_fields_the_scheduler_reads_are_declared_with_upstream_types() -> None:
    """SPEC §1: every field the scheduler reads exists in the schema (so it is never pruned)."""
    run_schema = schema_of("Run")
    for path, kind in {
        "spec.runtime": "string",
        "spec.resources.requests": "object",
        "spec.affinity.runAffinity": "object",
        "spec.affinity.runAntiAffinity": "object",
        "spec.workspace.name": "string",
        "spec.workspace.kind": "string",
        "spec.workspace.apiGroup": "string",
        "spec.cancelRequested": "boolean",
        "spec.retryPolicy.backoff": "string",
        "status.phase": "string",
        "status.assignedPod": "string",
        "status.assignedPodUID": "string",
        "status.message": "string",
        "status.attempt": "integer",
        "status.conditions": "array",
        "status.completionTime": "string",
    }.items():
        assert at(run_schema, path)["type"] == kind, path
    ws = schema_of("PersistentWorkspace")
    for path in ("spec.runtime", "spec.mode", "status.phase", "status.boundPod"):
        assert at(ws, path)["type"] == "string", path
    assert at(run_schema, "status.phase")["enum"] == ["Pending", "Scheduled", "Running", "Ready", "Succeeded", "Failed", "Timeout", "Cancelled"]
    assert at(ws, "status.phase")["enum"] == ["Pending", "Bound", "Lost", "Released"]
    assert at(run_schema, "status.conditions")["x-kubernetes-list-type"] == "map"


def test_affinity_terms_have_upstream_bounds_and_one_shape() -> None:
    affinity = at(schema_of("Run"), "spec.affinity")
    terms = []
    for side, kind in AFFINITY_LISTS:
        listing = affinity["properties"][side]["properties"][kind]
        assert listing["maxItems"] == 32
        if kind.startswith("preferred"):
            weight = listing["items"]["properties"]["weight"]
            assert (weight["minimum"], weight["maximum"], weight["format"]) == (1, 100, "int32")
            assert listing["items"]["required"] == ["runAffinityTerm", "weight"]
            terms.append(listing["items"]["properties"]["runAffinityTerm"])
        else:
            terms.append(listing["items"])
    for term in terms:
        assert term == terms[0], "the four copies of the affinity term schema must stay identical"
    term = terms[0]
    assert term["required"] == ["labelSelector", "topologyKey"]
    assert term["properties"]["topologyKey"]["enum"] == ["kruntimes.io/runtime-pod"]
    assert [r["rule"] for r in term["x-kubernetes-validations"]] == [next(iter(crdschema.RULES))]


def test_defaults_match_upstream() -> None:
    runtime = crdschema.defaulted(CRD["Runtime"], load_one(EXAMPLES / "valid" / "runtime-python.yaml"))
    assert runtime["spec"]["port"] == 9091
    minimal = crdschema.defaulted(CRD["Runtime"], {"spec": {"template": {"spec": {"containers": [{"name": "runtime", "image": "x"}]}}}})
    assert minimal["spec"]["replicas"] == 1
    r = crdschema.defaulted(CRD["Run"], {**run(workspace={"name": "w"}), "status": {}})
    assert r["spec"]["workspace"] == {"name": "w", "kind": "PersistentWorkspace", "apiGroup": "kruntimes.io/v1alpha1"}
    assert r["status"]["phase"] == "Pending"
    assert "status" not in crdschema.defaulted(CRD["Run"], run()), "defaults fill only objects that exist"
    pw = crdschema.defaulted(CRD["PersistentWorkspace"], {"spec": {"runtime": "python"}, "status": {}})
    assert (pw["spec"]["mode"], pw["spec"]["cleanupPolicy"], pw["status"]["phase"]) == ("RuntimePodLocal", "DeleteAfterTTL", "Pending")


def test_name_patterns_and_lengths() -> None:
    run_schema = schema_of("Run")
    assert at(run_schema, "spec.runtime")["maxLength"] == 63 and at(run_schema, "spec.runtime")["minLength"] == 1
    assert at(run_schema, "spec.workspace.name")["maxLength"] == 253
    assert at(schema_of("PersistentWorkspace"), "spec.runtime")["pattern"] == at(run_schema, "spec.runtime")["pattern"]
    for good in ("python", "py3.11", "a", "A_b-c.d", "x" * 63):
        assert not problems(run(runtime=good)), good
    for bad in ("", "-python", "python-", "py thon", "x" * 64, "py/thon"):
        assert {p.path for p in problems(run(runtime=bad))} == {"spec.runtime"}, bad
    for bad_ws in ("Upper", "a_b", "-a", "a" * 254):
        assert [p.path for p in problems(run(workspace={"name": bad_ws}))] == ["spec.workspace.name"], bad_ws


def test_a_runtime_template_is_judged_as_a_pod_template() -> None:
    """As upstream's: the template is core/v1 PodTemplateSpec, so a misspelt or mistyped pod field is
    refused (kubectl's strict validation) instead of being kept, and the workspace is a VolumeSource."""
    base = load_one(EXAMPLES / "valid" / "runtime-python.yaml")
    assert not problems(base)
    misspelt = copy.deepcopy(base)
    misspelt["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert [(p.path, p.source) for p in problems(misspelt)] == [("spec.template.spec.containers[0]", "schema")]
    mistyped = copy.deepcopy(base)
    mistyped["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "http"}]
    assert [p.path for p in problems(mistyped)] == ["spec.template.spec.containers[0].ports[0].containerPort"]
    pod = copy.deepcopy(base)
    pod["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    pod["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert not problems(pod)
    workspace = at(schema_of("Runtime"), "spec.workspace")
    assert sorted(workspace["properties"]) == sorted(crdschema.VOLUME_SOURCES)
    claim = copy.deepcopy(base)
    claim["spec"]["workspace"] = {"persistentVolumeClaim": {"claimName": "w", "readOnlyy": True}}
    assert [p.path for p in problems(claim)] == ["spec.workspace.persistentVolumeClaim"]


# --- CEL rules --------------------------------------------------------------------------------------


def test_every_cel_rule_has_a_python_mirror_and_every_mirror_a_rule() -> None:
    found = {r.rule for kind in KINDS for r in crdschema.rules(schema_of(kind))}
    mirrored = set(crdschema.RULES) | set(crdschema.TRANSITION_RULES)
    assert found - mirrored == set(), "CEL rules without a Python mirror in crdschema"
    assert mirrored - found == set(), "Python mirrors of CEL rules that no CRD has any more"
    for kind in KINDS:
        for r in crdschema.rules(schema_of(kind)):
            assert r.message, f"{kind} {r.path}: a rule needs a message"
            assert r.is_transition == (r.rule in crdschema.TRANSITION_RULES)
            if r.is_transition:
                assert r.path == "spec", "transition rules sit on spec, where old and new always correlate"


def test_transition_rules_make_scheduling_fields_immutable() -> None:
    """Mirrors the CEL transition rules on Run ``spec``: runtime, resources, affinity and workspace
    (and mode, source, env, timeout, retryPolicy) cannot change or appear/disappear after creation."""
    term = {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {"a": "b"}}}
    old = run(resources={"requests": {"runs": 1}}, affinity={"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}, workspace={"name": "w"})
    changes: dict[str, Callable[[dict[str, Any]], object]] = {
        "runtime": lambda s: s.update(runtime="node"),
        "resources": lambda s: s["resources"]["requests"].update(runs=2),
        "resources removed": lambda s: s.pop("resources"),
        "affinity": lambda s: s["affinity"]["runAffinity"].clear(),
        "workspace": lambda s: s["workspace"].update(name="other"),
        "workspace removed": lambda s: s.pop("workspace"),
        "mode": lambda s: s.update(mode={"function": {}}),
        "timeout added": lambda s: s.update(timeout="1m"),
    }
    for what, change in changes.items():
        new = copy.deepcopy(old)
        change(new["spec"])
        found = problems(new, old)
        assert [(p.path, p.source) for p in found] == [("spec", "rule")], what
        assert not problems(new), f"{what}: the same object is fine on create"
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"x": "y"}
    relabelled["status"] = {"phase": "Scheduled", "assignedPod": "p"}
    assert not problems(relabelled, old), "labels and status may change"


@pytest.mark.parametrize(
    ("before", "after", "ok"),
    [(None, True, True), (False, True, True), (None, None, True), (True, True, True), (True, False, False), (True, None, False)],
)
def test_cancel_requested_is_one_way(before: bool | None, after: bool | None, ok: bool) -> None:
    """Mirrors the CEL rule ``!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested ||
    (has(self.cancelRequested) && self.cancelRequested)``: false/absent -> true only."""
    old, new = run(), run()
    if before is not None:
        old["spec"]["cancelRequested"] = before
    if after is not None:
        new["spec"]["cancelRequested"] = after
    assert (not problems(new, old)) is ok


def test_selector_rule_rejects_empty_selectors_in_every_term_list() -> None:
    """Mirrors the CEL rule on each affinity term: a labelSelector with no matchLabels entry and no
    matchExpressions requirement (``{}``, or empty ones) is refused, in all four term lists."""
    empty_selectors: list[dict[str, Any]] = [{}, {"matchLabels": {}}, {"matchExpressions": []}, {"matchLabels": {}, "matchExpressions": []}]
    for side, kind in AFFINITY_LISTS:
        for selector in empty_selectors:
            term = {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": selector}
            entry: dict[str, Any] = {"weight": 1, "runAffinityTerm": term} if kind.startswith("preferred") else term
            found = problems(run(affinity={side: {kind: [entry]}}))
            assert [p.source for p in found] == ["rule"], (side, kind, selector)
        ok_term = {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
        ok_entry: dict[str, Any] = {"weight": 100, "runAffinityTerm": ok_term} if kind.startswith("preferred") else ok_term
        assert not problems(run(affinity={side: {kind: [ok_entry]}}))


# --- quantities -----------------------------------------------------------------------------------


def test_fractional_requests_pass_the_schema_and_are_failed_by_the_scheduler() -> None:
    """Upstream's schema admits any Kubernetes quantity in ``spec.resources.requests`` (its pattern
    allows ``500m``, ``-1`` and ``1.5``), so the CRD cannot reject them; the scheduler fails such a Run
    with reason InvalidResources (SPEC §2). Non-quantities are rejected by the schema's pattern."""
    for value in ("500m", "0.5", "-1", 3, "1.5k", "2Gi", "1e3"):
        assert not problems(run(resources={"requests": {"cpu": value}})), value
    _, message = decode_requests({"cpu": "500m"})
    assert message == 'resource request "cpu" must be a non-negative integer'
    for bad in ("two", "1 000", "5 m", "1.2.3", "", True, 1.5):
        found = problems(run(resources={"requests": {"cpu": bad}}))
        assert [p.path for p in found] == ["spec.resources.requests.cpu"], bad


# --- the example manifests ------------------------------------------------------------------------


def test_examples_exist() -> None:
    assert len(VALID) >= 4 and len(INVALID) >= 10
    assert {load_one(p)["kind"] for p in VALID} == set(KINDS)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_example_is_accepted(path: Path) -> None:
    for obj in load_all(path):
        assert problems(obj) == [], path.name


EXPECTED_REJECTIONS: dict[str, tuple[str, crdschema.Source, str]] = {
    "run-affinity-weight-zero.yaml": ("spec.affinity.runAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "schema", "minimum"),
    "run-affinity-weight-too-big.yaml": ("spec.affinity.runAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "schema", "maximum"),
    "run-affinity-empty-selector.yaml": ("spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]", "rule", "labelSelector"),
    "run-affinity-empty-lists.yaml": ("spec.affinity.runAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].runAffinityTerm", "rule", "labelSelector"),
    "run-affinity-foreign-topology.yaml": ("spec.affinity.runAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "schema", "is not one of"),
    "run-affinity-too-many-terms.yaml": ("spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution", "schema", "too long"),
    "run-request-not-a-quantity.yaml": ("spec.resources.requests.gpu", "schema", "does not match"),
    "run-workspace-wrong-kind.yaml": ("spec.workspace.kind", "schema", "is not one of"),
    "run-mode-both.yaml": ("spec.mode", "rule", "exactly one of task or function must be set"),
    "run-source-inline-and-repo.yaml": ("spec.source", "rule", "inline and repoURL are mutually exclusive"),
    "run-entrypoint-escapes.yaml": ("spec", "rule", "relative path"),
    "run-inline-function-without-path.yaml": ("spec", "rule", "function mode inline source requires source.inlinePath"),
    "run-inline-path-escapes.yaml": ("spec.source", "rule", "inlinePath must be a relative file path"),
    "run-missing-mode.yaml": ("spec", "schema", "'mode' is a required property"),
    "run-runtime-name-invalid.yaml": ("spec.runtime", "schema", "does not match"),
    "run-unknown-field.yaml": ("spec", "schema", "'runtimeName' was unexpected"),
    "runtime-first-container-not-runtime.yaml": ("spec", "rule", "template.spec.containers[0] must be named runtime"),
    "runtime-port-zero.yaml": ("spec.port", "schema", "minimum"),
    "runtime-two-workspace-sources.yaml": ("spec.workspace", "rule", "at most one workspace volume source may be set"),
    "persistentworkspace-unknown-mode.yaml": ("spec.mode", "schema", "is not one of"),
}


def test_every_invalid_example_has_an_expectation() -> None:
    assert sorted(p.name for p in INVALID) == sorted(EXPECTED_REJECTIONS)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example_is_rejected_for_its_one_reason(path: Path) -> None:
    assert path.read_text().startswith("# rejected: "), "the first line names the rule the file breaks"
    where, source, fragment = EXPECTED_REJECTIONS[path.name]
    found = problems(load_one(path))
    assert any(p.path == where and p.source == source and fragment in p.message for p in found), "\n".join(map(str, found))
    # Anything else reported must be a consequence of the same defect (a rule that cannot evaluate).
    others = [p for p in found if not (p.path == where and p.source == source)]
    assert all("evaluation error" in p.message for p in others), "\n".join(map(str, others))


def test_crd_files_carry_no_upstream_generator_annotations() -> None:
    """Our manifests are written here, not copied: no controller-gen stamp, descriptions of our own."""
    for path in sorted(CRDS.glob("*.yaml")):
        text = path.read_text()
        assert "controller-gen" not in text, path.name
        assert "More info: https://git.k8s.io" not in text, path.name
    for _, value in walk(CRD["Run"]):
        assert value != "Run is the Schema for the runs API."
