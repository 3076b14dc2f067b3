"""``kubectl kustomize deploy/`` renders the whole install; the scheduler's pod and RBAC are as intended."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kruntimes import __version__

from . import rbac
from .manifests import DEPLOY, Obj, by_kind, only, overlay, render
from .rbac import Grant, Permission

NAMESPACE = "kruntimes-system"
SELECTOR = {"app.kubernetes.io/name": "kruntimes-scheduler", "app.kubernetes.io/component": "scheduler"}

SCHEDULER_PERMISSIONS = frozenset(
    {
        Permission("get", "kruntimes.io", "runs", ""),
        Permission("list", "kruntimes.io", "runs", ""),
        Permission("watch", "kruntimes.io", "runs", ""),
        Permission("patch", "kruntimes.io", "runs", "status"),
        Permission("list", "kruntimes.io", "persistentworkspaces", ""),
        Permission("watch", "kruntimes.io", "persistentworkspaces", ""),
        Permission("list", "", "pods", ""),
        Permission("watch", "", "pods", ""),
        Permission("create", "", "events", ""),
        Permission("patch", "", "events", ""),
    }
)
"""Per watched namespace: informers (list+watch), the confirm read, the status write, core/v1 Events."""

LEASE_GRANTS = frozenset(
    {
        Grant(Permission("get", "coordination.k8s.io", "leases", ""), NAMESPACE, frozenset({"kruntimes-scheduler"})),
        Grant(Permission("update", "coordination.k8s.io", "leases", ""), NAMESPACE, frozenset({"kruntimes-scheduler"})),
        Grant(Permission("create", "coordination.k8s.io", "leases", ""), NAMESPACE),
    }
)
"""Leader election: the one Lease, in the scheduler's own namespace only."""


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return render(DEPLOY)


def container(objects: list[Obj]) -> dict[str, Any]:
    deployment = only(objects, "Deployment", "kruntimes-scheduler")
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(c, dict)
    return c


def test_renders_every_kind(rendered: list[Obj]) -> None:
    kinds = Counter(o["kind"] for o in rendered)
    assert kinds == {
        "CustomResourceDefinition": 3,
        "Namespace": 1,
        "ServiceAccount": 1,
        "ClusterRole": 1,
        "ClusterRoleBinding": 1,
        "Role": 1,
        "RoleBinding": 1,
        "Deployment": 1,
        "PodDisruptionBudget": 1,
        "Service": 1,
    }
    assert {o["metadata"]["name"] for o in by_kind(rendered, "CustomResourceDefinition")} == {
        "runs.kruntimes.io",
        "runtimes.kruntimes.io",
        "persistentworkspaces.kruntimes.io",
    }
    for obj in rendered:
        if obj["kind"] not in ("CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kruntimes"


def test_deployment_runs_two_leader_elected_replicas(rendered: list[Obj]) -> None:
    deployment = only(rendered, "Deployment", "kruntimes-scheduler")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"] == SELECTOR
    assert SELECTOR.items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "kruntimes-scheduler"
    c = container(rendered)
    assert c["command"] + c["args"] == [
        "kruntimes",
        "scheduler",
        "--leader-elect",
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=:8081",
    ]
    assert c["image"] == f"kruntimes-scheduler:{__version__}"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}


def test_probes_on_the_health_port(rendered: list[Obj]) -> None:
    c = container(rendered)
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert get["port"] in ("health", 8081)


def test_resources_have_requests_and_limits(rendered: list[Obj]) -> None:
    resources = container(rendered)["resources"]
    for section in ("requests", "limits"):
        assert set(resources[section]) == {"cpu", "memory"}, section


def test_security_context_is_restricted(rendered: list[Obj]) -> None:
    pod = only(rendered, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int) and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(rendered)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in sc or sc["privileged"] is False
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(forbidden), forbidden
    namespace = only(rendered, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_pdb_and_metrics_service(rendered: list[Obj]) -> None:
    pdb = only(rendered, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}}
    service = only(rendered, "Service")
    assert service["spec"]["selector"] == SELECTOR
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]


def test_cluster_mode_rbac_is_exactly_what_the_scheduler_uses(rendered: list[Obj]) -> None:
    grants = rbac.grants_for(rendered)
    cluster_wide = {g for g in grants if g.namespace is None}
    assert rbac.permissions(cluster_wide) == SCHEDULER_PERMISSIONS
    assert all(not g.names for g in cluster_wide)
    assert grants - cluster_wide == LEASE_GRANTS
    assert not rbac.allows(grants, "update", "coordination.k8s.io", "leases", namespace=NAMESPACE, name="upstream-lease")
    assert rbac.allows(grants, "update", "coordination.k8s.io", "leases", namespace=NAMESPACE, name="kruntimes-scheduler")
    assert rbac.allows(grants, "get", "kruntimes.io", "runs", namespace="team-a", name="r")
    assert not rbac.allows(grants, "get", "kruntimes.io", "persistentworkspaces", namespace="team-a", name="w")
    assert not rbac.allows(grants, "update", "kruntimes.io", "runs", "status", namespace="team-a", name="r")
    assert rbac.allows(grants, "patch", "kruntimes.io", "runs", "status", namespace="team-a", name="r")
    for g in grants:
        assert "*" not in g.permission, g


def test_no_wildcards_and_no_other_subjects(rendered: list[Obj]) -> None:
    for role in by_kind(rendered, "ClusterRole") + by_kind(rendered, "Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (role["metadata"]["name"], key)
    for binding in by_kind(rendered, "ClusterRoleBinding") + by_kind(rendered, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kruntimes-scheduler", "namespace": NAMESPACE}]


def test_namespaced_example_grants_only_the_listed_namespaces() -> None:
    objects = render(DEPLOY / "overlays" / "namespaced-example")
    assert not by_kind(objects, "ClusterRoleBinding")
    assert not by_kind(objects, "CustomResourceDefinition"), "CRDs are applied from deploy/crds/ separately"
    grants = rbac.grants_for(objects)
    assert None not in rbac.scopes(grants), "no cluster-wide grant is left"
    assert rbac.scopes(grants) == {"team-a", "team-b", NAMESPACE}
    for namespace in ("team-a", "team-b"):
        assert rbac.permissions(g for g in grants if g.namespace == namespace) == SCHEDULER_PERMISSIONS
    assert {g for g in grants if g.namespace == NAMESPACE} == LEASE_GRANTS
    args = container(objects)["args"]
    flags = [a for a in args if a.startswith("--namespace=")]
    assert {f.split("=", 1)[1] for f in flags} == {"team-a", "team-b"}, "flags and RoleBindings list the same namespaces"


def test_servicemonitor_component(tmp_path: Path) -> None:
    objects = render(overlay(tmp_path, resources=[DEPLOY], components=[DEPLOY / "components" / "servicemonitor"]))
    monitor = only(objects, "ServiceMonitor", "kruntimes-scheduler")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["spec"]["selector"]["matchLabels"] == SELECTOR
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    service = only(objects, "Service")
    assert SELECTOR.items() <= service["metadata"]["labels"].items(), "the ServiceMonitor must select the metrics Service"
    assert not by_kind(render(DEPLOY), "ServiceMonitor"), "the base needs no Prometheus Operator"


def test_scheduler_only_kustomization_has_no_crds() -> None:
    objects = render(DEPLOY / "scheduler")
    assert not by_kind(objects, "CustomResourceDefinition")
    assert only(objects, "Deployment")["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("where", ["base", "namespaced-example"])
def test_container_args_are_flags_the_scheduler_accepts(rendered: list[Obj], where: str) -> None:
    """The image runs `kruntimes scheduler <args>`: every arg must parse, and mean what it says."""
    from kruntimes.cli import build_parser

    objects = rendered if where == "base" else render(DEPLOY / "overlays" / "namespaced-example")
    args = container(objects)["args"]
    parser, _ = build_parser()
    parsed = parser.parse_args(["scheduler", *args])
    assert parsed.leader_elect is True
    assert parsed.metrics_bind_address.endswith(":8080")
    assert parsed.health_probe_bind_address.endswith(":8081")
    expected = () if where == "base" else ("team-a", "team-b")
    assert tuple(parsed.namespaces or ()) == expected


METRICS_AUTH_GRANTS = frozenset(
    {
        Grant(Permission("create", "authentication.k8s.io", "tokenreviews", ""), None),
        Grant(Permission("create", "authorization.k8s.io", "subjectaccessreviews", ""), None),
    }
)
"""--metrics-secure: the two reviews, cluster-wide (both resources are cluster-scoped)."""


def secure_render(tmp_path: Path, *bases: Path) -> list[Obj]:
    components = [DEPLOY / "components" / "servicemonitor", DEPLOY / "components" / "metrics-secure"]
    return render(overlay(tmp_path, resources=list(bases or [DEPLOY]), components=components))


def test_the_metrics_secure_component_serves_https_on_8443_and_keeps_plain_probes(tmp_path: Path) -> None:
    from kruntimes.cli import build_parser

    objects = secure_render(tmp_path)
    c = container(objects)
    parser, _ = build_parser()
    parsed = parser.parse_args(["scheduler", *c["args"]])
    assert parsed.metrics_secure is True
    assert parsed.metrics_bind_address == ":8443"
    assert parsed.health_probe_bind_address == ":8081"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 8443, "health": 8081}
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] == "health"
        assert c[probe]["httpGet"].get("scheme", "HTTP") == "HTTP", "the health port stays plain HTTP"
    assert only(objects, "Service")["spec"]["ports"] == [{"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}]
    (endpoint,) = only(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert "--metrics-secure" not in container(render(DEPLOY))["args"], "the base stays plain HTTP"


def test_the_metrics_secure_component_grants_the_two_reviews_and_ships_a_reader_role(tmp_path: Path) -> None:
    objects = secure_render(tmp_path)
    grants = rbac.grants_for(objects)
    assert {g for g in grants if g.permission.group.endswith("k8s.io") and "review" in g.permission.resource} == METRICS_AUTH_GRANTS
    plain = rbac.grants_for(render(DEPLOY))
    assert grants - plain == METRICS_AUTH_GRANTS, "nothing else is added"
    reader = only(objects, "ClusterRole", "kruntimes:metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bound = {b["roleRef"]["name"] for b in by_kind(objects, "ClusterRoleBinding")}
    assert "kruntimes:metrics-reader" not in bound, "who scrapes is the cluster's choice"
    for binding in by_kind(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kruntimes-scheduler", "namespace": NAMESPACE}]


def test_the_metrics_secure_component_keeps_its_review_grant_in_namespaced_mode(tmp_path: Path) -> None:
    objects = secure_render(tmp_path, DEPLOY / "overlays" / "namespaced-example")
    grants = rbac.grants_for(objects)
    assert {g for g in grants if g.namespace is None} == METRICS_AUTH_GRANTS
    assert "--metrics-secure" in container(objects)["args"]
