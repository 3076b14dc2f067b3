"""One object never stops scheduling, and a thread that cannot go on takes its replica out.

An unexpected exception while one Run is decoded (here a decoder made to raise for chosen Runs,
as Python's own ``int()`` once did on a 5,000-digit duration) or planned skips that Run:
every other Run is still scheduled, the metric counts it and the log names its key and no more.
A thread that dies outside such handling fails both probes and closes the write gate, and the
stopped replica's Lease goes to the standby.

On both servers; on the real one the replicas elect on the Lease deploy/ RBAC grants.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from returns.result import Result

import kruntimes.effects.informer as informer_module
from kruntimes.kubeclient.kube import LEASES, Kube, WatchEvent
from kruntimes.kubeclient.leader import Attempt, LeaderElector
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler
from kruntimes.effects.scheduling import CycleResult, SchedulingCycle
from kruntimes.pure.model.objects import Object, RunKey
from kruntimes.pure.readers.kube import DecodeError, decode_run
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import NS, assigned, at, http_get, phase_of, ready_pods, wait_until
from .servers import NAMESPACE, election_namespace, status_writers

MARKER = "marker-from-the-hostile-object"
"""A label value of the hostile Runs, quoted by the injected exception: it must reach no log."""


def _name(raw: object) -> object:
    return at(raw, "metadata", "name") if isinstance(raw, dict) else None


def _decoder_raising_for(*names: str) -> Callable[[object], Result[Object, DecodeError]]:
    def decode(raw: object) -> Result[Object, DecodeError]:
        if _name(raw) in names:
            raise ValueError(f"Exceeds the limit (4300 digits) for integer string conversion: {at(raw, 'metadata', 'labels')}")
        return decode_run(raw)

    return decode


def _skipped(sched: Scheduler, thread: str, stage: str) -> float:
    return sched.metrics.value("kruntimes_scheduler_skipped_objects_total", {"thread": thread, "stage": stage}) or 0.0


def test_a_run_whose_decoding_raises_is_skipped_and_every_other_run_is_still_scheduled(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One hostile Run exists before the scheduler starts, so its first list meets it (as a
    restart after a crash would); another arrives on the watch."""
    monkeypatch.setattr(informer_module, "decode_run", _decoder_raising_for("hostile-listed", "hostile-watched"))
    server.add_runtime("python", replicas=1, capacity={"runs": "10"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    make_run(server_kube, "hostile-listed", labels={"k": MARKER})
    caplog.set_level(logging.ERROR, logger="kruntimes.kubeclient.threads")
    sched = server_scheduler()  # ready means its caches synced: the first list went past the hostile Run
    make_run(server_kube, "hostile-watched", labels={"k": MARKER})
    ordinary = [f"ordinary-{i}" for i in range(3)]
    for name in ordinary:
        make_run(server_kube, name)
    wait_until(lambda: all(assigned(server_kube, name) for name in ordinary), timeout=30, what="every other Run bound")

    assert phase_of(server_kube, "hostile-listed") == "" and phase_of(server_kube, "hostile-watched") == "", "skipped, never written"
    assert _skipped(sched, "informer-runs", "decode") >= 2
    keys = {getattr(record, "object", None) for record in caplog.records}
    assert {f"{NS}/hostile-listed", f"{NS}/hostile-watched"} <= keys
    assert MARKER not in caplog.text + "".join(str(record.__dict__) for record in caplog.records)
    assert sched.failure is None and sched.healthy() and sched.ready()
    assert sched.health_url is not None
    assert http_get(sched.health_url + "/healthz")[0] == 200 and http_get(sched.health_url + "/readyz")[0] == 200
    assert http_get(sched.health_url + "/livez")[0] == 200


def test_a_cycle_that_raises_for_one_run_backs_that_run_off_and_the_workers_go_on(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    planned = SchedulingCycle.run

    def run(self: SchedulingCycle, key: RunKey) -> CycleResult:
        if key.name == "cursed":
            raise RuntimeError("a planner bug this Run meets")
        return planned(self, key)

    monkeypatch.setattr(SchedulingCycle, "run", run)
    server.add_runtime("python", replicas=1, capacity={"runs": "10"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    caplog.set_level(logging.ERROR, logger="kruntimes.kubeclient.threads")
    sched = server_scheduler(workers=1)  # one worker: were it to die, nothing after the cursed Run would bind
    make_run(server_kube, "cursed")
    wait_until(lambda: _skipped(sched, "worker", "cycle") >= 1, timeout=30, what="the failed cycle counted")
    others = [f"after-{i}" for i in range(3)]
    for name in others:
        make_run(server_kube, name)
    wait_until(lambda: all(assigned(server_kube, name) for name in others), timeout=30, what="the Runs after it bound")
    assert f"{NS}/cursed" in {getattr(record, "object", None) for record in caplog.records}
    assert sched.failure is None and sched.healthy()


def _holder(kube: Kube, namespace: str) -> str:
    lease = kube.get(LEASES.path(namespace, "kruntimes-scheduler")).unwrap()
    return str(at(lease, "spec", "holderIdentity") or "")


def test_a_thread_that_cannot_continue_fails_both_probes_writes_nothing_and_hands_its_lease_on(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader's Run informer dies of a bug in its watch loop (not in one object's handling):
    /healthz (and /livez) and /readyz answer 503, the leader writes nothing more, and once stopped its
    Lease is free for the standby, which binds what the dead informer never saw."""
    server.add_runtime("python", replicas=1, capacity={"runs": "10"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    # a Lease far longer than the wait below: the standby gets it because the stop released it
    election = LeaderElectionOptions(namespace=election_namespace(server), lease_duration=30.0, renew_deadline=20.0, retry_period=0.2)
    leader = server_scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(10)
    standby = server_scheduler(identity="beta", leader_election=election)
    runs_informer = next(informer for informer in leader.informers if informer.kind == "runs")
    handle = runs_informer.handle

    def broken(event: WatchEvent) -> None:
        if _name(event.object) == "trigger":
            raise RuntimeError("a bug in the watch loop itself")
        handle(event)

    monkeypatch.setattr(runs_informer, "handle", broken)
    url = leader.health_url
    assert url is not None
    make_run(server_kube, "trigger")
    wait_until(lambda: http_get(url + "/readyz")[0] == 503, timeout=30, what="/readyz failing")
    assert http_get(url + "/healthz")[0] == 503
    assert http_get(url + "/livez")[0] == 503  # the liveness name newer components use: the same answer
    assert leader.failure == "informer-runs" and not leader.ready() and not leader.healthy()
    assert leader.metrics.value("kruntimes_scheduler_leader") == 0, "the write gate closed"

    assert leader.stop(timeout=10)
    wait_until(lambda: _holder(server_kube, election.namespace) == "beta", timeout=15, what="the standby took the released Lease")
    make_run(server_kube, "after")
    wait_until(lambda: assigned(server_kube, "trigger") and assigned(server_kube, "after"), timeout=30, what="the standby binds both")
    assert set().union(*status_writers(server, [(NAMESPACE, "trigger"), (NAMESPACE, "after")]).values()) == {"kruntimes-scheduler/beta"}
    assert standby.failure is None


def test_a_leader_whose_election_loop_dies_releases_its_lease_when_stopped(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread that renews the Lease is the one that failed, so nobody renews it and nobody
    would release it: stopping the replica releases it, and the standby takes over long before
    the 30 s Lease could expire."""
    election = LeaderElectionOptions(namespace=election_namespace(server), lease_duration=30.0, renew_deadline=20.0, retry_period=0.2)
    leader = server_scheduler(identity="alpha", leader_election=election)
    assert leader.wait_leading(10)
    standby = server_scheduler(identity="beta", leader_election=election)
    renew = LeaderElector.try_acquire_or_renew

    def broken(self: LeaderElector) -> Attempt:
        if self._config.identity == "alpha":
            raise RuntimeError("a bug in the renewal")
        return renew(self)

    monkeypatch.setattr(LeaderElector, "try_acquire_or_renew", broken)
    url = leader.health_url
    assert url is not None
    wait_until(lambda: http_get(url + "/readyz")[0] == 503, timeout=30, what="/readyz failing")
    assert http_get(url + "/healthz")[0] == 503 and leader.failure == "control"
    assert leader.stop(timeout=10)
    wait_until(lambda: _holder(server_kube, election.namespace) == "beta", timeout=15, what="the standby took the released Lease")
    assert standby.wait_leading(10)
