"""The built-in kruntimes table against the upstream-compatible CRDs in deploy/crds, and serving those CRDs exactly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kruntimes.devcluster import KRUNTIMES_RESOURCES, DevCluster, SimulatorSettings
from kruntimes.devcluster.resources import definitions_from_crd

from .helpers import GROUP, VERSION, Kube, as_obj, close_api, kube_for, wait_until

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "crds"
EXAMPLES = REPO / "examples" / "manifests"

pytestmark = pytest.mark.skipif(not CRDS.is_dir(), reason="deploy/crds is not in this checkout")


def _upstream() -> dict[str, dict[str, Any]]:
    docs = [d for f in sorted(CRDS.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    return {d["spec"]["names"]["plural"]: d for d in docs}


def _shape(definition: Any) -> tuple[Any, ...]:
    return (
        definition.group, definition.version, definition.kind, definition.plural, definition.singular,
        definition.short_names, definition.namespaced, definition.status_subresource,
        [(c.name, c.type, c.json_path) for c in definition.printer_columns],
    )


@pytest.mark.parametrize("builtin", KRUNTIMES_RESOURCES, ids=lambda d: d.plural)
def test_the_builtin_kinds_match_the_upstream_crds_names_scope_subresources_and_columns(builtin: Any) -> None:
    (upstream,) = definitions_from_crd(_upstream()[builtin.plural])
    assert _shape(builtin) == _shape(upstream)


@pytest.fixture
def upstream_cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, Kube]]:
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0), crd_paths=[CRDS]) as cluster:
        kube = kube_for(cluster.kubeconfig_path(tmp_path))
        yield cluster, kube
        close_api(kube.api)


def test_serving_the_upstream_crds_enforces_their_schema(upstream_cluster: tuple[DevCluster, Kube]) -> None:
    _, kube = upstream_cluster
    missing_mode = yaml.safe_load((EXAMPLES / "invalid" / "run-missing-mode.yaml").read_text())
    with pytest.raises(client.ApiException) as refused:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "runs", missing_mode)
    assert refused.value.status == 422
    for doc in yaml.safe_load_all((EXAMPLES / "valid" / "run-function.yaml").read_text()):
        if doc:
            created = as_obj(kube.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "runs", doc))
            assert created["spec"]["mode"]


def test_the_simulator_builds_pods_from_an_upstream_runtimes_template(upstream_cluster: tuple[DevCluster, Kube]) -> None:
    _, kube = upstream_cluster
    runtime = yaml.safe_load((EXAMPLES / "valid" / "runtime-python.yaml").read_text())
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", runtime)

    def ready() -> list[client.V1Pod] | None:
        pods = kube.core.list_namespaced_pod("default", label_selector="runtime=python").items
        return pods if len(pods) == 3 and all(p.status and p.status.phase == "Running" for p in pods) else None

    pod = wait_until(ready, what="the template's pods")[0]
    assert pod.spec is not None
    assert [(c.name, c.image) for c in pod.spec.containers][0] == ("runtime", "ghcr.io/example/python-runtime:3.11")
    assert pod.metadata is not None and (pod.metadata.annotations or {})["kruntimes.io/capacity.gpu"] == "1"
    wait_until(lambda: as_obj(kube.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", "python")).get("status", {}).get("readyReplicas") == 3, what="readyReplicas")
