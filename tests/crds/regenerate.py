"""Write the schemas of ``deploy/crds/`` from upstream's facts, keeping our descriptions.

    python -m tests.crds.regenerate [--controller-gen V --k8s-api V CONTROLLER_GEN_OUTPUT.yaml]

With a controller-gen rendering of ``hack/crdgen/coretypes`` (``hack/crdgen/generate.sh`` makes one
and calls this), ``kubernetes_types.json`` is rewritten from it first. Then each CRD of
``deploy/crds/`` gets the ``openAPIV3Schema`` of :func:`tests.crds.upstream.crds`, with the
``description`` our file had at the same place (a new field has none until one is written), and is
copied to the dev cluster's package data. Everything else in our files (header comment, labels,
names, columns) is left as it is: ``tests/crds/test_upstream_crds.py`` compares those.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

import yaml

from . import upstream

REPO: Final = Path(__file__).resolve().parents[2]
CRDS: Final = REPO / "deploy" / "crds"
PACKAGED: Final = REPO / "src" / "kruntimes" / "devcluster" / "crds"
YAML_WIDTH: Final = 100

KEY_ORDER: Final = (
    "description", "type", "format", "default", "enum", "nullable", "minimum", "exclusiveMinimum", "maximum",
    "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "minItems", "maxItems", "minProperties",
    "maxProperties", "anyOf", "allOf", "oneOf", "not", "required", "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "additionalProperties", "items", "properties",
    "x-kubernetes-validations",
)  # fmt: skip
"""The order keys are written in: what a value is, then its bounds, then what it contains, then its rules."""


def without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [without_descriptions(v) for v in schema]
    return schema


def kubernetes_types(rendered: Mapping[str, Any], controller_gen: str, k8s_api: str) -> dict[str, Any]:
    """``kubernetes_types.json``'s content from controller-gen's CRD for ``coretypes.CoreTypes``."""
    (version,) = rendered["spec"]["versions"]
    types = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return {"rendered_with": {"controller-gen": controller_gen, "k8s.io/api": k8s_api}, "types": without_descriptions(types)}


def described(facts: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """``facts`` in :data:`KEY_ORDER`, with the descriptions ``ours`` has at the same places."""
    out: dict[str, Any] = {}
    if isinstance(ours.get("description"), str):
        out["description"] = ours["description"]
    for key in sorted(facts, key=lambda k: (KEY_ORDER.index(k) if k in KEY_ORDER else len(KEY_ORDER), k)):
        value = facts[key]
        if key == "properties":
            mine = ours.get("properties", {})
            out[key] = {name: described(sub, mine.get(name, {})) for name, sub in sorted(value.items())}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            mine_sub = ours.get(key)
            out[key] = described(value, mine_sub if isinstance(mine_sub, Mapping) else {})
        else:
            out[key] = value
    return out


def render(path: Path, facts: Mapping[str, Any]) -> str:
    """The text of our CRD file ``path`` with its schema rewritten from ``facts``."""
    text = path.read_text()
    header = text[: text.index("---\n") + len("---\n")]
    (ours,) = [d for d in yaml.safe_load_all(text) if d is not None]
    mine = {v["name"]: v for v in ours["spec"]["versions"]}
    for version in facts["spec"]["versions"]:
        schema = mine[version["name"]]["schema"]
        schema["openAPIV3Schema"] = described(version["schema"]["openAPIV3Schema"], schema["openAPIV3Schema"])
    return header + yaml.safe_dump(ours, sort_keys=False, width=YAML_WIDTH, allow_unicode=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crds.regenerate", description=__doc__.splitlines()[0])
    parser.add_argument("--controller-gen", help="the controller-gen version the rendering was made with")
    parser.add_argument("--k8s-api", help="the k8s.io/api version it was made from")
    parser.add_argument("rendered", nargs="*", type=Path, help="controller-gen's CRD for hack/crdgen/coretypes")
    args = parser.parse_args(argv)
    if args.rendered:
        if not (args.controller_gen and args.k8s_api):
            parser.error("a rendering needs --controller-gen and --k8s-api")
        (rendered,) = [d for p in args.rendered for d in yaml.safe_load_all(p.read_text()) if d is not None]
        content = kubernetes_types(cast(Mapping[str, Any], rendered), args.controller_gen, args.k8s_api)
        upstream.KUBERNETES_TYPES.write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
    for name, facts in upstream.crds().items():
        group_plural = name.split(".", 1)
        path = CRDS / f"{group_plural[1]}_{group_plural[0]}.yaml"
        path.write_text(render(path, facts))
        shutil.copyfile(path, PACKAGED / path.name)
        print(f"wrote {path.relative_to(REPO)} and {(PACKAGED / path.name).relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
