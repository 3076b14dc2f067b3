"""The sharded overlay's RBAC against what sharded replicas really call on the dev cluster: every
request is granted, and every Lease and namespace permission it adds is used — joining, reading
the others, taking, fencing an expired member, releasing and leaving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.devcluster import DevCluster, SimulatorSettings
from kruntimes.kubeclient.kube import LEASES
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler
from kruntimes.pure.sharding import (
    ASSIGNMENT_ROLE,
    DEFAULT_GROUP,
    GROUP_LABEL,
    MEMBER_ROLE,
    NAMESPACE_LABEL,
    ROLE_LABEL,
    assignment_lease_name,
    member_lease_name,
)
from tests.security.support import RequestRecorder, client, scheduler, wait_until

from . import rbac
from .manifests import DEPLOY, render
from .rbac import Permission
from .test_kustomize import NAMESPACE
from .test_sharded_overlay import NAMESPACES_LIST, SHARD_LEASE_GRANTS

AGENT = "kruntimes-scheduler/shard-"
TEAMS = ("team-a", "team-b", "team-c")
ELECTION = LeaderElectionOptions(namespace=NAMESPACE, lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0), auto_create_namespaces=True) as running:
        yield running


def _lease(name: str, holder: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {GROUP_LABEL: DEFAULT_GROUP, **labels}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 2},
    }


def _owned(*replicas: Scheduler) -> set[str]:
    return {ns for r in replicas if r.shard is not None for ns in r.shard.owned}


def test_sharded_replicas_need_exactly_the_overlays_lease_and_namespace_grants(cluster: DevCluster, tmp_path: Path) -> None:
    setup = client(cluster, tmp_path, "kruntimes-tests")
    for namespace in (NAMESPACE, *TEAMS):
        setup.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}).unwrap()
    # a member that died holding team-a: whoever takes team-a must fence it first
    setup.create(LEASES.path(NAMESPACE), _lease(member_lease_name(DEFAULT_GROUP, "ghost"), "ghost", {ROLE_LABEL: MEMBER_ROLE})).unwrap()
    ghost_claim = _lease(assignment_lease_name(DEFAULT_GROUP, "team-a"), "ghost", {ROLE_LABEL: ASSIGNMENT_ROLE, NAMESPACE_LABEL: "team-a"})
    setup.create(LEASES.path(NAMESPACE), ghost_claim).unwrap()
    recorder = RequestRecorder(cluster)
    with scheduler(cluster, tmp_path, identity="shard-alpha", leader_election=ELECTION, shard_group=DEFAULT_GROUP) as alpha:
        with scheduler(cluster, tmp_path, identity="shard-beta", leader_election=ELECTION, shard_group=DEFAULT_GROUP) as beta:
            wait_until(lambda: set(TEAMS) <= _owned(alpha, beta) or None, what="every namespace owned, team-a after a fence")
        wait_until(lambda: set(TEAMS) <= _owned(alpha) or None, what="alpha takes over what beta released")
    setup.close()

    used = recorder.by(AGENT)
    grants = rbac.grants_for(render(DEPLOY / "overlays" / "sharded"))
    missing = rbac.uncovered(grants, used)
    assert not missing, f"calls the overlay does not grant: {sorted({(m.verb, m.resource, m.namespace, m.name) for m in missing})}"
    added = {g.permission for g in SHARD_LEASE_GRANTS} | {NAMESPACES_LIST.permission}
    seen = {Permission(s.verb, s.group, s.resource, s.subresource) for s in used}
    assert added <= seen, f"granted for sharding but never called: {sorted(added - seen)}"
    fence = [s for s in used if s.verb == "delete" and s.name == member_lease_name(DEFAULT_GROUP, "ghost")]
    assert fence, "the expired member was fenced by a delete of its membership Lease"
    assert all(s.namespace == NAMESPACE for s in used if s.resource == "leases"), "Leases only in the Lease namespace"
