"""Wakeups are event-driven (SPEC §8): freed capacity, a new ready pod and a bound workspace bind a
waiting Run at once, not at the safety net's re-plan; a heartbeat that changes nothing wakes nothing.

The scheduler's safety net is pushed out to ten minutes here, so a Run bound within half a minute
was woken by the event itself, however slow the machine."""

from __future__ import annotations

import json
from datetime import datetime

from kruntimes.kubeclient.kube import Kube
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import (
    ready_pods,
    assigned,
    at,
    set_workspace_status,
    make_workspace,
    set_run_phase,
    term,
    wait_until,
    waiting,
)

RUNTIMES = "/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes"
SAFETY_NET = 600.0
"""Seconds before the scheduler re-plans a waiting Run that no event woke (30 by default)."""
WOKEN = 30.0
"""Seconds a woken Run may take to bind on a loaded machine: far below ``SAFETY_NET``."""


def parked(sched: object) -> bool:
    """The scheduler has parked the one waiting Run. Its status shows the wait message before
    that: a change that lands in between reaches the Run's cycle itself, which plans again at
    once (a wake-up, but not one counted by its source)."""
    from kruntimes.effects.runner import Scheduler

    assert isinstance(sched, Scheduler)
    return sched.metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 1


def wait_parked(sched: object, name: str) -> None:
    """Wait for :func:`parked`; on a timeout, say where the Run is in the scheduler's queue."""
    from kruntimes.effects.runner import Scheduler
    from kruntimes.pure.model.objects import RunKey

    assert isinstance(sched, Scheduler)
    try:
        wait_until(lambda: parked(sched), timeout=30, what=f"{name} parked")
    except AssertionError as error:
        queue, key = sched._queue, RunKey("default", name)
        where = "no queue" if queue is None else (
            f"waiting {queue.waiting()}, in the parking lot: {key in queue.parking}, "
            f"work queue heads {queue.work.heads()}, depth {queue.depth()}, unseen {dict(queue._unseen)}, "
            f"held {dict(queue._held)}, ledger {sched.ledger.get()}"
        )
        raise AssertionError(f"{error}: {where}") from None


def test_a_run_waiting_for_capacity_is_bound_on_its_release_not_at_the_safety_net(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    sched = server_scheduler(safety_net=SAFETY_NET)
    make_run(server_kube, "holder")
    wait_until(lambda: assigned(server_kube, "holder"), timeout=30, what="holder bound")
    make_run(server_kube, "waiter")
    wait_until(lambda: waiting(server_kube, "waiter"), timeout=30, what="waiter waits")
    wait_parked(sched, "waiter")
    before = sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"})
    set_run_phase(server_kube, "holder", "Succeeded")
    assert wait_until(lambda: assigned(server_kube, "waiter"), timeout=WOKEN, what="waiter woken by the release") == "python-0"
    after = sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"})
    assert before is not None and after is not None and after >= before + 1


def test_a_run_waiting_for_capacity_is_bound_when_a_new_pod_is_ready_not_at_the_safety_net(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    sched = server_scheduler(safety_net=SAFETY_NET)
    make_run(server_kube, "first")
    wait_until(lambda: assigned(server_kube, "first"), timeout=30, what="first bound")
    make_run(server_kube, "second")
    wait_until(lambda: waiting(server_kube, "second"), timeout=30, what="second waits")
    wait_parked(sched, "second")
    server_kube.patch(f"{RUNTIMES}/python", json.dumps({"spec": {"replicas": 2}})).unwrap()
    assert wait_until(lambda: assigned(server_kube, "second"), timeout=WOKEN, what="second woken by the new pod") == "python-1"
    woken = sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "runtime_pod"})
    assert woken is not None and woken >= 1


def test_heartbeats_that_change_nothing_wake_nothing(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=2, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 2, timeout=30, what="pods")
    sched = server_scheduler(safety_net=SAFETY_NET)
    for name in ("a", "b"):
        make_run(server_kube, name)
    for name in ("a", "b"):
        wait_until(lambda: assigned(server_kube, name), timeout=30, what=f"{name} bound")
    make_run(server_kube, "c")
    wait_until(lambda: waiting(server_kube, "c"), timeout=30, what="c waits")

    def wakeups() -> tuple[float | None, float | None]:
        return (
            sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "runtime_pod"}),
            sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"}),
        )

    # c's own Pending write changes nothing c's decision reads: it wakes nothing (one cycle, not two)
    wait_until(lambda: sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "no_pods"}), what="c's cycle")
    counted = wakeups()
    cycled: list[str] = []
    sched.results = lambda result: cycled.append(str(result.key))
    beats: dict[str, set[datetime]] = {"python-0": set(), "python-1": set()}

    def two_new_beats_each() -> bool:
        """What the scheduler's cache shows of each pod's heartbeat (every second, each one new)."""
        for name, seen in beats.items():
            pod = sched.state.get().pod("default", name)
            if pod is not None and pod.heartbeat_at is not None:
                seen.add(pod.heartbeat_at)
        return all(len(seen) >= 3 for seen in beats.values())

    wait_until(two_new_beats_each, timeout=30, what="two more heartbeats of each pod seen by the scheduler")
    assert wakeups() == counted
    assert "default/c" not in cycled  # the waiting Run was not re-planned for a heartbeat
    assert sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "no_pods"}) == 1


def test_a_run_waiting_for_its_workspace_is_bound_when_the_workspace_is_bound(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 2, timeout=30, what="pods")
    make_workspace(server_kube, "scratch", "python")
    set_workspace_status(server_kube, "scratch", "Lost")  # unavailable: the Run must wait
    server_scheduler(safety_net=SAFETY_NET)
    make_run(server_kube, "needs-ws", workspace="scratch")
    run = wait_until(lambda: waiting(server_kube, "needs-ws"), timeout=30, what="run waits for its workspace")
    assert at(run, "status", "message") == 'waiting for workspace "scratch" placement for runtime "python"'
    set_workspace_status(server_kube, "scratch", "Bound", "python-1")
    assert wait_until(lambda: assigned(server_kube, "needs-ws"), timeout=WOKEN, what="bind on the workspace's") == "python-1"


# --- the backlog regime (SPEC §8: wake only what can be placed) ----------------------------------------


def _cycles(sched: object) -> float:
    from kruntimes.effects.runner import Scheduler

    assert isinstance(sched, Scheduler)
    return sched.metrics.value("kruntimes_scheduler_sync_duration_seconds_count") or 0.0


def _finish(kube: Kube, names: list[str]) -> None:
    for name in names:
        set_run_phase(kube, name, "Succeeded")


def test_a_backlog_drains_in_creation_order_at_about_one_cycle_per_bind(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    """30 Runs created before the scheduler starts, 2 slots: the new leader plans only what
    the free slots can take, and each finished Run admits the next one in line — no cycle
    for the Runs behind it (the old rule woke every Pending Run on every release)."""
    server.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    names = [f"r{i:02d}" for i in range(30)]
    for name in names:
        make_run(server_kube, name)
    sched = server_scheduler(safety_net=SAFETY_NET)
    order: list[str] = []

    def newly_bound(want: int) -> list[str] | None:
        found = sorted(n for n in names if n not in order and assigned(server_kube, n))
        return found if len(found) >= want else None

    while len(order) < len(names):
        want = min(2, len(names) - len(order))  # both slots in use, or the last Run
        bound = wait_until(lambda: newly_bound(want), timeout=WOKEN, what="the next binds")
        order.extend(bound)
        _finish(server_kube, bound)
    assert order == names  # oldest first, every time
    cycles = _cycles(sched)
    assert cycles <= 1.2 * len(names) + 2, f"{cycles} cycles for {len(names)} binds"


def test_a_run_waiting_on_affinity_at_the_head_of_the_queue_does_not_hold_back_the_next(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, timeout=30, what="pod")
    server_scheduler(safety_net=SAFETY_NET)
    make_run(server_kube, "holder")
    wait_until(lambda: assigned(server_kube, "holder"), timeout=30, what="holder bound")
    # oldest in line: a Run that needs a partner nobody runs (and its own labels do not seed it)
    make_run(server_kube, "picky", affinity={"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="db")]}})
    make_run(server_kube, "plain")
    wait_until(lambda: waiting(server_kube, "picky") and waiting(server_kube, "plain"), timeout=30, what="both wait")
    set_run_phase(server_kube, "holder", "Succeeded")
    assert wait_until(lambda: assigned(server_kube, "plain"), timeout=WOKEN, what="plain bound") == "python-0"
    assert assigned(server_kube, "picky") is None


def test_runs_that_waited_for_pods_bind_in_line_as_slots_free_not_behind_later_runs(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    """Six Runs wait while their runtime has no pod. A pod with two slots comes up and takes the
    first two; a Run created after it finds the pod full. As the Runs finish, each freed slot
    goes to the next of the six in creation order, and the later Run comes last: none of the six
    is left to the safety net."""
    server_scheduler(safety_net=SAFETY_NET)
    created = [f"r{i}" for i in range(6)]
    for name in created:
        make_run(server_kube, name)
    wait_until(lambda: all(waiting(server_kube, name) for name in created), timeout=30, what="every Run waits for pods")
    server.add_runtime("python", replicas=1, capacity={"runs": "2"})
    order: list[str] = []

    def newly_bound(want: int) -> list[str] | None:
        found = sorted(n for n in created if n not in order and assigned(server_kube, n))
        return found if len(found) >= want else None

    order.extend(wait_until(lambda: newly_bound(2), timeout=WOKEN, what="the pod's first two binds"))
    make_run(server_kube, "z-later")  # ("z": after every r* even within the same creation second)
    created.append("z-later")
    wait_until(lambda: waiting(server_kube, "z-later"), timeout=30, what="the later Run waits for room")
    finished: set[str] = set()
    while len(order) < len(created):
        _finish(server_kube, [n for n in order if n not in finished])
        finished.update(order)
        want = min(2, len(created) - len(order))
        order.extend(wait_until(lambda: newly_bound(want), timeout=WOKEN, what=f"the next binds after {order}"))
    assert order == created
