"""Sharded mode against the dev cluster: replicas split the namespaces, each writes only for its
own, a graceful stop hands its namespaces over at once, and the new owner binds there."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from kruntimes.devcluster import DevCluster
from kruntimes.effects.kube import LEASES, Kube
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler
from kruntimes.effects.sharding import ShardMember
from kruntimes.pure.sharding import GROUP_LABEL

from .conftest import SchedulerFactory
from .helpers import assigned, at, create_run, make_pod, wait_until

NAMESPACES = ("team-a", "team-b", "team-c", "team-d")
SHARDING = LeaderElectionOptions(namespace="default", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)


def _namespaces(kube: Kube) -> None:
    for namespace in NAMESPACES:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}).unwrap()
        for i in range(2):
            make_pod(kube, f"pod-{i}", "python", namespace=namespace)


SCOPES = pytest.mark.parametrize("listed", [True, False], ids=["with-namespace-flags", "every-namespace"])
"""Replicas given the namespaces (``--namespace``: a watch of each per kind), or sharing every
namespace the API server lists (one query per kind that leaves out what a replica does not hold)."""


def _replica(start: SchedulerFactory, identity: str, listed: bool = True) -> Scheduler:
    if listed:
        return start(identity=identity, leader_election=SHARDING, shard_group="test", namespaces=NAMESPACES)
    return start(identity=identity, leader_election=SHARDING, shard_group="test")


def _universe(kube: Kube, listed: bool) -> frozenset[str]:
    """What the replicas share: the listed namespaces, or every one (the four a new cluster has too)."""
    if listed:
        return frozenset(NAMESPACES)
    items, _ = kube.list("/api/v1/namespaces").unwrap()
    return frozenset(str(at(item, "metadata", "name")) for item in items)


def _owners(kube: Kube) -> dict[str, str]:
    items, _ = kube.list(LEASES.path("default"), {"labelSelector": f"{GROUP_LABEL}=test"}).unwrap()
    out: dict[str, str] = {}
    for lease in items:
        name = str(at(lease, "metadata", "name"))
        if name.startswith("test-ns-"):
            out[name.removeprefix("test-ns-")] = str(at(lease, "spec", "holderIdentity") or "")
    return out


def _status_writers(cluster: DevCluster) -> dict[str, set[str]]:
    writers: dict[str, set[str]] = defaultdict(set)
    for write in cluster.history():
        if write.resource.plural == "runs" and write.subresource == "status":
            writers[write.namespace].add(write.user_agent)
    return writers


def _all_open(*replicas: Scheduler, universe: frozenset[str] = frozenset(NAMESPACES)) -> bool:
    owned = [r.shard.owned for r in replicas if r.shard is not None]
    return sorted(ns for group in owned for ns in group) == sorted(universe)


def _split(
    kube: Kube, start: SchedulerFactory, listed: bool = True
) -> tuple[Scheduler, Scheduler, ShardMember, ShardMember]:
    """Four namespaces with pods (eight in all without ``--namespace``), replicas alpha and beta,
    once they hold half each."""
    _namespaces(kube)
    universe = _universe(kube, listed)
    alpha, beta = _replica(start, "alpha", listed), _replica(start, "beta", listed)
    a_shard, b_shard = alpha.shard, beta.shard
    assert a_shard is not None and b_shard is not None
    # alpha may take all before beta joins; then gives beta its share (at most ceil(n / 2) each)
    half = len(universe) // 2
    assert wait_until(
        lambda: _all_open(alpha, beta, universe=universe) and len(a_shard.owned) == len(b_shard.owned) == half, timeout=15
    ), "the namespaces were not split"
    return alpha, beta, a_shard, b_shard


@SCOPES
def test_two_replicas_split_the_namespaces_and_each_binds_only_in_its_own(
    bare_cluster: DevCluster, bare_kube: Kube, bare_scheduler: SchedulerFactory, listed: bool
) -> None:
    alpha, beta, _, _ = _split(bare_kube, bare_scheduler, listed)
    for replica in (alpha, beta):  # each watches only its own namespaces
        assert replica.shard is not None
        assert {pod.namespace for pod in replica.state.get().pods()} == replica.shard.owned & set(NAMESPACES)
        # a watch per kind and namespace held with --namespace; three in all without
        assert len(replica.informers) == (3 * len(replica.shard.owned) if listed else 3)
    for namespace in NAMESPACES:
        for i in range(3):
            create_run(bare_kube, f"run-{i}", namespace=namespace)
    assert wait_until(
        lambda: all(assigned(bare_kube, f"run-{i}", ns) for ns in NAMESPACES for i in range(3)), timeout=15
    ), "Runs were not bound in every namespace"
    owners = _owners(bare_kube)
    writers = _status_writers(bare_cluster)
    for namespace in NAMESPACES:
        assert writers[namespace] == {f"kruntimes-scheduler/{owners[namespace]}"}, namespace


def test_replicas_share_one_event_budget_rather_than_each_spending_all_of_it(
    bare_cluster: DevCluster, bare_kube: Kube, bare_scheduler: SchedulerFactory
) -> None:
    """--event-burst and --event-qps are the scheduler's: two replicas write as many Events as one."""
    _namespaces(bare_kube)
    budget = {"event_burst": 4, "event_qps": 0.01}
    alpha = bare_scheduler(identity="alpha", leader_election=SHARDING, shard_group="test", namespaces=NAMESPACES, **budget)
    beta = bare_scheduler(identity="beta", leader_election=SHARDING, shard_group="test", namespaces=NAMESPACES, **budget)
    a_shard, b_shard = alpha.shard, beta.shard
    assert a_shard is not None and b_shard is not None
    assert wait_until(lambda: _all_open(alpha, beta) and len(a_shard.owned) == len(b_shard.owned) == 2, timeout=15)
    for namespace in NAMESPACES:
        for i in range(3):
            create_run(bare_kube, f"run-{i}", namespace=namespace)
    assert wait_until(lambda: all(assigned(bare_kube, f"run-{i}", ns) for ns in NAMESPACES for i in range(3)), timeout=15)

    def scheduled_events() -> int:
        return sum(
            1
            for ns in NAMESPACES
            for event in bare_kube.list(f"/api/v1/namespaces/{ns}/events", None).unwrap()[0]
            if at(event, "reason") == "Scheduled"
        )

    assert wait_until(lambda: scheduled_events() >= 2, timeout=10), "no Scheduled Event was written"
    # twelve binds; replicas that each spent the whole burst would write eight
    settle = time.monotonic() + 2.0
    while time.monotonic() < settle:
        assert scheduled_events() <= 4, "the replicas wrote more Events than one budget"
        time.sleep(0.1)


@SCOPES
def test_a_replica_that_stops_hands_its_namespaces_over_and_the_other_binds_there(
    bare_cluster: DevCluster, bare_kube: Kube, bare_scheduler: SchedulerFactory, listed: bool
) -> None:
    alpha, beta, a_shard, b_shard = _split(bare_kube, bare_scheduler, listed)
    moved = sorted(b_shard.owned & set(NAMESPACES))  # the namespaces with pods
    assert moved, "beta holds none of the namespaces with pods"
    assert beta.stop(timeout=10)
    stopped = time.monotonic()
    assert bare_kube.get(LEASES.path("default", "test-member-beta")).failure().kind == "not_found"
    assert wait_until(lambda: alpha.shard is not None and alpha.shard.owned == _universe(bare_kube, listed), timeout=10)
    # released, not expired: taken well within the 2 s lease duration
    assert time.monotonic() - stopped < SHARDING.lease_duration
    assert all(owner == "alpha" for owner in _owners(bare_kube).values())
    for namespace in moved:
        create_run(bare_kube, "late", namespace=namespace)
    assert wait_until(lambda: all(assigned(bare_kube, "late", ns) for ns in moved), timeout=10)
    writers = _status_writers(bare_cluster)
    assert all(writers[ns] == {"kruntimes-scheduler/alpha"} for ns in moved)
