"""Sharded mode: replicas split the namespaces, each writes only for its own, a graceful stop hands
its namespaces over at once, and the new owner binds there.

On both servers; the real one has deploy/overlays/sharded's RBAC applied (the Leases of a shard
group by any name in the scheduler's namespace, and the list of namespaces).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kruntimes.kubeclient.kube import LEASES, Kube
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler
from kruntimes.effects.sharding import ShardMember
from kruntimes.pure.sharding import GROUP_LABEL
from tests.controlplane import session as controlplane
from tests.controlplane.server import ControlPlane
from tests.realserver.support import REPO, apply_rendered
from tests.builders import make_pod, make_run

from .conftest import SchedulerFactory, Server
from .helpers import assigned, at, wait_until
from .servers import election_namespace, status_writers

NAMESPACES = ("team-a", "team-b", "team-c", "team-d")
LEASE_DURATION = 30.0
"""Far longer than any wait here: every handoff these tests see is a release, never an expiry."""


@pytest.fixture(scope="module")
def real_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own with deploy/ and the RBAC of its sharded overlay."""
    for plane in controlplane.private(tmp_path_factory.mktemp("controlplane")):
        apply_rendered(plane, REPO / "deploy")
        apply_rendered(plane, REPO / "deploy" / "overlays" / "sharded")
        yield plane


def _sharding(server: Server) -> LeaderElectionOptions:
    return LeaderElectionOptions(namespace=election_namespace(server), lease_duration=LEASE_DURATION, renew_deadline=20.0, retry_period=0.3)


def _namespaces(server: Server, kube: Kube) -> None:
    """The four namespaces, two pods in each, and no shard Lease yet. On the real server an earlier
    test's namespaces are still there (without a controller manager a namespace never finishes
    deleting): what they hold, and the Leases, are deleted instead."""
    kube.request("DELETE", LEASES.path(election_namespace(server)))
    for namespace in NAMESPACES:
        created = kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        assert created.value_or(None) is not None or created.failure().kind == "already_exists", created
        for collection in (f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", f"/api/v1/namespaces/{namespace}/pods",
                           f"/api/v1/namespaces/{namespace}/events"):
            kube.request("DELETE", collection)
        for i in range(2):
            make_pod(kube, f"pod-{i}", "python", namespace=namespace)


SCOPES = pytest.mark.parametrize("listed", [True, False], ids=["with-namespace-flags", "every-namespace"])
"""Replicas given the namespaces (``--namespace``: a watch of each per kind), or sharing every
namespace the API server lists (one query per kind that leaves out what a replica does not hold)."""


def _replica(server: Server, start: SchedulerFactory, identity: str, listed: bool = True) -> Scheduler:
    if listed:
        return start(identity=identity, leader_election=_sharding(server), shard_group="test", namespaces=NAMESPACES)
    return start(identity=identity, leader_election=_sharding(server), shard_group="test")


def _universe(kube: Kube, listed: bool) -> frozenset[str]:
    """What the replicas share: the listed namespaces, or every one (those a new cluster has too,
    and on the real server deploy/'s ``kruntimes-system``)."""
    if listed:
        return frozenset(NAMESPACES)
    items, _ = kube.list("/api/v1/namespaces").unwrap()
    return frozenset(str(at(item, "metadata", "name")) for item in items)


def _owners(server: Server, kube: Kube) -> dict[str, str]:
    items, _ = kube.list(LEASES.path(election_namespace(server)), {"labelSelector": f"{GROUP_LABEL}=test"}).unwrap()
    out: dict[str, str] = {}
    for lease in items:
        name = str(at(lease, "metadata", "name"))
        if name.startswith("test-ns-"):
            out[name.removeprefix("test-ns-")] = str(at(lease, "spec", "holderIdentity") or "")
    return out


def _all_open(*replicas: Scheduler, universe: frozenset[str] = frozenset(NAMESPACES)) -> bool:
    owned = [r.shard.owned for r in replicas if r.shard is not None]
    return sorted(ns for group in owned for ns in group) == sorted(universe)


def _split(
    server: Server, kube: Kube, start: SchedulerFactory, listed: bool = True
) -> tuple[Scheduler, Scheduler, ShardMember, ShardMember]:
    """Four namespaces with pods (eight or nine in all without ``--namespace``), replicas alpha and
    beta, once they hold half each."""
    _namespaces(server, kube)
    universe = _universe(kube, listed)
    alpha, beta = _replica(server, start, "alpha", listed), _replica(server, start, "beta", listed)
    a_shard, b_shard = alpha.shard, beta.shard
    assert a_shard is not None and b_shard is not None
    # alpha may take all before beta joins; then gives beta its share (at most ceil(n / 2) each)
    halves = sorted((len(universe) // 2, len(universe) - len(universe) // 2))
    assert wait_until(
        lambda: _all_open(alpha, beta, universe=universe) and sorted((len(a_shard.owned), len(b_shard.owned))) == halves, timeout=30
    ), "the namespaces were not split"
    return alpha, beta, a_shard, b_shard


@SCOPES
def test_two_replicas_split_the_namespaces_and_each_binds_only_in_its_own(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory, listed: bool
) -> None:
    bare_kube = bare_server_kube
    alpha, beta, _, _ = _split(bare_server, bare_kube, bare_server_scheduler, listed)
    for replica in (alpha, beta):  # each watches only its own namespaces
        assert replica.shard is not None
        assert {pod.namespace for pod in replica.state.get().pods()} == replica.shard.owned & set(NAMESPACES)
        # a watch per kind and namespace held with --namespace; three in all without
        assert len(replica.informers) == (3 * len(replica.shard.owned) if listed else 3)
    for namespace in NAMESPACES:
        for i in range(3):
            make_run(bare_kube, f"run-{i}", namespace=namespace)
    assert wait_until(
        lambda: all(assigned(bare_kube, f"run-{i}", ns) for ns in NAMESPACES for i in range(3)), timeout=30
    ), "Runs were not bound in every namespace"
    owners = _owners(bare_server, bare_kube)
    writers = status_writers(bare_server, [(ns, f"run-{i}") for ns in NAMESPACES for i in range(3)])
    for namespace in NAMESPACES:
        assert writers.get(namespace) == {f"kruntimes-scheduler/{owners[namespace]}"}, namespace


def test_replicas_share_one_event_budget_rather_than_each_spending_all_of_it(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory
) -> None:
    """--event-burst and --event-qps are the scheduler's: two replicas write as many Events as one."""
    bare_kube = bare_server_kube
    _namespaces(bare_server, bare_kube)
    budget = {"event_burst": 4, "event_qps": 0.01}
    sharding = _sharding(bare_server)
    alpha = bare_server_scheduler(identity="alpha", leader_election=sharding, shard_group="test", namespaces=NAMESPACES, **budget)
    beta = bare_server_scheduler(identity="beta", leader_election=sharding, shard_group="test", namespaces=NAMESPACES, **budget)
    a_shard, b_shard = alpha.shard, beta.shard
    assert a_shard is not None and b_shard is not None
    assert wait_until(lambda: _all_open(alpha, beta) and len(a_shard.owned) == len(b_shard.owned) == 2, timeout=30)
    for namespace in NAMESPACES:
        for i in range(3):
            make_run(bare_kube, f"run-{i}", namespace=namespace)
    assert wait_until(lambda: all(assigned(bare_kube, f"run-{i}", ns) for ns in NAMESPACES for i in range(3)), timeout=30)

    def scheduled_events() -> int:
        return sum(
            1
            for ns in NAMESPACES
            for event in bare_kube.list(f"/api/v1/namespaces/{ns}/events", None).unwrap()[0]
            if at(event, "reason") == "Scheduled"
        )

    assert wait_until(lambda: scheduled_events() >= 2, timeout=30), "no Scheduled Event was written"
    # twelve binds; replicas that each spent the whole burst would write eight
    settle = time.monotonic() + 2.0
    while time.monotonic() < settle:
        assert scheduled_events() <= 4, "the replicas wrote more Events than one budget"
        time.sleep(0.1)


@SCOPES
def test_a_replica_that_stops_hands_its_namespaces_over_and_the_other_binds_there(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory, listed: bool
) -> None:
    bare_kube = bare_server_kube
    alpha, beta, a_shard, b_shard = _split(bare_server, bare_kube, bare_server_scheduler, listed)
    moved = sorted(b_shard.owned & set(NAMESPACES))  # the namespaces with pods
    assert moved, "beta holds none of the namespaces with pods"
    assert beta.stop(timeout=10)
    assert bare_kube.get(LEASES.path(election_namespace(bare_server), "test-member-beta")).failure().kind == "not_found"
    # released, not expired: taken within half the lease duration
    assert wait_until(lambda: alpha.shard is not None and alpha.shard.owned == _universe(bare_kube, listed),
                      timeout=LEASE_DURATION / 2), "beta's namespaces were not handed over before its Leases could expire"
    assert all(owner == "alpha" for owner in _owners(bare_server, bare_kube).values())
    for namespace in moved:
        make_run(bare_kube, "late", namespace=namespace)
    assert wait_until(lambda: all(assigned(bare_kube, "late", ns) for ns in moved), timeout=30)
    writers = status_writers(bare_server, [(ns, "late") for ns in moved])
    assert all(writers.get(ns) == {"kruntimes-scheduler/alpha"} for ns in moved)
