"""Failures an operator must see: refused writes move a metric (and the log), leadership and waiting show."""

from __future__ import annotations

import logging

import pytest

from kruntimes.devcluster import DevCluster
from kruntimes.effects.kube import Kube
from kruntimes.effects.runner import LeaderElectionOptions

from .conftest import SchedulerFactory
from .helpers import assigned, create_run, events_for, ready_pods, wait_until, waiting


def _event_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kruntimes.effects.events" and r.levelno >= logging.WARNING]


def test_a_refused_events_api_still_binds_and_is_counted_and_warned_about_once(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(kube) == 1, what="pod")
    cluster.faults.error(403, "events", verbs=("create", "patch"), count=None)
    caplog.set_level(logging.WARNING, logger="kruntimes.effects.events")
    sched = scheduler()
    create_run(kube, "ev-1")
    create_run(kube, "ev-2")
    wait_until(lambda: assigned(kube, "ev-1") and assigned(kube, "ev-2"), what="both bound")
    assert sched.events.flush(10)
    assert sched.metrics.value("kruntimes_scheduler_event_writes_total", {"result": "failed"}) == 2
    assert sched.metrics.value("kruntimes_scheduler_event_writes_total", {"result": "written"}) == 0
    assert sched.metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "POST", "code": "4xx"}) == 2
    assert len(_event_warnings(caplog)) == 1
    assert events_for(kube, "ev-1") == []


def test_a_refused_status_write_counts_as_a_write_failure_and_a_4xx_patch(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(kube) == 1, what="pod")
    cluster.faults.error(403, "runs", subresource="status", verbs=("patch",), count=1)
    sched = scheduler()
    create_run(kube, "st-1")
    wait_until(lambda: assigned(kube, "st-1"), what="bound after the retry")
    assert sched.metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "write_failed"}) == 1
    assert sched.metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "scheduled"}) == 1
    assert (sched.metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "PATCH", "code": "4xx"}) or 0) >= 1
    assert (sched.metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "PATCH", "code": "2xx"}) or 0) >= 1


def test_the_leader_gauge_is_one_on_the_leader_only_and_waiting_runs_show_on_it(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(kube) == 1, what="pod")
    election = LeaderElectionOptions(namespace="default", lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    leader = scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(10)
    standby = scheduler(identity="beta", leader_election=election)
    assert leader.metrics.value("kruntimes_scheduler_leader") == 1
    assert standby.metrics.value("kruntimes_scheduler_leader") == 0
    create_run(kube, "w-1")
    wait_until(lambda: assigned(kube, "w-1"), what="bind")
    create_run(kube, "w-2")
    wait_until(lambda: waiting(kube, "w-2"), what="wait")
    wait_until(lambda: leader.metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 1, what="parked")
    assert standby.metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 0
    assert (leader.metrics.value("workqueue_adds_total", {"name": "runs"}) or 0) >= 2
    wait_until(lambda: leader.metrics.value("workqueue_depth", {"name": "runs"}) == 0, what="queue drained")
