"""Wakeups are event-driven (SPEC §8): freed capacity and a new ready pod bind a waiting Run
within a second, not at the 30 s fallback; a heartbeat that changes nothing wakes nothing."""

from __future__ import annotations

import json


from kruntimes.devcluster import DevCluster
from kruntimes.effects.kube import Kube

from .conftest import SchedulerFactory
from .helpers import (
    ready_pods,
    assigned,
    at,
    set_workspace_status,
    create_run,
    make_workspace,
    run_writes,
    set_run_phase,
    term,
    wait_until,
    waiting,
)

RUNTIMES = "/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes"


def _bind_time(cluster: DevCluster, run: str) -> float:
    for write in run_writes(cluster):
        if write.name == run and at(write.object, "status", "phase") == "Scheduled":
            return float(write.time)
    raise AssertionError(f"{run} was never bound")


def _pods(kube: Kube) -> int:
    return ready_pods(kube)


def test_a_run_waiting_for_capacity_is_bound_within_a_second_of_its_release(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    sched = scheduler()
    create_run(kube, "holder")
    wait_until(lambda: assigned(kube, "holder"), what="holder bound")
    create_run(kube, "waiter")
    wait_until(lambda: waiting(kube, "waiter"), what="waiter waits")
    before = sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"})
    finished = set_run_phase(kube, "holder", "Succeeded")
    released_at = next(
        float(w.time) for w in run_writes(cluster)
        if w.name == "holder" and at(w.object, "metadata", "resourceVersion") == at(finished, "metadata", "resourceVersion")
    )
    assert wait_until(lambda: assigned(kube, "waiter"), timeout=5, what="waiter bound") == "python-0"
    assert _bind_time(cluster, "waiter") - released_at < 1.0
    after = sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"})
    assert before is not None and after is not None and after >= before + 1


def test_a_run_waiting_for_capacity_is_bound_within_a_second_of_a_new_ready_pod(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    sched = scheduler()
    create_run(kube, "first")
    wait_until(lambda: assigned(kube, "first"), what="first bound")
    create_run(kube, "second")
    wait_until(lambda: waiting(kube, "second"), what="second waits")
    kube.patch(f"{RUNTIMES}/python", json.dumps({"spec": {"replicas": 2}})).unwrap()
    assert wait_until(lambda: assigned(kube, "second"), timeout=5, what="second bound") == "python-1"
    ready_at = min(
        float(w.time) for w in cluster.history()
        if w.resource.plural == "pods" and w.name == "python-1" and at(w.object, "status", "phase") == "Running"
    )
    assert _bind_time(cluster, "second") - ready_at < 1.0
    woken = sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "runtime_pod"})
    assert woken is not None and woken >= 1


def test_heartbeats_that_change_nothing_wake_nothing(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=2, capacity={"runs": "1"})
    wait_until(lambda: _pods(kube) == 2, what="pods")
    sched = scheduler()
    for name in ("a", "b"):
        create_run(kube, name)
    for name in ("a", "b"):
        wait_until(lambda: assigned(kube, name), what=f"{name} bound")
    create_run(kube, "c")
    wait_until(lambda: waiting(kube, "c"), what="c waits")

    def wakeups() -> tuple[float | None, float | None]:
        return (
            sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "runtime_pod"}),
            sched.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"}),
        )

    # c's own Pending write changes nothing c's decision reads: it wakes nothing (one cycle, not two)
    wait_until(lambda: sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "no_pods"}), what="c's cycle")
    mark = cluster.store.resource_version
    seen = sched.state.get().pod("default", "python-0")
    assert seen is not None and seen.heartbeat_at is not None
    first_beat = seen.heartbeat_at
    counted = wakeups()
    cycled: list[str] = []
    sched.results = lambda result: cycled.append(str(result.key))

    def heartbeats() -> int:
        return sum(1 for w in cluster.history(mark) if w.resource.plural == "pods" and w.subresource == "status")

    wait_until(lambda: heartbeats() >= 4, timeout=6, what="two rounds of heartbeats")

    def observed_beat() -> bool:
        pod = sched.state.get().pod("default", "python-0")
        return pod is not None and pod.heartbeat_at is not None and pod.heartbeat_at > first_beat

    wait_until(observed_beat, what="the informer to see a newer heartbeat")
    assert wakeups() == counted
    assert "default/c" not in cycled  # the waiting Run was not re-planned for a heartbeat
    assert sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "no_pods"}) == 1


def test_a_run_waiting_for_its_workspace_is_bound_when_the_workspace_is_bound(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 2, what="pods")
    make_workspace(kube, "scratch", "python")
    set_workspace_status(kube, "scratch", "Lost")  # unavailable: the Run must wait
    scheduler()
    create_run(kube, "needs-ws", workspace="scratch")
    run = wait_until(lambda: waiting(kube, "needs-ws"), what="run waits for its workspace")
    assert at(run, "status", "message") == 'waiting for workspace "scratch" placement for runtime "python"'
    bound = set_workspace_status(kube, "scratch", "Bound", "python-1")
    bound_at = next(
        float(w.time) for w in cluster.history()
        if w.name == "scratch" and at(w.object, "metadata", "resourceVersion") == at(bound, "metadata", "resourceVersion")
    )
    assert wait_until(lambda: assigned(kube, "needs-ws"), timeout=5, what="bind") == "python-1"
    assert _bind_time(cluster, "needs-ws") - bound_at < 1.0


# --- the backlog regime (SPEC §8: wake only what can be placed) ----------------------------------------


def _cycles(sched: object) -> float:
    from kruntimes.effects.runner import Scheduler

    assert isinstance(sched, Scheduler)
    return sched.metrics.value("kruntimes_scheduler_sync_duration_seconds_count") or 0.0


def _finish(kube: Kube, names: list[str]) -> None:
    for name in names:
        set_run_phase(kube, name, "Succeeded")


def test_a_backlog_drains_in_creation_order_at_about_one_cycle_per_bind(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    """30 Runs created before the scheduler starts, 2 slots: the new leader plans only what
    the free slots can take, and each finished Run admits the next one in line — no cycle
    for the Runs behind it (the old rule woke every Pending Run on every release)."""
    cluster.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    names = [f"r{i:02d}" for i in range(30)]
    for name in names:
        create_run(kube, name)
    sched = scheduler()
    order: list[str] = []

    def newly_bound(want: int) -> list[str] | None:
        found = sorted(n for n in names if n not in order and assigned(kube, n))
        return found if len(found) >= want else None

    while len(order) < len(names):
        want = min(2, len(names) - len(order))  # both slots in use, or the last Run
        bound = wait_until(lambda: newly_bound(want), what="the next binds")
        order.extend(bound)
        _finish(kube, bound)
    assert order == names  # oldest first, every time
    cycles = _cycles(sched)
    assert cycles <= 1.2 * len(names) + 2, f"{cycles} cycles for {len(names)} binds"


def test_a_run_waiting_on_affinity_at_the_head_of_the_queue_does_not_hold_back_the_next(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    cluster.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: _pods(kube) == 1, what="pod")
    scheduler()
    create_run(kube, "holder")
    wait_until(lambda: assigned(kube, "holder"), what="holder bound")
    # oldest in line: a Run that needs a partner nobody runs (and its own labels do not seed it)
    create_run(kube, "picky", affinity={"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="db")]}})
    create_run(kube, "plain")
    wait_until(lambda: waiting(kube, "picky") and waiting(kube, "plain"), what="both wait")
    set_run_phase(kube, "holder", "Succeeded")
    assert wait_until(lambda: assigned(kube, "plain"), timeout=5, what="plain bound") == "python-0"
    assert assigned(kube, "picky") is None


def test_runs_that_waited_for_pods_bind_in_line_as_slots_free_not_behind_later_runs(
    cluster: DevCluster, kube: Kube, scheduler: SchedulerFactory
) -> None:
    """Six Runs wait while their runtime has no pod. A pod with two slots comes up and takes the
    first two; a Run created after it finds the pod full. As the Runs finish, each freed slot
    goes to the next of the six in creation order, and the later Run comes last: none of the six
    is left to the 30 s safety net."""
    scheduler()
    created = [f"r{i}" for i in range(6)]
    for name in created:
        create_run(kube, name)
    wait_until(lambda: all(waiting(kube, name) for name in created), what="every Run waits for pods")
    cluster.add_runtime("python", replicas=1, capacity={"runs": "2"})
    order: list[str] = []

    def newly_bound(want: int) -> list[str] | None:
        found = sorted(n for n in created if n not in order and assigned(kube, n))
        return found if len(found) >= want else None

    order.extend(wait_until(lambda: newly_bound(2), what="the pod's first two binds"))
    create_run(kube, "z-later")  # ("z": after every r* even within the same creation second)
    created.append("z-later")
    wait_until(lambda: waiting(kube, "z-later"), what="the later Run waits for room")
    finished: set[str] = set()
    while len(order) < len(created):
        _finish(kube, [n for n in order if n not in finished])
        finished.update(order)
        want = min(2, len(created) - len(order))
        order.extend(wait_until(lambda: newly_bound(want), what=f"the next binds after {order}"))
    assert order == created
