"""A bind write held in flight while the world changes under it, on both servers.

One Run's status patch is delayed before it reaches the store (a latency fault: the dev
cluster's, or on the real server the fault proxy's, before forwarding); meanwhile the Lease
is taken by another identity, or the Run is deleted. What must hold: a replica that lost its Lease writes nothing
more, stops its workers, forgets its reservations and campaigns again; a bind
whose Run vanished ends ``gone`` and leaks no capacity.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone


from kruntimes.devcluster.faults import FaultRule
from kruntimes.kubeclient.events import EVENTS
from kruntimes.kubeclient.kube import LEASES, RUNS, Kube
from kruntimes.kubeclient.leader import DEFAULT_LEASE_NAME, micro_time
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler
from kruntimes.effects.scheduling import CycleResult
from kruntimes.pure.model.objects import RunKey
from tests.builders import make_pod, make_run

from .conftest import SchedulerFactory, Server
from .helpers import NS, assigned, at, get_run, run_writes, wait_until
from .servers import RealCluster, election_namespace

ONE_BEAT = timedelta(minutes=30)
"""Pods written by hand beat once: a window this long keeps them fresh however slow the machine."""
HELD_FOR = 8.0
"""Seconds the bind write is held: far longer than losing the Lease takes
(one 0.2 s retry, then at most the 1.5 s renew deadline for the workers to stop)."""


def election(server: Server) -> LeaderElectionOptions:
    return LeaderElectionOptions(namespace=election_namespace(server), lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)


def hold_bind(server: Server, run: str, seconds: float = HELD_FOR) -> int:
    """Delay the next status patch of ``run`` by ``seconds``."""
    rule = FaultRule(
        "latency", frozenset({"patch"}), frozenset({"runs"}), "status", NS, run, remaining=1, latency=seconds
    )
    return server.faults.add(rule)


def fired(server: Server, rule: int) -> bool:
    """A one-shot rule leaves the list once a request matched it (the request is now in flight)."""
    return all(r.id != rule for r in server.faults.rules())


def collect(scheduler: Scheduler) -> list[CycleResult]:
    results: list[CycleResult] = []
    lock = threading.Lock()

    def hook(result: CycleResult) -> None:
        with lock:
            results.append(result)

    scheduler.results = hook
    return results


def results_for(results: list[CycleResult], name: str) -> list[CycleResult]:
    return [r for r in list(results) if r.key.name == name]


def status_writes(server: Server, name: str, agent: str) -> int:
    """The status writes of Run ``name`` the server committed for the client ``agent``."""
    if isinstance(server, RealCluster):
        return sum(1 for w in server.accepted_writes()
                   if (w.resource, w.subresource, w.name, w.user_agent) == ("runs", "status", name, agent))
    return sum(1 for w in run_writes(server) if w.name == name and w.subresource == "status" and w.user_agent == agent)


def set_lease_holder(server: Server, kube: Kube, holder: str, seconds: int) -> None:
    path = LEASES.path(election_namespace(server), DEFAULT_LEASE_NAME)
    lease = kube.get(path).unwrap()
    stamp = micro_time(datetime.now(timezone.utc))
    current = lease.get("spec")
    spec: dict[str, object] = dict(current) if isinstance(current, Mapping) else {}
    spec.update({"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": stamp, "renewTime": stamp})
    kube.update(path, {**lease, "spec": spec}).unwrap()


def worker_threads(term: int) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"worker-{term}-") and t.is_alive()]


def scheduled_events(kube: Kube, run: str) -> list[object]:
    items, _ = kube.list(EVENTS.path(NS)).unwrap()
    return [e for e in items if at(e, "involvedObject", "name") == run and at(e, "reason") == "Scheduled"]


def test_a_replica_that_loses_its_lease_mid_bind_writes_nothing_more_forgets_its_reservations_and_campaigns_again(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory
) -> None:
    make_pod(bare_server_kube, "p1", "python", capacity={"runs": "2"})
    alpha = bare_server_scheduler(identity="alpha", leader_election=election(bare_server), heartbeat_stale_after=ONE_BEAT)
    assert alpha.wait_leading(15)
    agent = "kruntimes-scheduler/alpha"
    results = collect(alpha)

    rule = hold_bind(bare_server, "held")
    make_run(bare_server_kube, "held")
    wait_until(lambda: fired(bare_server, rule) and len(alpha.ledger.get()) == 1, timeout=15, what="the bind in flight")

    set_lease_holder(bare_server, bare_server_kube, "intruder", seconds=3600)
    wait_until(lambda: not alpha.is_leader(), timeout=15, what="alpha notices the lease is gone")
    # the term ends while the write is still held: the reservation goes with the term, not
    # because the informer saw the bind
    wait_until(lambda: len(alpha.ledger.get()) == 0, timeout=15, what="the ledger reset")
    assert at(get_run(bare_server_kube, "held"), "status", "assignedPod") is None, "the held write had not landed yet"
    wait_until(lambda: not worker_threads(1), timeout=HELD_FOR + 15, what="the first term's workers to end")

    # the write that was already in the server lands; the cycle carrying it writes nothing more
    in_flight = wait_until(lambda: results_for(results, "held"), timeout=HELD_FOR + 15, what="the in-flight cycle")[0]
    assert in_flight.outcome == "scheduled"
    assert status_writes(bare_server, "held", agent) == 1
    assert len(alpha.ledger.get()) == 0

    # a standby now: a new Run is left alone while the intruder holds the Lease
    make_run(bare_server_kube, "after")
    wait_until(lambda: alpha.state.get().run(RunKey(NS, "after")), timeout=15, what="alpha's cache sees the new Run")
    assert alpha.wait_leading(1.0) is False
    assert status_writes(bare_server, "after", agent) == 0
    wait_until(alpha.ready, timeout=15, what="a standby that knows the leader is ready to take over")

    # it campaigns again: once the Lease is free it leads, and schedules the new Run
    set_lease_holder(bare_server, bare_server_kube, "", seconds=1)
    assert alpha.wait_leading(20)
    assert wait_until(lambda: assigned(bare_server_kube, "after"), timeout=15, what="the new term binds the new Run") == "p1"
    assert status_writes(bare_server, "held", agent) == 1

    assert alpha.events.flush(10)
    assert scheduled_events(bare_server_kube, "held") == []  # the term that bound it ended first: its Event is dropped


def test_a_run_deleted_while_its_bind_is_in_flight_ends_gone_and_leaks_no_capacity(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory
) -> None:
    make_pod(bare_server_kube, "p1", "python", capacity={"runs": "1"})
    scheduler = bare_server_scheduler(identity="solo", heartbeat_stale_after=ONE_BEAT)
    assert scheduler.wait_leading(15)
    results = collect(scheduler)

    rule = hold_bind(bare_server, "doomed", seconds=3.0)  # the delete below is one quick request
    make_run(bare_server_kube, "doomed")
    wait_until(lambda: fired(bare_server, rule) and len(scheduler.ledger.get()) == 1, timeout=15, what="the bind in flight")
    bare_server_kube.request("DELETE", RUNS.path(NS, "doomed")).unwrap()

    ended, *later = wait_until(lambda: results_for(results, "doomed"), timeout=HELD_FOR + 15, what="the held cycle's end")
    assert ended.outcome == "gone"
    # the deletion may have queued the key again meanwhile: such a cycle finds nothing to do
    assert all(r.outcome == "skipped" and r.step is not None and r.step.write is None for r in later)
    wait_until(lambda: len(scheduler.ledger.get()) == 0, timeout=15, what="the reservation released")

    # the pod's one slot is free for the next Run
    make_run(bare_server_kube, "later")
    assert wait_until(lambda: assigned(bare_server_kube, "later"), timeout=15, what="the next Run bound") == "p1"
    wait_until(lambda: len(scheduler.ledger.get()) == 0, timeout=15, what="the bind observed and its reservation handed off")

