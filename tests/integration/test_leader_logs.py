"""What a replica logs about leadership: a standby says whom it stands by for, a new leader's relist is no warning.

On both servers; on the real one the replica elects on the Lease deploy/ RBAC grants it, which the
test writes as the other replicas would.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

import pytest

from kruntimes.kubeclient.kube import LEASES, Kube
from kruntimes.kubeclient.leader import DEFAULT_LEASE_NAME, micro_time
from kruntimes.effects.runner import LeaderElectionOptions

from .conftest import SchedulerFactory, Server
from .helpers import at, wait_until
from .servers import election_namespace

RETRY = 0.2


def hold_lease(kube: Kube, namespace: str, holder: str, seconds: int) -> None:
    """Write the Lease as if ``holder`` held (or, with ``""``, had released) it."""
    stamp = micro_time(datetime.now(timezone.utc))
    spec = {"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": stamp, "renewTime": stamp}
    current = kube.get(LEASES.path(namespace, DEFAULT_LEASE_NAME)).value_or(None)
    if current is None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": DEFAULT_LEASE_NAME}}
        kube.create(LEASES.path(namespace), {**body, "spec": spec}).unwrap()
    else:
        kube.update(LEASES.path(namespace, DEFAULT_LEASE_NAME), {**current, "spec": spec}).unwrap()


def standing_by(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, str(getattr(r, "holder", "")))
        for r in caplog.records
        if r.name == "kruntimes.effects.runner" and r.getMessage() == "standing by"
    ]


def test_a_standby_says_once_whom_it_stands_by_for_and_again_only_when_the_holder_changes(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    kube, namespace = bare_server_kube, election_namespace(bare_server)
    election = LeaderElectionOptions(namespace=namespace, lease_duration=2.0, renew_deadline=1.5, retry_period=RETRY)
    hold_lease(kube, namespace, "leader-one", 3600)
    with caplog.at_level(logging.DEBUG, logger="kruntimes.effects"):
        replica = bare_server_scheduler(identity="replica", leader_election=election)
        wait_until(lambda: standing_by(caplog), timeout=30, what="the standby's log line")
        time.sleep(10 * RETRY)  # ten more lease reads by the elector, the holder unchanged
        assert standing_by(caplog) == [(logging.INFO, "leader-one")]

        hold_lease(kube, namespace, "leader-two", 3600)
        wait_until(lambda: len(standing_by(caplog)) == 2, timeout=30, what="a line for the new holder")
        time.sleep(10 * RETRY)
        assert standing_by(caplog) == [(logging.INFO, "leader-one"), (logging.INFO, "leader-two")]
        assert not replica.is_leader()

        # the holder releases: this replica leads; its takeover relist interrupts its three open watches
        caplog.clear()
        hold_lease(kube, namespace, "", 1)
        assert replica.wait_leading(30)
        assert at(kube.get(LEASES.path(namespace, DEFAULT_LEASE_NAME)).unwrap(), "spec", "holderIdentity") == "replica"
        time.sleep(5 * RETRY)
    informer = [r for r in caplog.records if r.name == "kruntimes.effects.informer"]
    assert [r for r in informer if r.levelno >= logging.WARNING] == []
    interrupted = [r for r in informer if r.getMessage() == "watch interrupted for a requested relist"]
    assert sorted(getattr(r, "resource") for r in interrupted) == ["pods", "runs", "workspaces"]
    assert all(r.levelno == logging.DEBUG for r in informer if "requested relist" in r.getMessage())
    assert standing_by(caplog) == [], "a leader does not stand by"
