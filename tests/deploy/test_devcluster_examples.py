"""The example manifests against the dev cluster with the real kubectl, as a user would apply them.

Every file in ``examples/manifests/valid`` is accepted and every file in ``examples/manifests/invalid``
refused (``kubectl apply`` and ``kubectl apply --dry-run=server``), by the dev cluster's default
kinds (the project's CRDs, shipped as package data) and by ``--crds deploy/crds``. Also what kubectl
needs OpenAPI for: ``kind: List`` files (OpenAPI v2) and ``kubectl explain``.
"""

from __future__ import annotations

import filecmp
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.devcluster import DevCluster
from tests.kubectl import Kubectl
from tests.polling import wait_until

from .manifests import CRDS, EXAMPLES, REPO, load_one

VALID = sorted((EXAMPLES / "valid").glob("*.yaml"))
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))
PACKAGED = REPO / "src" / "kruntimes" / "devcluster" / "crds"


@pytest.fixture(params=["default", "crds"])
def kubectl(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kubectl]:
    """A dev cluster serving the packaged CRDs (default) or ``deploy/crds`` installed at start."""
    paths = [CRDS] if request.param == "crds" else []
    with DevCluster.start(simulator=None, crd_paths=paths) as cluster:
        yield Kubectl(cluster.kubeconfig_path(tmp_path), tmp_path / "cache")


def test_the_packaged_crds_are_exactly_deploy_crds() -> None:
    shipped = sorted(p.name for p in PACKAGED.glob("*.yaml"))
    assert shipped == sorted(p.name for p in CRDS.glob("*.yaml"))
    for name in shipped:
        assert filecmp.cmp(PACKAGED / name, CRDS / name, shallow=False), f"src/kruntimes/devcluster/crds/{name} differs from deploy/crds/{name}: copy it over"


def test_every_valid_example_is_accepted_by_dry_run_and_apply(kubectl: Kubectl) -> None:
    for path in VALID:
        assert "(server dry run)" in kubectl.ok("apply", "--dry-run=server", "-f", str(path))
    assert kubectl.ok("get", "runs,runtimes,persistentworkspaces", "-o", "name") == ""
    applied = kubectl.ok("apply", "-f", str(EXAMPLES / "valid"))
    assert applied.count(" created") == len(VALID)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_every_invalid_example_is_refused_by_dry_run_and_apply(kubectl: Kubectl, path: Path) -> None:
    obj = load_one(path)
    for args in (("apply", "--dry-run=server", "-f", str(path)), ("apply", "-f", str(path))):
        out = kubectl.refused(*args)
        assert "is invalid" in out or "strict decoding error" in out, out
    assert "NotFound" in kubectl.refused("get", f"{obj['kind'].lower()}.kruntimes.io", obj["metadata"]["name"])


def test_kubectl_applies_a_list_as_kubectl_get_prints_it(kubectl: Kubectl) -> None:
    kubectl.ok("apply", "-f", str(EXAMPLES / "valid"))
    listed = kubectl.ok("get", "runs", "-o", "yaml")
    assert listed.startswith("apiVersion: v1\nitems:") and "kind: List" in listed
    kubectl.ok("delete", "runs", "--all")
    assert kubectl.ok("get", "runs", "-o", "name") == ""
    out = kubectl.ok("apply", "-f", "-", stdin=listed)
    assert sorted(out.split()) == sorted(["run.kruntimes.io/greet", "created", "run.kruntimes.io/hello", "created", "run.kruntimes.io/notebook-cell-7", "created", "run.kruntimes.io/resize-images", "created"])
    invalid_list = "apiVersion: v1\nkind: List\nitems:\n" + "".join("- " + "\n  ".join(p.read_text().splitlines()[1:]) + "\n" for p in INVALID[:1])
    assert kubectl("apply", "-f", "-", stdin=invalid_list, check=False).returncode != 0


def test_kubectl_explain_reads_the_crd_schema(kubectl: Kubectl) -> None:
    out = kubectl.ok("explain", "runs.spec")
    assert "KIND:       Run" in out and "What to execute, where it may run" in out
    assert "mode\t<Object> -required-" in out and "runtime\t<string> -required-" in out
    nested = kubectl.ok("explain", "runs.spec.workspace.kind")
    assert "PersistentWorkspace" in nested


def test_the_dev_cluster_command_starts_with_crds_from_deploy(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "dev.kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kruntimes.devcluster", "--crds", str(CRDS), "--runtime", "python=1x2", "--kubeconfig-out", str(kubeconfig), "--no-simulator"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_until(lambda: kubeconfig.exists() or proc.poll() is not None, what="the kubeconfig")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        kubectl = Kubectl(kubeconfig, tmp_path / "cache")
        wait_until(lambda: kubectl("get", "runtime", "python", check=False).returncode == 0, what="the python Runtime")
        template = kubectl.ok("get", "runtime", "python", "-o", "jsonpath={.spec.template.spec.containers[0].name} {.spec.port}")
        assert template == "runtime 9091"  # the CRD's requirement met, its default applied
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
