"""helm for the chart tests: built once from its pinned Go module (hack/helm/build.sh), run with a
private home so that no user's repositories, plugins or kubeconfig take part."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from .manifests import REPO, Obj, documents

BUILD_SCRIPT: Final = REPO / "hack" / "helm" / "build.sh"
CHART: Final = REPO / "charts" / "kruntimes-scheduler"
RELEASE: Final = "kruntimes"
NAMESPACE: Final = "kruntimes-system"
HELM_TIMEOUT: Final = 300.0
"""`helm install` on a loaded machine waits for the CRDs it creates to be established."""


def prebuild() -> None:
    """In the controlling process, before any test: build helm if the cache lacks it, so a cold build
    (minutes) is never charged to the first chart test's timeout. Without Go nothing happens here:
    a chart test then reports why."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or shutil.which("go") is None:
        return
    subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.DEVNULL, check=False)


@functools.cache
def binary() -> Path:
    """The pinned helm, built on first use (about 2 minutes cold, then a cache hit)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    paths = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Path(paths["helm"])


def run(args: Sequence[str], home: Path, *, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` with its cache, config and data under ``home``; never the user's kubeconfig."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "HELM_"))}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        KUBECONFIG=str(kubeconfig) if kubeconfig is not None else os.devnull,
    )
    return subprocess.run([str(binary()), *args], env=env, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)


def ok(args: Sequence[str], home: Path, *, kubeconfig: Path | None = None) -> str:
    """``helm ARGS`` that must succeed; a failure fails the test with helm's own words."""
    done = run(args, home, kubeconfig=kubeconfig)
    assert done.returncode == 0, f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr or done.stdout}"
    return done.stdout


def values_file(directory: Path, values: Mapping[str, Any]) -> Path:
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def template(home: Path, values: Mapping[str, Any], *, include_crds: bool = False, chart: Path = CHART) -> list[Obj]:
    """``helm template`` of the chart as release ``kruntimes`` in ``kruntimes-system``, parsed."""
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE, "--values", str(values_file(home, values))]
    if include_crds:
        args.append("--include-crds")
    return documents(ok(args, home))
