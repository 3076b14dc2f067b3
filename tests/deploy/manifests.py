"""Paths of the deploy artefacts and typed loaders for them: YAML files and ``kubectl kustomize`` output."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CRDS = DEPLOY / "crds"
EXAMPLES = REPO / "examples" / "manifests"
KUBECTL_TIMEOUT = 20.0

Obj = dict[str, Any]


def load_all(path: Path) -> list[Obj]:
    """Every non-empty YAML document of ``path``; each must be a mapping."""
    return documents(path.read_text())


def documents(text: str) -> list[Obj]:
    out: list[Obj] = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        assert isinstance(doc, dict), f"a manifest document must be a mapping, not {type(doc).__name__}"
        out.append(cast(Obj, doc))
    return out


def load_one(path: Path) -> Obj:
    docs = load_all(path)
    assert len(docs) == 1, f"{path} holds {len(docs)} documents, expected 1"
    return docs[0]


def crds() -> dict[str, Obj]:
    """The CRDs of ``deploy/crds/`` by kind."""
    out: dict[str, Obj] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in load_all(path):
            assert doc["kind"] == "CustomResourceDefinition", path
            out[str(doc["spec"]["names"]["kind"])] = doc
    return out


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found is not None, "kubectl is not on PATH"
    return found


def run_kubectl(args: Sequence[str], *, kubeconfig: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed kubectl; never reads the user's kubeconfig unless one is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["KUBECONFIG"] = str(kubeconfig) if kubeconfig is not None else os.devnull
    return subprocess.run([kubectl(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False)


def render(directory: Path) -> list[Obj]:
    """``kubectl kustomize <directory>`` parsed into objects (fails the test on a kustomize error)."""
    done = run_kubectl(["kustomize", str(directory)])
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return documents(done.stdout)


def overlay(tmp: Path, *, resources: Sequence[Path] = (), components: Sequence[Path] = ()) -> Path:
    """Write a throwaway overlay in ``tmp`` over the given bases/components (kustomize wants relative paths)."""
    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization"]
    for key, paths in (("resources", resources), ("components", components)):
        if paths:
            lines.append(f"{key}:")
            lines.extend(f"  - {os.path.relpath(p, tmp)}" for p in paths)
    (tmp / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return tmp


def by_kind(objects: Sequence[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o.get("kind") == kind]


def only(objects: Sequence[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def walk(value: object, path: str = "") -> Iterator[tuple[str, object]]:
    """Every (path, value) pair of a JSON-like value, depth first."""
    yield path, value
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk(v, f"{path}[{i}]")
