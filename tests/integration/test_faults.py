"""Faults: bind conflicts release their reservation; informers survive dropped and expired watches.

On both servers: ``server.faults`` is the dev cluster's fault engine, or on the real server that of
the proxy the scheduler's requests pass through (there the test's own writes are never refused)."""

from __future__ import annotations

import logging
import time

import pytest

from kruntimes.kubeclient.kube import Kube
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import ready_pods, assigned, get_run, at, max_usage_by_pod, run_writes, wait_until, waiting


def test_a_409_on_bind_releases_the_reservation_and_a_later_cycle_binds(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    sched = server_scheduler()
    server.faults.conflict("runs", subresource="status", count=1)
    make_run(server_kube, "contested")
    try:
        pod = wait_until(lambda: assigned(server_kube, "contested"), timeout=30, what="bind after the conflict")
    except AssertionError as problem:  # say what the scheduler saw, for a failure under load
        seen = sched.state.get().pod("default", "python-0")
        raise AssertionError(
            f"{problem}; run status {get_run(server_kube, 'contested').get('status')}; pod {seen}; "
            f"reservations {len(sched.ledger.get())}; leading {sched.is_leader()}"
        ) from None
    assert pod == "python-0"
    assert sched.metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": "bind"}) == 1
    # the released reservation held nothing back: the pod's one slot went to this Run, once
    binds = [w for w in run_writes(server) if w.name == "contested" and at(w.object, "status", "phase") == "Scheduled"]
    assert len(binds) == 1
    wait_until(lambda: len(sched.ledger.get()) == 0, what="the reservation handed off to the observation")
    make_run(server_kube, "second")
    wait_until(lambda: waiting(server_kube, "second"), timeout=30, what="second waits: the pod is full")
    assert assigned(server_kube, "second") is None


def test_random_bind_conflicts_never_overcommit_a_pod(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=3, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 3, timeout=30, what="pods")
    server.faults.seed(7)
    rule = server.faults.conflict("runs", subresource="status", count=None, probability=0.3)
    sched = server_scheduler(workers=4)
    names = [f"r-{i:02d}" for i in range(20)]
    for name in names:
        make_run(server_kube, name)
    wait_until(
        lambda: sum(1 for n in names if assigned(server_kube, n)) == 6, timeout=30, what="six bound despite conflicts"
    )
    server.faults.remove(rule)
    wait_until(lambda: all(assigned(server_kube, n) or waiting(server_kube, n) for n in names), timeout=30, what="all decided")
    assert sum(1 for n in names if assigned(server_kube, n)) == 6
    assert max_usage_by_pod(server) == {"python-0": 2, "python-1": 2, "python-2": 2}
    conflicts = sched.metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": "bind"})
    assert conflicts is not None and conflicts >= 1


def test_informers_survive_a_dropped_watch_and_410_gone(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 2, timeout=30, what="pods")
    sched = server_scheduler()
    runs = next(i for i in sched.informers if i.kind == "runs")
    expiry = server.faults.expire_next_watch("runs")
    # the proxy counts a watch once the server has answered it: drop the informer's as soon as it is open
    wait_until(lambda: server.faults.drop_watches("runs") >= 1, what="the Run informer's watch dropped")
    wait_until(lambda: all(r.id != expiry for r in server.faults.rules()), what="a watch answered 410 Expired")
    make_run(server_kube, "during-relist")
    assert wait_until(lambda: assigned(server_kube, "during-relist"), timeout=30, what="bind after 410")
    assert runs.relists >= 1


def test_a_run_created_while_the_api_refuses_watches_is_scheduled_afterwards(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 2, timeout=30, what="pods")
    server_scheduler()
    outage = server.faults.error(503, "runs", verbs=("list", "watch"), count=None)

    def refused() -> bool:
        return any(r.id == outage and r.fired >= 1 for r in server.faults.rules())

    # A scheduler ready with its list may not have opened its watch yet; the outage refuses it then.
    wait_until(lambda: server.faults.drop_watches("runs") >= 1 or refused(), timeout=30, what="the Run informer's watch dropped")
    make_run(server_kube, "during-outage")
    wait_until(refused, timeout=30, what="a refused rewatch")
    assert not assigned(server_kube, "during-outage")
    server.faults.remove(outage)
    assert wait_until(lambda: assigned(server_kube, "during-outage"), timeout=30, what="bind after the outage")


def test_an_informer_on_a_quiet_watch_stops_at_once(quiet_server: Server, quiet_server_kube: Kube) -> None:
    """Stopping cuts the watch: it waits neither for the server to end it (300 s here) nor for
    its next bookmark (about a minute)."""
    from kruntimes.kubeclient.atom import Atom
    from kruntimes.effects.informer import Informer, watched_runs
    from kruntimes.pure.state.cluster import EMPTY_STATE

    informer = Informer(quiet_server_kube, watched_runs(), Atom(EMPTY_STATE), watch_timeout=300)
    informer.start()
    assert informer.wait_for_sync(30)
    wait_until(lambda: informer.resource_version, what="watching")
    time.sleep(0.1)  # let the watch request reach the server and block on the quiet stream
    informer.stop()
    assert informer.join(10.0), "the informer waited on its quiet watch"


def test_a_confirm_read_the_server_refuses_keeps_the_reservation_is_counted_and_logged_once_per_minute(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A bind whose outcome is unknown holds its slot; a read refused with 403 proves nothing, so the
    slot stays held, and the operator is told (a metric per error kind, a warning, not one per retry)."""
    caplog.set_level(logging.WARNING, logger="kruntimes.effects.scheduling")
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    sched = server_scheduler(ambiguous_hold=0.5)
    server.faults.error(500, "runs", subresource="status", verbs=("patch",), count=1, name="lost")
    refuse = server.faults.error(403, "runs", verbs=("get",), count=None, user_agent="kruntimes-scheduler/test-0")
    make_run(server_kube, "lost")
    failures = {"kind": "forbidden"}
    wait_until(
        lambda: (sched.metrics.value("kruntimes_scheduler_bind_confirm_failures_total", failures) or 0) >= 2,
        timeout=30, what="two refused confirm reads",
    )
    make_run(server_kube, "other")
    wait_until(lambda: waiting(server_kube, "other"), timeout=30,
               what="the other Run waits: the slot stays held while no read settles it")
    assert not assigned(server_kube, "lost") and not assigned(server_kube, "other")
    warned = [r for r in caplog.records if "settle a bind whose outcome is unknown" in r.getMessage()]
    assert len(warned) == 1, "one warning per minute, however often the read is retried"
    assert getattr(warned[0], "run") == "default/lost" and "403" in str(getattr(warned[0], "error"))
    server.faults.remove(refuse)
    wait_until(lambda: assigned(server_kube, "lost") or assigned(server_kube, "other"), timeout=30, what="the slot settled and bound")
