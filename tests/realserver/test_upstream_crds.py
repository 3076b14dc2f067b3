"""deploy/crds on the real API server: objects written with every upstream field come back unchanged,
and the dev cluster judges upstream's validation rules as the real server does."""

from __future__ import annotations

import copy
import json
import ssl
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from kruntimes.devcluster import DevCluster
from tests.controlplane.server import ControlPlane
from tests.crds import compare, upstream

from .support import REPO, kubectl

GROUP = "/apis/kruntimes.io/v1alpha1"
STRICT = "?fieldValidation=Strict"
STAMP = "2026-01-02T03:04:05Z"
LATER = "2026-01-02T03:09:05Z"


def _schema(crd: str) -> dict[str, Any]:
    return dict(upstream.crds()[crd]["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _term(app: str) -> dict[str, Any]:
    return {
        "labelSelector": {"matchLabels": {"app": app}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
        "topologyKey": "kruntimes.io/runtime-pod",
    }


def _affinity_rules(app: str) -> dict[str, Any]:
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": [_term(app)],
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 40, "runAffinityTerm": _term(app + "-soft")}],
    }


ENV: list[dict[str, Any]] = [
    {"name": "PLAIN", "value": "1"},
    {"name": "FROM_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level", "optional": True}}},
    {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
    {"name": "FROM_FILE", "valueFrom": {"fileKeyRef": {"volumeName": "config", "path": "env.txt", "key": "A", "optional": False}}},
    {"name": "FROM_RESOURCE", "valueFrom": {"resourceFieldRef": {"containerName": "runtime", "resource": "limits.memory", "divisor": "1Mi"}}},
    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "token", "key": "value", "optional": False}}},
]


def _conditions() -> list[dict[str, Any]]:
    return [
        {"type": "Scheduled", "status": "True", "reason": "Bound", "message": "", "lastTransitionTime": STAMP, "observedGeneration": 1},
        {"type": "Completed", "status": "False", "reason": "Running", "message": "attempt 2 running", "lastTransitionTime": LATER},
    ]


def function_run(name: str) -> dict[str, Any]:
    """A function Run with inline source: every spec field but the task-mode and repository ones."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name},
        "spec": {
            "runtime": "python",
            "source": {"inline": "def handle(request):\n    return {}\n", "inlinePath": "functions/handle.py"},
            "mode": {"function": {"handler": "functions.handle.handle", "idleTimeoutSeconds": 300}},
            "workspace": {"name": "shared-data", "kind": "PersistentWorkspace", "apiGroup": "kruntimes.io/v1alpha1"},
            "affinity": {"runAffinity": _affinity_rules("cache"), "runAntiAffinity": _affinity_rules("noisy")},
            "resources": {"requests": {"runs": "1", "example.com/gpu": 2, "memory": "512Mi"}},
            "env": ENV,
            "timeout": "1h30m",
            "cancelRequested": False,
            "retryPolicy": {"maxAttempts": 3, "backoff": "2s", "retryableReasons": ["PodLost", "Timeout"]},
            "ttlSecondsAfterFinished": 600,
        },
    }


def function_run_status() -> dict[str, Any]:
    return {
        "phase": "Ready",
        "assignedPod": "python-0",
        "assignedPodUID": "0b4c5a40-95f4-4d44-9d5e-2b4c0f0e7a11",
        "endpoint": {"protocol": "HTTPS", "url": "https://gateway.example.com/runs/0b4c5a40", "caBundle": "LS0tLS1CRUdJTg=="},
        "message": "serving",
        "startTime": STAMP,
        "outputs": {"answer": "42"},
        "artifactRefs": [
            {
                "name": "report.html",
                "driver": "filesystem",
                "type": "file",
                "location": {"filesystem": {"path": "runs/r/report.html", "volumeClaimName": "artifacts"}},
                "sizeBytes": 1024,
                "digest": "sha256:" + "a" * 64,
                "contentType": "text/html",
                "createdAt": LATER,
            }
        ],
        "artifactStore": {"driver": "filesystem", "filesystem": {"volumeClaimName": "artifacts"}},
        "attempt": 2,
        "conditions": _conditions(),
    }


def task_run(name: str) -> dict[str, Any]:
    """A task Run from a repository: the task-mode and repository fields."""
    return {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name},
        "spec": {
            "runtime": "python",
            "source": {"repoURL": "https://example.com/jobs.git", "commitSHA": "0123456789abcdef0123456789abcdef01234567"},
            "mode": {"task": {"entrypoint": "jobs/nightly.py", "args": ["--date", "2026-01-02"]}},
            "cancelRequested": True,
        },
    }


def task_run_status() -> dict[str, Any]:
    return {
        "phase": "Succeeded",
        "completionTime": LATER,
        "artifactRefs": [
            {
                "name": "out.tar",
                "driver": "s3",
                "type": "archive",
                "location": {"s3": {"bucket": "artifacts", "key": "runs/t/out.tar"}},
                "sizeBytes": 0,
                "createdAt": LATER,
            }
        ],
        "artifactStore": {
            "driver": "s3",
            "s3": {
                "bucket": "artifacts",
                "prefix": "runs/",
                "region": "eu-west-1",
                "endpoint": "https://s3.example.com",
                "forcePathStyle": True,
                "credentialsSecretName": "s3-credentials",
                "uploadPartSize": 5242880,
                "uploadConcurrency": 4,
            },
        },
    }


def _write(plane: ControlPlane, namespace: str, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Create ``obj`` and write ``status``, both with strict field validation (a field the schema
    would prune is a 400), and read it back."""
    plural = {"Run": "runs", "Runtime": "runtimes", "PersistentWorkspace": "persistentworkspaces"}[obj["kind"]]
    base = f"{GROUP}/namespaces/{namespace}/{plural}"
    name = obj["metadata"]["name"]
    plane.request("POST", base + STRICT, obj)
    plane.request_patch(f"{base}/{name}/status{STRICT}", {"status": status})
    stored = plane.request("GET", f"{base}/{name}")
    assert isinstance(stored, dict)
    return stored


def test_runs_using_every_upstream_field_are_stored_unchanged(deployed: ControlPlane, namespace: str) -> None:
    schema = _schema("runs.kruntimes.io")
    written = [(function_run("everything-function"), function_run_status()), (task_run("everything-task"), task_run_status())]
    used = set().union(
        *(compare.value_paths({"spec": o["spec"], "status": s}, maps=compare.map_paths(schema)) for o, s in written)
    )
    declared = compare.leaf_paths({"properties": {k: schema["properties"][k] for k in ("spec", "status")}})
    assert declared - used == set(), "these two Runs must use every field upstream's Run declares"
    assert used - declared == set()
    for obj, status in written:
        stored = _write(deployed, namespace, obj, status)
        assert stored["spec"] == obj["spec"]
        assert stored["status"] == status


def test_a_runtime_and_a_workspace_using_upstream_fields_are_stored_unchanged(deployed: ControlPlane, namespace: str) -> None:
    runtime: dict[str, Any] = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": "python"},
        "spec": {
            "template": {
                "spec": {
                    "serviceAccountName": "runtime",
                    "restartPolicy": "Always",
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "runs", "effect": "NoSchedule"}],
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
                    "volumes": [{"name": "config", "configMap": {"name": "runtime-config", "defaultMode": 420}}],
                    "containers": [
                        {
                            "name": "runtime",
                            "image": "ghcr.io/example/python-runtime:3.11",
                            "args": ["--port=9091"],
                            "env": ENV[:2],
                            "ports": [{"name": "grpc", "containerPort": 9091, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                            "readinessProbe": {"grpc": {"port": 9091, "service": ""}, "periodSeconds": 5},
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/runtime", "readOnly": True}],
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        }
                    ],
                }
            },
            "port": 9091,
            "replicas": 3,
            "daemonImage": "ghcr.io/example/runtimed:0.0.3",
            "capacity": {"resources": {"runs": 4, "example.com/gpu": "1"}},
            "artifactStore": {"driver": "filesystem", "filesystem": {"volumeClaimName": "artifacts"}},
            "workspace": {"persistentVolumeClaim": {"claimName": "python-workspace", "readOnly": False}},
        },
    }
    runtime_status = {"readyReplicas": 2, "conditions": _conditions()}
    stored = _write(deployed, namespace, runtime, runtime_status)
    assert (stored["spec"], stored["status"]) == (runtime["spec"], runtime_status)

    workspace: dict[str, Any] = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "PersistentWorkspace",
        "metadata": {"name": "shared-data"},
        "spec": {"runtime": "python", "mode": "RuntimePodLocal", "ttlSecondsAfterUnused": 3600, "cleanupPolicy": "Retain"},
    }
    workspace_status = {
        "phase": "Bound", "runtime": "python", "boundPod": "python-0", "path": "/workspace/shared-data",
        "lastUsedTime": LATER, "conditions": _conditions(),
    }  # fmt: skip
    schema = _schema("persistentworkspaces.kruntimes.io")
    used = compare.value_paths({"spec": workspace["spec"], "status": workspace_status})
    assert used == compare.leaf_paths({"properties": {k: schema["properties"][k] for k in ("spec", "status")}})
    stored = _write(deployed, namespace, workspace, workspace_status)
    assert (stored["spec"], stored["status"]) == (workspace["spec"], workspace_status)


def test_a_runtime_templates_metadata_is_dropped_as_by_upstreams_crd(deployed: ControlPlane, namespace: str) -> None:
    """Upstream's CRD declares no field of ``spec.template.metadata``: the server drops its labels
    and annotations, and strict validation (kubectl's default) refuses them."""
    runtime = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Runtime",
        "metadata": {"name": "labelled"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "data"}},
                "spec": {"containers": [{"name": "runtime", "image": "ghcr.io/example/python-runtime:3.11"}]},
            }
        },
    }
    base = f"{GROUP}/namespaces/{namespace}/runtimes"
    with pytest.raises(urllib.error.HTTPError) as refused:
        deployed.request("POST", base + STRICT, runtime)
    assert refused.value.code == 400
    assert 'unknown field "spec.template.metadata.labels"' in json.loads(refused.value.read())["message"]
    stored = deployed.request("POST", base, runtime)
    assert isinstance(stored, dict) and stored["spec"]["template"]["metadata"] == {}


def test_kubectls_client_side_apply_takes_the_crds(deployed: ControlPlane) -> None:
    """``kubectl apply -k deploy/`` (docs/deploy.md) keeps each CRD whole in an annotation, which the
    server bounds to 256 KiB: the Kubernetes types in the Runtime CRD carry no descriptions for this."""
    out = kubectl(deployed, "apply", "--dry-run=server", "-f", str(REPO / "deploy" / "crds"))
    assert out.count("(server dry run)") == 3, out


# --- the dev cluster judges as the real server does ---------------------------------------------------


def _runtime(name: str, **pod: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": "runtime", "image": "ghcr.io/example/python-runtime:3.11"}], **pod}
    return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime", "metadata": {"name": name}, "spec": {"template": {"spec": spec}}}


def _run(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name}, "spec": {"runtime": "python", **spec}}


FUNCTION = {"function": {"handler": "m.f"}}
TASK: dict[str, Any] = {"task": {}}
INLINE = "def f(request):\n    return {}\n"

CREATES: list[dict[str, Any]] = [
    _run("inline-function", mode=FUNCTION, source={"inline": INLINE, "inlinePath": "m.py"}),
    _run("inline-path-absolute", mode=FUNCTION, source={"inline": INLINE, "inlinePath": "/m.py"}),
    _run("inline-path-empty-segment", mode=FUNCTION, source={"inline": INLINE, "inlinePath": "a//m.py"}),
    _run("inline-path-dot", mode=FUNCTION, source={"inline": INLINE, "inlinePath": "./m.py"}),
    _run("inline-path-up", mode=FUNCTION, source={"inline": INLINE, "inlinePath": "a/../../m.py"}),
    _run("inline-path-blank", mode=FUNCTION, source={"inline": INLINE, "inlinePath": ""}),
    _run("inline-path-task", mode=TASK, source={"inline": INLINE, "inlinePath": "m.py"}),
    _run("inline-path-repo", mode=FUNCTION, source={"repoURL": "https://example.com/f.git", "inlinePath": "m.py"}),
    _run("inline-function-no-path", mode=FUNCTION, source={"inline": INLINE}),
    _run("both-modes", mode={**TASK, **FUNCTION}),
    _run("no-mode-member", mode={}),
    _run("inline-and-repo", mode=TASK, source={"inline": INLINE, "repoURL": "https://example.com/f.git"}),
    _run("commit-without-repo", mode=TASK, source={"commitSHA": "abc"}),
    _run("entrypoint-up", mode={"task": {"entrypoint": "../x.py"}}, source={"repoURL": "https://example.com/f.git"}),
    _run("empty-selector", mode=TASK, affinity={"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": "kruntimes.io/runtime-pod"}]}}),
    _run("many-problems", runtime="no good", mode={**TASK, **FUNCTION}, source={"inline": INLINE, "repoURL": "x", "inlinePath": "/x"}),
    _runtime("fine", restartPolicy="Always", serviceAccountName="runtime.sa"),
    {**_runtime("first-not-runtime"), "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "x"}]}}}},
    {**_runtime("no-image"), "spec": {"template": {"spec": {"containers": [{"name": "runtime"}]}}}},
    {**_runtime("long-image"), "spec": {"template": {"spec": {"containers": [{"name": "runtime", "image": "x" * 2049}]}}}},
    {**_runtime("no-containers"), "spec": {"template": {"spec": {"containers": []}}}},
    _runtime("restart-never", restartPolicy="Never"),
    _runtime("ephemeral", ephemeralContainers=[{"name": "debug", "image": "busybox"}]),
    _runtime("bad-service-account", serviceAccountName="Not_A_Name"),
    _runtime("duplicate-containers", containers=[{"name": "runtime", "image": "a"}, {"name": "runtime", "image": "b"}]),
    _runtime("port-not-a-number", containers=[{"name": "runtime", "image": "a", "ports": [{"containerPort": "http"}]}]),
    {**_runtime("two-sources"), "spec": {**_runtime("x")["spec"], "workspace": {"emptyDir": {}, "persistentVolumeClaim": {"claimName": "w"}}}},
]
"""Objects each new or changed upstream rule accepts or refuses, created on both servers."""

UPDATES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (_run("change-runtime", mode=TASK), {"spec": {"runtime": "node"}}),
    (_run("change-source", mode=FUNCTION, source={"inline": INLINE, "inlinePath": "m.py"}), {"spec": {"source": {"inlinePath": "n.py"}}}),
    (_run("add-workspace", mode=TASK), {"spec": {"workspace": {"name": "w"}}}),
    (_run("uncancel", mode=TASK, cancelRequested=True), {"spec": {"cancelRequested": False}}),
    (_run("cancel", mode=TASK), {"spec": {"cancelRequested": True}}),
]
"""A Run, then a merge patch of it, on both servers (the transition rules)."""


class Server:
    """Raw JSON requests to one server, answered as (code, body) whatever the code."""

    def __init__(self, base: str, headers: dict[str, str], namespace: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.base, self.headers, self.namespace = base, headers, namespace
        self.http = urllib3.PoolManager(retries=False, ssl_context=ssl_context) if ssl_context else urllib3.PoolManager(retries=False)

    def send(self, method: str, kind: str, name: str = "", body: object = None, *, query: str = "", merge: bool = False) -> tuple[int, dict[str, Any]]:
        plural = {"Run": "runs", "Runtime": "runtimes"}[kind]
        url = f"{self.base}{GROUP}/namespaces/{self.namespace}/{plural}{'/' + name if name else ''}{query}"
        headers = {**self.headers, "Content-Type": "application/merge-patch+json" if merge else "application/json"}
        answer = self.http.request(method, url, body=None if body is None else json.dumps(body), headers=headers)
        return answer.status, json.loads(answer.data) if answer.data else {}


def verdict(code: int, body: dict[str, Any]) -> tuple[Any, ...]:
    """What a client sees of an answer: for an acceptance the stored spec; for a refusal its code,
    reason, the message's head (``Kind "name" is invalid: ``) and its causes, as a sorted list: the
    real server orders the causes of sibling fields at random (it walks a Go map), and its message
    lists them in that order, which is checked here."""
    if code < 300:
        return (code, body.get("spec"))
    causes = [(str(c.get("reason")), str(c.get("field")), str(c.get("message"))) for c in (body.get("details") or {}).get("causes") or []]
    message = str(body.get("message", ""))
    parts = [f"{where}: {what}" for _, where, what in causes]
    listed = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    head = message[: -len(listed)] if parts and message.endswith(listed) else message
    return (code, body.get("reason"), head, sorted(causes))


@pytest.fixture
def servers(deployed: ControlPlane, namespace: str) -> Iterator[tuple[Server, Server]]:
    context = ssl.create_default_context(cadata=deployed.ca_pem.decode())
    real = Server(deployed.server, {"Authorization": f"Bearer {deployed.admin_token}"}, namespace, context)
    with DevCluster.start(simulator=None) as cluster:
        yield real, Server(cluster.url, {}, "default")


@pytest.mark.parametrize("obj", CREATES, ids=lambda o: str(o["metadata"]["name"]))
def test_the_dev_cluster_accepts_and_refuses_a_create_as_the_real_server_does(servers: tuple[Server, Server], obj: dict[str, Any]) -> None:
    real, dev = servers
    judged = [verdict(*server.send("POST", obj["kind"], body=obj)) for server in (real, dev)]
    assert judged[1] == judged[0]


@pytest.mark.parametrize(("obj", "patch"), UPDATES, ids=lambda o: str(o["metadata"]["name"]) if "metadata" in o else "")
def test_the_dev_cluster_judges_an_update_as_the_real_server_does(servers: tuple[Server, Server], obj: dict[str, Any], patch: dict[str, Any]) -> None:
    real, dev = servers
    judged = []
    for server in (real, dev):
        assert server.send("POST", obj["kind"], body=obj)[0] == 201
        judged.append(verdict(*server.send("PATCH", obj["kind"], obj["metadata"]["name"], patch, merge=True)))
    assert judged[1] == judged[0]


def test_the_dev_cluster_strictly_refuses_an_unknown_template_field_as_the_real_server_does(servers: tuple[Server, Server]) -> None:
    runtime = copy.deepcopy(_runtime("misspelt"))
    runtime["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    judged = [verdict(*server.send("POST", "Runtime", body=runtime, query=STRICT)) for server in servers]
    assert judged[0][0] == 400 and judged[1] == judged[0]
