"""The real kubectl against the dev cluster, through a generated kubeconfig, with validation on."""

from __future__ import annotations

import json
import re

import pytest

from tests.kubectl import Kubectl

from .helpers import LineReader, wait_until

RUN = """\
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata:
  name: hello
  labels:
    team: blue
spec:
  runtime: node
  mode:
    task: {}
  resources:
    requests:
      runs: 1
"""

RUNTIME = """\
apiVersion: kruntimes.io/v1alpha1
kind: Runtime
metadata:
  name: node
spec:
  replicas: 2
  capacity:
    resources:
      runs: "3"
  template:
    spec:
      containers:
      - name: runtime
        image: ghcr.io/example/node-runtime:20
"""


@pytest.fixture
def kubectl(server_kubectl: Kubectl) -> Kubectl:
    """Every test here runs on the dev cluster and on the real kube-apiserver."""
    return server_kubectl


def _columns(header: str) -> list[str]:
    return re.split(r"\s{2,}", header.strip())


def test_kubectl_apply_creates_then_configures_a_run_and_a_runtime(kubectl: Kubectl) -> None:
    created = kubectl("apply", "-f", "-", stdin=RUN + "---\n" + RUNTIME)
    assert "run.kruntimes.io/hello created" in created.stdout
    assert "runtime.kruntimes.io/node created" in created.stdout
    assert "unchanged" in kubectl("apply", "-f", "-", stdin=RUN).stdout
    edited = kubectl("apply", "-f", "-", stdin=RUN.replace("team: blue", "team: green"))
    assert "run.kruntimes.io/hello configured" in edited.stdout
    run = kubectl.json("get", "run", "hello")
    assert run["metadata"]["labels"] == {"team": "green"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in run["metadata"]["annotations"]


def test_kubectl_apply_rejects_a_field_the_schema_does_not_declare(kubectl: Kubectl) -> None:
    bad = kubectl("apply", "-f", "-", stdin=RUN.replace("      runs: 1", "      runs: 1\n    surprise: 2"), check=False)
    assert bad.returncode != 0
    assert 'unknown field "spec.resources.surprise"' in bad.stderr


def test_kubectl_get_runs_prints_phase_assigned_pod_and_runtime_columns(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUN)
    kubectl("patch", "run", "hello", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Scheduled","assignedPod":"node-0"}}')
    header, row = kubectl("get", "runs").stdout.splitlines()
    assert _columns(header) == ["NAME", "PHASE", "ASSIGNED POD", "RUNTIME", "AGE"]
    assert _columns(row)[:4] == ["hello", "Scheduled", "node-0", "node"]
    assert _columns(kubectl("get", "rn").stdout.splitlines()[1])[0] == "hello"


def test_kubectl_patch_of_the_status_subresource_changes_only_status(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUN)
    before = kubectl.json("get", "run", "hello")
    out = kubectl("patch", "run", "hello", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Running"},"spec":{"runtime":"other"}}')
    assert "run.kruntimes.io/hello patched" in out.stdout
    after = kubectl.json("get", "run", "hello")
    assert after["status"]["phase"] == "Running"
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"] == 1


def test_kubectl_get_pods_by_runtime_label_lists_the_simulated_runtime_pods(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUNTIME)

    def pods() -> list[list[str]] | None:
        lines = kubectl("get", "pods", "-l", "runtime=node").stdout.splitlines()
        rows = [_columns(line) for line in lines[1:]]
        return rows if len(rows) == 2 and all(r[2] == "Running" for r in rows) else None

    rows = wait_until(pods, what="two Running runtime pods")
    assert [r[0] for r in rows] == ["node-0", "node-1"]
    pod = kubectl.json("get", "pod", "node-0")
    assert pod["metadata"]["annotations"]["kruntimes.io/capacity.runs"] == "3"


def test_kubectl_shows_runtime_pod_heartbeats_advancing(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUNTIME)
    jsonpath = '-o=jsonpath={.status.conditions[?(@.type=="kruntimes.io/RuntimedReady")].lastProbeTime}'
    first = wait_until(lambda: kubectl("get", "pod", "node-0", jsonpath, check=False).stdout.strip(), what="a first heartbeat")
    def advanced() -> str | None:
        now = kubectl("get", "pod", "node-0", jsonpath).stdout.strip()
        return now if now != first else None

    assert wait_until(advanced, timeout=5, what="the heartbeat to advance") > first


def test_kubectl_get_runs_watch_prints_each_change_as_it_happens(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUN)
    proc = kubectl.popen("get", "runs", "-w")
    try:
        lines = LineReader(proc)
        lines.wait_for(lambda line: line.startswith("hello"), what="the initial row")
        kubectl("patch", "run", "hello", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Running","assignedPod":"node-1"}}')
        row = lines.wait_for(lambda line: "Running" in line, what="a row for the change")
        assert _columns(row)[:4] == ["hello", "Running", "node-1", "node"]
        kubectl("apply", "-f", "-", stdin=RUN.replace("name: hello", "name: second"))
        lines.wait_for(lambda line: line.startswith("second"), what="a row for the new run")
        assert sum(1 for line in lines.snapshot() if line.startswith("NAME")) == 1
    finally:
        proc.kill()
        proc.wait(5)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_kubectl_delete_removes_a_run(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUN)
    assert 'run.kruntimes.io "hello" deleted' in kubectl("delete", "run", "hello").stdout
    gone = kubectl("get", "run", "hello", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_kubectl_delete_of_a_run_with_a_finalizer_leaves_it_terminating(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=RUN.replace("  labels:", "  finalizers: [kruntimes.io/cleanup]\n  labels:"))
    kubectl("delete", "run", "hello", "--wait=false")
    run = kubectl.json("get", "run", "hello")
    assert run["metadata"]["deletionTimestamp"]
    kubectl("patch", "run", "hello", "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    assert kubectl("get", "run", "hello", check=False).returncode != 0


CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"""


def test_kubectl_apply_of_a_crd_serves_its_kind_with_its_printer_columns(kubectl: Kubectl) -> None:
    assert "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created" in kubectl("apply", "-f", "-", stdin=CRD).stdout
    kubectl("apply", "-f", "-", stdin="apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n")
    header, row = kubectl("get", "wd").stdout.splitlines()
    assert _columns(header) == ["NAME", "SIZE"]
    assert _columns(row) == ["w1", "3"]
    crd = kubectl.json("get", "crd", "widgets.example.com")
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"


def test_kubectl_sees_the_kruntimes_crds_installed_at_start(kubectl: Kubectl) -> None:
    names = {item["metadata"]["name"] for item in kubectl.json("get", "crds")["items"]}
    assert {"runs.kruntimes.io", "runtimes.kruntimes.io", "persistentworkspaces.kruntimes.io"} <= names
    resources = kubectl("api-resources", "--api-group=kruntimes.io").stdout
    assert re.search(r"^runs\s+rn\s+kruntimes.io/v1alpha1\s+true\s+Run$", resources, re.M)
    # the dev cluster says it is a 1.32 server; the real one is what hack/controlplane builds
    assert json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]["minor"] == {"dev": "32", "real": "37"}[kubectl.server]


POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: web
    image: nginx:1.27
"""


def test_kubectl_creates_a_namespace_then_creates_applies_gets_and_deletes_a_pod_in_it(kubectl: Kubectl) -> None:
    # `kubectl create namespace` is a generated client: it sends only protobuf and does not retry a 415 as JSON
    assert kubectl("create", "namespace", "team-x").stdout.strip() == "namespace/team-x created"
    assert kubectl.json("get", "namespace", "team-x")["status"]["phase"] == "Active"
    assert kubectl("create", "-n", "team-x", "-f", "-", stdin=POD).stdout.strip() == "pod/web created"
    applied = kubectl("apply", "-n", "team-x", "-f", "-", stdin=POD.replace("app: web", "app: shop"))
    assert "pod/web configured" in applied.stdout
    assert kubectl.json("get", "-n", "team-x", "pod", "web")["metadata"]["labels"] == {"app": "shop"}
    assert kubectl("get", "-n", "team-x", "pods", "-o", "name").stdout.split() == ["pod/web"]
    assert kubectl("delete", "-n", "team-x", "pod", "web").stdout.strip() == 'pod "web" deleted'
    assert kubectl("delete", "namespace", "team-x", "--wait=false").stdout.strip() == 'namespace "team-x" deleted'
    if kubectl.server == "real":
        # the test control plane runs no kube-controller-manager, whose namespace controller would
        # empty and remove it: the namespace stays Terminating (docs/devcluster.md)
        assert kubectl.json("get", "namespace", "team-x")["status"]["phase"] == "Terminating"
        return
    gone = kubectl("get", "namespace", "team-x", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
