"""What a replica logs about leadership: a standby says whom it stands by for, a new leader's relist is no warning."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

import pytest

from kruntimes.effects.kube import LEASES, Kube
from kruntimes.effects.leader import DEFAULT_LEASE_NAME, micro_time
from kruntimes.effects.runner import LeaderElectionOptions

from .conftest import SchedulerFactory
from .helpers import NS, at, wait_until

RETRY = 0.2
ELECTION = LeaderElectionOptions(namespace=NS, lease_duration=2.0, renew_deadline=1.5, retry_period=RETRY)
LEASE = LEASES.path(NS, DEFAULT_LEASE_NAME)


def hold_lease(kube: Kube, holder: str, seconds: int) -> None:
    """Write the Lease as if ``holder`` held (or, with ``""``, had released) it."""
    stamp = micro_time(datetime.now(timezone.utc))
    spec = {"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": stamp, "renewTime": stamp}
    current = kube.get(LEASE).value_or(None)
    if current is None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": DEFAULT_LEASE_NAME}}
        kube.create(LEASES.path(NS), {**body, "spec": spec}).unwrap()
    else:
        kube.update(LEASE, {**current, "spec": spec}).unwrap()


def standing_by(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, str(getattr(r, "holder", "")))
        for r in caplog.records
        if r.name == "kruntimes.effects.runner" and r.getMessage() == "standing by"
    ]


def test_a_standby_says_once_whom_it_stands_by_for_and_again_only_when_the_holder_changes(
    bare_kube: Kube, bare_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    hold_lease(bare_kube, "leader-one", 3600)
    with caplog.at_level(logging.DEBUG, logger="kruntimes.effects"):
        replica = bare_scheduler(identity="replica", leader_election=ELECTION)
        wait_until(lambda: standing_by(caplog), timeout=10, what="the standby's log line")
        time.sleep(10 * RETRY)  # ten more lease reads by the elector, the holder unchanged
        assert standing_by(caplog) == [(logging.INFO, "leader-one")]

        hold_lease(bare_kube, "leader-two", 3600)
        wait_until(lambda: len(standing_by(caplog)) == 2, timeout=10, what="a line for the new holder")
        time.sleep(10 * RETRY)
        assert standing_by(caplog) == [(logging.INFO, "leader-one"), (logging.INFO, "leader-two")]
        assert not replica.is_leader()

        # the holder releases: this replica leads; its takeover relist interrupts its three open watches
        caplog.clear()
        hold_lease(bare_kube, "", 1)
        assert replica.wait_leading(15)
        assert at(bare_kube.get(LEASE).unwrap(), "spec", "holderIdentity") == "replica"
        time.sleep(5 * RETRY)
    informer = [r for r in caplog.records if r.name == "kruntimes.effects.informer"]
    assert [r for r in informer if r.levelno >= logging.WARNING] == []
    interrupted = [r for r in informer if r.getMessage() == "watch interrupted for a requested relist"]
    assert sorted(getattr(r, "resource") for r in interrupted) == ["pods", "runs", "workspaces"]
    assert all(r.levelno == logging.DEBUG for r in informer if "requested relist" in r.getMessage())
    assert standing_by(caplog) == [], "a leader does not stand by"
