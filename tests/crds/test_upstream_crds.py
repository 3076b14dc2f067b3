"""deploy/crds are upstream kruntimes' CRDs: compared with the facts of ``upstream.py``, field by field.

A failure lists every difference by the object path it applies to, e.g.
``runs.kruntimes.io: spec.versions[v1alpha1] $.spec.source.inlinePath: missing: upstream declares ...``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import compare, regenerate, upstream

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "crds"
FACTS = upstream.crds()


def ours() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                found[str(doc["metadata"]["name"])] = doc
    return found


OURS = ours()


@pytest.mark.parametrize("name", sorted(FACTS))
def test_our_crd_equals_upstreams_field_by_field(name: str) -> None:
    found = compare.differences(FACTS[name], OURS[name])
    assert not found, f"{len(found)} differences from upstream's {name}:\n" + "\n".join(map(str, found))


def test_deploy_crds_holds_exactly_the_upstream_crds_this_project_installs() -> None:
    installed = sorted(c.name for c in upstream.UPSTREAM_CRDS if c.installed_here)
    assert sorted(OURS) == installed == sorted(FACTS)
    for path in CRDS.glob("*.yaml"):
        (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert path.name == f"{doc['spec']['group']}_{doc['spec']['names']['plural']}.yaml"


def test_the_install_docs_say_which_crds_we_install_and_which_come_from_upstreams_chart() -> None:
    deploy_md = (REPO / "docs" / "deploy.md").read_text()
    for crd in upstream.UPSTREAM_CRDS:
        row = next((line for line in deploy_md.splitlines() if line.startswith(f"| `{crd.name}` ")), None)
        assert row is not None, f"docs/deploy.md has no table row for {crd.name}"
        assert ("`deploy/crds/`" in row) is crd.installed_here, row
        assert "upstream's chart" in row, row


def test_deploy_crds_are_what_the_regenerator_writes() -> None:
    """Only descriptions are edited by hand: ``python -m tests.crds.regenerate`` changes nothing."""
    for path in sorted(CRDS.glob("*.yaml")):
        (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert regenerate.render(path, FACTS[doc["metadata"]["name"]]) == path.read_text(), f"run python -m tests.crds.regenerate ({path.name})"


def test_the_facts_name_the_kubernetes_and_generator_versions_upstream_uses() -> None:
    """Upstream's go.mod has k8s.io/api v0.36.3 and its Makefile controller-gen v0.17.3; the
    renderer in hack/crdgen pins the same ones."""
    assert upstream.kubernetes_versions() == {"controller-gen": "v0.17.3", "k8s.io/api": "v0.36.3"}
    go_mod = (REPO / "hack" / "crdgen" / "go.mod").read_text()
    assert re.search(r"^\s*k8s\.io/api v0\.36\.3$", go_mod, re.MULTILINE)
    assert "CONTROLLER_GEN_VERSION=v0.17.3\n" in (REPO / "hack" / "crdgen" / "generate.sh").read_text()
    assert re.fullmatch(r"[0-9a-f]{40}", upstream.UPSTREAM_COMMIT)


def test_the_kubernetes_types_carry_no_descriptions_so_kubectls_client_side_apply_takes_each_crd() -> None:
    """A deliberate difference (docs/deploy.md): with Kubernetes' descriptions, as upstream ships it,
    the Runtime CRD is over 700 KB, and ``kubectl apply`` (client side) stores the whole object in an
    annotation that the API server caps at 256 KiB. Ours keeps our own descriptions only."""
    for name, crd in OURS.items():
        assert len(json.dumps(crd, separators=(",", ":"))) < 200 * 1024, name
    template = OURS["runtimes.kruntimes.io"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"]
    described = [p for p, value in _walk(template) if p.endswith(".description")]
    assert len(described) < 10, described  # ours, on the few fields a Runtime's author must know about


def _walk(node: object, path: str = "") -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = [(path, node)]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_walk(value, f"{path}[{i}]"))
    return found


# --- the comparison names every kind of difference --------------------------------------------------


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _spec(crd: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = _schema(crd)["properties"]["spec"]
    return spec


def _prop(crd: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = _schema(crd)
    for part in dotted.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


Change = Callable[[dict[str, Any]], object]

CHANGES: list[tuple[str, str, Change, str, str]] = [
    ("type", "runs", lambda c: _prop(c, "spec.runtime").update(type="integer"), "$.spec.runtime type", 'upstream "string", ours "integer"'),
    ("required", "runs", lambda c: _spec(c)["required"].remove("mode"), "$.spec required", '["mode", "runtime"], ours ["runtime"]'),
    ("enum", "runs", lambda c: _prop(c, "status.phase")["enum"].remove("Timeout"), "$.status.phase enum", '"Timeout"'),
    ("format", "runs", lambda c: _prop(c, "spec.retryPolicy.maxAttempts").update(format="int64"), "$.spec.retryPolicy.maxAttempts format", '"int32", ours "int64"'),
    ("pattern", "runs", lambda c: _prop(c, "spec.workspace.name").update(pattern="^.*$"), "$.spec.workspace.name pattern", 'ours "^.*$"'),
    ("maximum", "runs", lambda c: _prop(c, "spec.affinity.runAffinity.preferredDuringSchedulingIgnoredDuringExecution.[].weight").update(maximum=50),
     "$.spec.affinity.runAffinity.preferredDuringSchedulingIgnoredDuringExecution[*].weight maximum", "upstream 100, ours 50"),
    ("minLength", "runs", lambda c: _prop(c, "spec.source.inlinePath").pop("minLength"), "$.spec.source.inlinePath minLength", "upstream has 1, ours has none"),
    ("maxItems", "runs", lambda c: _prop(c, "spec.env").update(maxItems=512), "$.spec.env maxItems", "upstream 256, ours 512"),
    ("default", "runs", lambda c: _prop(c, "spec.workspace.kind").pop("default"), "$.spec.workspace.kind default", 'upstream has "PersistentWorkspace"'),
    ("rule message", "runs", lambda c: _prop(c, "spec.mode")["x-kubernetes-validations"][0].update(message="pick one"),
     "$.spec.mode x-kubernetes-validations", 'message of rule \'has(self.task) != has(self.function)\': upstream "exactly one of task or function must be set", ours "pick one"'),
    ("rule missing", "runs", lambda c: _prop(c, "spec.source")["x-kubernetes-validations"].pop(),
     "$.spec.source x-kubernetes-validations", "missing rule \"!has(self.inlinePath)"),
    ("rule added", "persistentworkspaces", lambda c: _spec(c).update({"x-kubernetes-validations": [{"rule": "true", "message": "m"}]}),
     "$.spec x-kubernetes-validations", "ours has [{\"message\": \"m\", \"rule\": \"true\"}], upstream has none"),
    ("rule order", "runs", lambda c: _spec(c)["x-kubernetes-validations"].reverse(), "$.spec x-kubernetes-validations", "another order than upstream's"),
    ("preserve-unknown-fields", "runtimes", lambda c: _prop(c, "spec.template").update({"x-kubernetes-preserve-unknown-fields": True}),
     "$.spec.template x-kubernetes-preserve-unknown-fields", "ours has true, upstream has none"),
    ("list type", "runs", lambda c: _prop(c, "status.conditions").update({"x-kubernetes-list-type": "atomic"}), "$.status.conditions x-kubernetes-list-type", 'upstream "map", ours "atomic"'),
    ("list map keys", "runtimes", lambda c: _prop(c, "spec.template.spec.containers").pop("x-kubernetes-list-map-keys"),
     "$.spec.template.spec.containers x-kubernetes-list-map-keys", 'upstream has ["name"]'),
    ("missing field", "runs", lambda c: _prop(c, "spec.source")["properties"].pop("inlinePath"), "$.spec.source.inlinePath", "missing: upstream declares"),
    ("extra field", "runs", lambda c: _spec(c)["properties"].update(extra={"type": "string"}), "$.spec.extra", "ours only"),
    ("map values", "runs", lambda c: _prop(c, "status.outputs")["additionalProperties"].update(type="integer"), "$.status.outputs.* type", 'upstream "string", ours "integer"'),
    ("anyOf", "runs", lambda c: _prop(c, "spec.resources.requests")["additionalProperties"]["anyOf"][0].update(type="number"),
     "$.spec.resources.requests.*(anyOf[0]) type", 'upstream "integer", ours "number"'),
    ("printer columns", "runtimes", lambda c: c["spec"]["versions"][0]["additionalPrinterColumns"].pop(1), "spec.versions[v1alpha1].additionalPrinterColumns", '"Replicas"'),
    ("scope", "runs", lambda c: c["spec"].update(scope="Cluster"), "spec.scope", 'upstream "Namespaced", ours "Cluster"'),
    ("short names", "runs", lambda c: c["spec"]["names"].update(shortNames=["run"]), "spec.names.shortNames", 'upstream ["rn"], ours ["run"]'),
    ("served", "runs", lambda c: c["spec"]["versions"][0].update(served=False), "spec.versions[v1alpha1].served", "upstream true, ours false"),
    ("version", "runs", lambda c: c["spec"]["versions"][0].update(name="v1beta1"), "spec.versions[*].name", 'upstream ["v1alpha1"], ours ["v1beta1"]'),
    ("subresources", "persistentworkspaces", lambda c: c["spec"]["versions"][0].pop("subresources"), "spec.versions[v1alpha1].subresources", 'upstream {"status": {}}, ours null'),
]


@pytest.mark.parametrize(("what", "crd", "change", "where", "how"), CHANGES, ids=[c[0] for c in CHANGES])
def test_the_comparison_names_each_difference_by_its_path(what: str, crd: str, change: Change, where: str, how: str) -> None:
    name = f"{crd}.kruntimes.io"
    changed = copy.deepcopy(OURS[name])
    change(changed)
    (found,) = compare.differences(FACTS[name], changed)
    assert found.crd == name
    assert found.where.endswith(where), found
    assert how in found.what, found


def test_descriptions_are_not_compared() -> None:
    changed = copy.deepcopy(OURS["runs.kruntimes.io"])
    _prop(changed, "spec.runtime")["description"] = "Something else entirely."
    _prop(changed, "spec.source")["properties"]["inlinePath"].pop("description", None)
    assert compare.differences(FACTS["runs.kruntimes.io"], changed) == []
