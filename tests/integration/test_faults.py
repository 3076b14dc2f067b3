"""Faults: bind conflicts release their reservation; informers survive dropped and expired watches."""

from __future__ import annotations

import logging
import time

import pytest

from kruntimes.devcluster import DevCluster
from kruntimes.effects.kube import Kube

from .conftest import SchedulerFactory
from .helpers import ready_pods, assigned, get_run, at, create_run, max_usage_by_pod, run_writes, wait_until, waiting


def _pods(kube: Kube) -> int:
    return ready_pods(kube)


def test_a_409_on_bind_releases_the_reservation_and_a_later_cycle_binds(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    sched = scheduler()
    cluster.faults.conflict("runs", subresource="status", count=1)
    create_run(kube, "contested")
    try:
        pod = wait_until(lambda: assigned(kube, "contested"), what="bind after the conflict")
    except AssertionError as problem:  # say what the scheduler saw, for a failure under load
        seen = sched.state.get().pod("default", "python-0")
        raise AssertionError(
            f"{problem}; run status {get_run(kube, 'contested').get('status')}; pod {seen}; "
            f"reservations {len(sched.ledger.get())}; leading {sched.is_leader()}"
        ) from None
    assert pod == "python-0"
    assert sched.metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": "bind"}) == 1
    # the released reservation held nothing back: the pod's one slot went to this Run, once
    binds = [w for w in run_writes(cluster) if w.name == "contested" and at(w.object, "status", "phase") == "Scheduled"]
    assert len(binds) == 1
    wait_until(lambda: len(sched.ledger.get()) == 0, what="the reservation handed off to the observation")
    create_run(kube, "second")
    wait_until(lambda: waiting(kube, "second"), what="second waits: the pod is full")


def test_random_bind_conflicts_never_overcommit_a_pod(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=3, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 3, what="pods")
    cluster.faults.seed(7)
    rule = cluster.faults.conflict("runs", subresource="status", count=None, probability=0.3)
    sched = scheduler(workers=4)
    names = [f"r-{i:02d}" for i in range(20)]
    for name in names:
        create_run(kube, name)
    wait_until(
        lambda: sum(1 for n in names if assigned(kube, n)) == 6, timeout=20, what="six bound despite conflicts"
    )
    cluster.faults.remove(rule)
    wait_until(lambda: all(assigned(kube, n) or waiting(kube, n) for n in names), timeout=20, what="all decided")
    assert sum(1 for n in names if assigned(kube, n)) == 6
    assert max_usage_by_pod(cluster) == {"python-0": 2, "python-1": 2, "python-2": 2}
    conflicts = sched.metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": "bind"})
    assert conflicts is not None and conflicts >= 1


def test_informers_survive_a_dropped_watch_and_410_gone(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 2, what="pods")
    sched = scheduler()
    runs = next(i for i in sched.informers if i.kind == "runs")
    cluster.faults.expire_next_watch("runs")
    assert cluster.faults.drop_watches("runs") >= 1
    create_run(kube, "during-relist")
    assert wait_until(lambda: assigned(kube, "during-relist"), timeout=10, what="bind after 410")
    assert runs.relists >= 1


def test_a_run_created_while_the_api_refuses_watches_is_scheduled_afterwards(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 2, what="pods")
    scheduler()
    outage = cluster.faults.error(503, "runs", verbs=("list", "watch"), count=None)
    cluster.faults.drop_watches("runs")
    create_run(kube, "during-outage")
    wait_until(lambda: any(r.id == outage and r.fired >= 1 for r in cluster.faults.rules()), what="a refused rewatch")
    assert not assigned(kube, "during-outage")
    cluster.faults.remove(outage)
    assert wait_until(lambda: assigned(kube, "during-outage"), timeout=10, what="bind after the outage")


def test_an_informer_on_a_quiet_watch_stops_at_once(bare_cluster: DevCluster, bare_kube: Kube) -> None:
    from kruntimes.effects.atom import Atom
    from kruntimes.effects.informer import Informer, watched_runs
    from kruntimes.pure.state.cluster import EMPTY_STATE

    informer = Informer(bare_kube, watched_runs(), Atom(EMPTY_STATE), watch_timeout=300)
    informer.start()
    assert informer.wait_for_sync(5)
    wait_until(lambda: informer.resource_version, what="watching")
    time.sleep(0.1)  # let the watch request reach the server and block on the quiet stream
    started = time.monotonic()
    informer.stop()
    assert informer.join(2.0)
    assert time.monotonic() - started < 1.0


def test_a_confirm_read_the_server_refuses_keeps_the_reservation_is_counted_and_logged_once_per_minute(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A bind whose outcome is unknown holds its slot; a read refused with 403 proves nothing, so the
    slot stays held, and the operator is told (a metric per error kind, a warning, not one per retry)."""
    caplog.set_level(logging.WARNING, logger="kruntimes.effects.scheduling")
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    sched = scheduler(ambiguous_hold=0.5)
    cluster.faults.error(500, "runs", subresource="status", verbs=("patch",), count=1, name="lost")
    refuse = cluster.faults.error(403, "runs", verbs=("get",), count=None, user_agent="kruntimes-scheduler/test-0")
    create_run(kube, "lost")
    failures = {"kind": "forbidden"}
    wait_until(
        lambda: (sched.metrics.value("kruntimes_scheduler_bind_confirm_failures_total", failures) or 0) >= 2,
        timeout=30, what="two refused confirm reads",
    )
    create_run(kube, "other")
    wait_until(lambda: waiting(kube, "other"), what="the other Run waits: the slot stays held while no read settles it")
    assert not assigned(kube, "lost") and not assigned(kube, "other")
    warned = [r for r in caplog.records if "settle a bind whose outcome is unknown" in r.getMessage()]
    assert len(warned) == 1, "one warning per minute, however often the read is retried"
    assert getattr(warned[0], "run") == "default/lost" and "403" in str(getattr(warned[0], "error"))
    cluster.faults.remove(refuse)
    wait_until(lambda: assigned(kube, "lost") or assigned(kube, "other"), timeout=30, what="the slot settled and bound")
