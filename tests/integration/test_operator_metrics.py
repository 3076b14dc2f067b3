"""Failures an operator must see: refused writes move a metric (and the log), leadership and waiting show.

On both servers: the refusals are ``server.faults`` (on the real server, the proxy in front of the scheduler)."""

from __future__ import annotations

import logging

import pytest

from kruntimes.kubeclient.kube import Kube
from kruntimes.effects.runner import LeaderElectionOptions
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import assigned, events_for, ready_pods, wait_until, waiting
from .servers import election_namespace


def _event_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kruntimes.kubeclient.events" and r.levelno >= logging.WARNING]


def test_a_refused_events_api_still_binds_and_is_counted_and_warned_about_once(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    server.faults.error(403, "events", verbs=("create", "patch"), count=None)
    caplog.set_level(logging.WARNING, logger="kruntimes.kubeclient.events")
    sched = server_scheduler()
    make_run(server_kube, "ev-1")
    make_run(server_kube, "ev-2")
    wait_until(lambda: assigned(server_kube, "ev-1") and assigned(server_kube, "ev-2"), timeout=30, what="both bound")
    # a Run's Event is queued once the scheduler has its bind's answer, which may be after the test
    # reads the bound Run: a flush now could find the second one not queued yet
    wait_until(lambda: sched.metrics.value("kruntimes_scheduler_event_writes_total", {"result": "failed"}) == 2,
               timeout=30, what="both Events refused")
    assert sched.events.flush(10)
    assert sched.metrics.value("kruntimes_scheduler_event_writes_total", {"result": "failed"}) == 2
    assert sched.metrics.value("kruntimes_scheduler_event_writes_total", {"result": "written"}) == 0
    assert sched.metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "POST", "code": "4xx"}) == 2
    assert len(_event_warnings(caplog)) == 1
    assert events_for(server_kube, "ev-1") == []


def test_a_refused_status_write_counts_as_a_write_failure_and_a_4xx_patch(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    server.faults.error(403, "runs", subresource="status", verbs=("patch",), count=1)
    sched = server_scheduler()
    make_run(server_kube, "st-1")
    wait_until(lambda: assigned(server_kube, "st-1"), timeout=30, what="bound after the retry")
    # the worker counts its cycle once the patch's answer is back, which may be after this test sees the bind
    wait_until(
        lambda: sched.metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "scheduled"}) == 1,
        timeout=30,
        what="the bind counted",
    )
    assert sched.metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "write_failed"}) == 1
    assert (sched.metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "PATCH", "code": "4xx"}) or 0) >= 1
    assert (sched.metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "PATCH", "code": "2xx"}) or 0) >= 1


def test_the_leader_gauge_is_one_on_the_leader_only_and_waiting_runs_show_on_it(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    election = LeaderElectionOptions(namespace=election_namespace(server), lease_duration=15.0, renew_deadline=10.0, retry_period=0.2)
    leader = server_scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(10)
    standby = server_scheduler(identity="beta", leader_election=election)
    assert leader.metrics.value("kruntimes_scheduler_leader") == 1
    assert standby.metrics.value("kruntimes_scheduler_leader") == 0
    make_run(server_kube, "w-1")
    wait_until(lambda: assigned(server_kube, "w-1"), timeout=30, what="bind")
    make_run(server_kube, "w-2")
    wait_until(lambda: waiting(server_kube, "w-2"), timeout=30, what="wait")
    wait_until(lambda: leader.metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 1, timeout=30, what="parked")
    assert standby.metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 0
    assert (leader.metrics.value("workqueue_adds_total", {"name": "runs"}) or 0) >= 2
    wait_until(lambda: leader.metrics.value("workqueue_depth", {"name": "runs"}) == 0, timeout=30, what="queue drained")
