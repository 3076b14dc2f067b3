"""``deploy/overlays/sharded`` renders four active replicas that split the namespaces through Leases,
with the RBAC the protocol's calls need and nothing more."""

from __future__ import annotations

from collections import Counter

import pytest

from . import rbac
from .manifests import DEPLOY, Obj, by_kind, only, render
from .rbac import Grant, Permission
from .test_kustomize import NAMESPACE, SCHEDULER_PERMISSIONS, SELECTOR, container

SHARDED = DEPLOY / "overlays" / "sharded"

SHARD_LEASE_GRANTS = frozenset(
    Grant(Permission(verb, "coordination.k8s.io", "leases", ""), NAMESPACE)
    for verb in ("get", "list", "create", "update", "delete")
)
"""Membership and assignment Leases, any name (they are made from identities and namespaces), in
the scheduler's namespace only: get (a holder's membership), list (both kinds, by label), create and
update (renew, take, release), delete (fence, leave, forget a deleted namespace)."""

NAMESPACES_LIST = Grant(Permission("list", "", "namespaces", ""), None)
"""The namespaces to share, read once a round; cluster-scoped."""


@pytest.fixture(scope="module")
def sharded() -> list[Obj]:
    return render(SHARDED)


def test_renders_the_scheduler_without_crds(sharded: list[Obj]) -> None:
    kinds = Counter(o["kind"] for o in sharded)
    assert kinds == {
        "Namespace": 1,
        "ServiceAccount": 1,
        "ClusterRole": 2,
        "ClusterRoleBinding": 2,
        "Role": 1,
        "RoleBinding": 1,
        "Deployment": 1,
        "PodDisruptionBudget": 1,
        "Service": 1,
    }, "CRDs are applied from deploy/crds/ separately"
    for obj in sharded:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kruntimes", obj["metadata"]["name"]


def test_four_replicas_run_with_shard_by_namespace(sharded: list[Obj]) -> None:
    deployment = only(sharded, "Deployment", "kruntimes-scheduler")
    assert deployment["spec"]["replicas"] == 4
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    args = container(sharded)["args"]
    assert args == container(render(DEPLOY))["args"] + ["--shard-by-namespace"]
    assert not [a for a in args if a.startswith("--namespace")], "the universe is every namespace the API server lists"
    assert "--shard-by-namespace" not in container(render(DEPLOY))["args"], "the base stays single-leader"


def test_the_args_parse_as_sharded_mode_over_every_namespace(sharded: list[Obj]) -> None:
    from kruntimes.cli import build_parser

    parser, _ = build_parser()
    parsed = parser.parse_args(["scheduler", *container(sharded)["args"]])
    assert parsed.shard_by_namespace is True
    assert parsed.leader_elect is True, "sharding refuses --leader-elect=false"
    assert tuple(parsed.namespaces or ()) == ()
    assert parsed.metrics_bind_address == ":8080" and parsed.health_probe_bind_address == ":8081"


def test_a_drain_takes_one_replica_at_a_time(sharded: list[Obj]) -> None:
    pdb = only(sharded, "PodDisruptionBudget", "kruntimes-scheduler")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}


def test_rbac_is_the_base_with_the_shard_leases_and_the_namespaces_list(sharded: list[Obj]) -> None:
    grants = rbac.grants_for(sharded)
    cluster_wide = {g for g in grants if g.namespace is None}
    assert rbac.permissions(cluster_wide - {NAMESPACES_LIST}) == SCHEDULER_PERMISSIONS
    assert NAMESPACES_LIST in cluster_wide
    assert all(not g.names for g in grants)
    assert grants - cluster_wide == SHARD_LEASE_GRANTS, "no leader Lease rule is left, and nothing else is added"
    role = only(sharded, "ClusterRole", "kruntimes:scheduler-shard-namespaces")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]
    binding = only(sharded, "ClusterRoleBinding", "kruntimes:scheduler-shard-namespaces")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kruntimes:scheduler-shard-namespaces"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kruntimes-scheduler", "namespace": NAMESPACE}]


@pytest.mark.parametrize(
    ("verb", "name"),
    [
        ("list", ""),
        ("get", "kruntimes-scheduler-member-pod-a-x7k2"),
        ("create", ""),
        ("update", "kruntimes-scheduler-ns-team-a"),
        ("delete", "kruntimes-scheduler-member-pod-b-q9zz"),
    ],
)
def test_the_protocol_calls_on_leases_are_granted_in_the_lease_namespace_only(sharded: list[Obj], verb: str, name: str) -> None:
    grants = rbac.grants_for(sharded)
    assert rbac.allows(grants, verb, "coordination.k8s.io", "leases", namespace=NAMESPACE, name=name)
    assert not rbac.allows(grants, verb, "coordination.k8s.io", "leases", namespace="team-a", name=name)


def test_nothing_beyond_the_protocol_is_granted(sharded: list[Obj]) -> None:
    grants = rbac.grants_for(sharded)
    for verb in ("watch", "patch", "deletecollection"):
        assert not rbac.allows(grants, verb, "coordination.k8s.io", "leases", namespace=NAMESPACE), verb
    for verb in ("get", "watch", "create", "update", "delete"):
        assert not rbac.allows(grants, verb, "", "namespaces", name="team-a"), verb
    for role in by_kind(sharded, "ClusterRole") + by_kind(sharded, "Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (role["metadata"]["name"], key)
