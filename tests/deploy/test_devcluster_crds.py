"""``kubectl apply -f deploy/crds/`` against the local API server, then use the new kinds with kubectl.

The dev cluster starts with *no* kruntimes CRDs (``custom_resources=()``), so everything it serves
here comes from our manifests through the real ``apiextensions.k8s.io/v1`` path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.devcluster import DevCluster
from tests.kubectl import Kubectl

from .manifests import CRDS, EXAMPLES


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    with DevCluster.start(simulator=None, custom_resources=()) as cluster:
        yield Kubectl(cluster.kubeconfig_path(tmp_path), tmp_path / "cache")


def rows(table: str) -> list[list[str]]:
    """A kubectl table split on runs of 2+ spaces (headers like "ASSIGNED POD" contain one)."""
    return [re.split(r"\s{2,}", line.strip()) for line in table.strip().splitlines()]


def test_crds_register_the_kinds_and_kubectl_prints_their_columns(kubectl: Kubectl) -> None:
    assert "the server doesn't have a resource type" in kubectl.refused("get", "runs")
    applied = kubectl.ok("apply", "-f", str(CRDS))
    for name in ("runs", "runtimes", "persistentworkspaces"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}.kruntimes.io created" in applied
    resources = kubectl.ok("api-resources", "--api-group=kruntimes.io", "--no-headers")
    assert sorted(r.split()[:2] for r in resources.strip().splitlines()) == [["persistentworkspaces", "pw"], ["runs", "rn"], ["runtimes", "rt"]]

    assert "No resources found" in kubectl("get", "runs").stderr
    kubectl("apply", "-f", str(EXAMPLES / "valid"))
    kubectl(
        "patch", "run", "hello", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Scheduled", "assignedPod": "python-0", "assignedPodUID": "u-1"}}),
    )  # fmt: skip
    table = rows(kubectl.ok("get", "rn"))
    assert table[0] == ["NAME", "PHASE", "ASSIGNED POD", "RUNTIME", "AGE"]
    by_name = {r[0]: r for r in table[1:]}
    assert set(by_name) == {"greet", "hello", "notebook-cell-7", "resize-images"}
    assert by_name["hello"][1:4] == ["Scheduled", "python-0", "python"]
    runtimes = rows(kubectl.ok("get", "rt"))
    assert runtimes[0] == ["NAME", "IMAGE", "REPLICAS", "READY", "AGE"]
    assert runtimes[1][:3] == ["python", "ghcr.io/example/python-runtime:3.11", "3"]
    workspaces = rows(kubectl.ok("get", "pw"))
    assert workspaces[0] == ["NAME", "PHASE", "RUNTIME", "BOUND POD", "AGE"]


def test_unknown_fields_are_refused_by_strict_validation(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(CRDS))
    out = kubectl.refused("apply", "-f", str(EXAMPLES / "invalid" / "run-unknown-field.yaml"))
    assert "runtimeName" in out and "created" not in out
