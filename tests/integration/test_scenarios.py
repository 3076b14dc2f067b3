"""SPEC scenarios end to end, on the dev cluster and on the real kube-apiserver (the scheduler under deploy/ RBAC)."""

from __future__ import annotations


from kruntimes.kubeclient.kube import Kube
from tests.builders import make_pod, make_run

from .conftest import SchedulerFactory, Server
from .helpers import (
    ready_pods,
    assigned,
    at,
    events_for,
    get_run,
    max_usage_by_pod,
    phase_of,
    set_run_phase,
    term,
    wait_until,
    waiting,
)


def test_a_pending_run_is_bound_with_the_scheduled_condition_and_an_event(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 2, what="pods")
    sched = server_scheduler()
    make_run(server_kube, "basic")
    pod = wait_until(lambda: assigned(server_kube, "basic"), what="bind")
    run = get_run(server_kube, "basic")
    assert pod in ("python-0", "python-1")
    assert at(run, "status", "assignedPodUID")
    [condition] = [c for c in at(run, "status", "conditions") if c["type"] == "Scheduled"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "Assigned",
        f"assigned to runtime pod {pod}",
    )
    assert not at(run, "status", "message")
    events = wait_until(lambda: events_for(server_kube, "basic"), what="Scheduled event")
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Normal", "Scheduled", f"assigned to runtime pod {pod}")
    ]
    assert sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "scheduled"}) == 1
    assert sched.metrics.value("kruntimes_scheduler_run_queue_duration_seconds_count") == 1


def _scheduled_condition(run: dict[str, object]) -> tuple[str, str, str]:
    [condition] = [c for c in at(run, "status", "conditions") if c["type"] == "Scheduled"]
    return (condition["status"], condition["reason"], condition["message"])


def test_waiting_runs_get_the_exact_pending_messages(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory
) -> None:
    server_kube = bare_server_kube
    make_pod(server_kube, "busy-0", "busy", capacity={"runs": "4"})
    make_run(server_kube, "holder", "busy", labels={"app": "db"})
    set_run_phase(server_kube, "holder", "Running", pod="busy-0")
    sched = bare_server_scheduler()
    make_run(server_kube, "no-pods", "absent")
    make_run(server_kube, "affine", "busy", labels={"app": "web"}, affinity={
        "runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="cache")]}
    })
    make_run(server_kube, "anti", "busy", affinity={
        "runAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="db")]}
    })
    make_run(server_kube, "needs-ws", "busy", workspace="scratch")
    expected = {
        "no-pods": 'waiting for available runtime pods for runtime "absent"',
        "affine": 'waiting for available runtime pods satisfying required Run affinity for runtime "busy"',
        "anti": 'waiting for available runtime pods satisfying required Run anti-affinity for runtime "busy"',
        "needs-ws": 'waiting for workspace "scratch" placement for runtime "busy"',
    }
    why = {  # the Event's breakdown: counts by cause, never a name (the status keeps upstream's text)
        "no-pods": '0/0 Runtime Pods available: no Runtime Pod of runtime "absent" in the namespace',
        "affine": "0/1 Runtime Pods available: 1 UnsatisfiedRunAffinity",
        "anti": "0/1 Runtime Pods available: 1 UnsatisfiedRunAntiAffinity",
        "needs-ws": "0/1 Runtime Pods available: 1 WorkspaceUnavailable",
    }
    for name, message in expected.items():
        run = wait_until(lambda: waiting(server_kube, name), what=name)
        assert at(run, "status", "phase") == "Pending"
        assert at(run, "status", "message") == message
        assert _scheduled_condition(run) == ("False", "Unschedulable", message)
        events = wait_until(lambda: events_for(server_kube, name), what=f"{name} event")
        assert [(e["type"], e["reason"], e["message"]) for e in events] == [("Warning", "FailedScheduling", why[name])]
    # each Run waits at least once
    no_pods = sched.metrics.value("kruntimes_scheduler_no_pods_total")
    assert no_pods is not None and no_pods >= 4
    assert sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "no_pods"}) == no_pods
    rejected = sched.metrics.value(
        "kruntimes_scheduler_filter_rejections_total", {"plugin": "RunAffinity", "reason": "UnsatisfiedRunAffinity"}
    )
    assert rejected is not None and rejected >= 1


def test_forty_runs_fill_exactly_the_capacity_and_no_pod_is_ever_over_it(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=6, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(server_kube) == 6, what="pods")
    sched = server_scheduler(workers=4)
    for i in range(40):
        make_run(server_kube, f"load-{i:02d}")
    names = [f"load-{i:02d}" for i in range(40)]

    def bound() -> list[str]:
        items, _ = server_kube.list("/apis/kruntimes.io/v1alpha1/namespaces/default/runs").unwrap()
        return [str(at(r, "metadata", "name")) for r in items if at(r, "status", "phase") == "Scheduled"]

    wait_until(lambda: len(bound()) == 12, timeout=20, what="12 bound")
    wait_until(
        lambda: all(at(get_run(server_kube, n), "status", "message") or assigned(server_kube, n) for n in names),
        timeout=20,
        what="every run decided",
    )
    assert len(bound()) == 12
    peaks = max_usage_by_pod(server)
    assert peaks == {f"python-{i}": 2 for i in range(6)}
    assert sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "scheduled"}) == 12


def test_a_required_affinity_cohort_lands_on_one_pod(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=3, capacity={"runs": "4"})
    wait_until(lambda: ready_pods(server_kube) == 3, what="pods")
    server_scheduler(workers=4)
    affinity = {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(cohort="a")]}}
    for i in range(4):
        make_run(server_kube, f"cohort-{i}", labels={"cohort": "a"}, affinity=affinity)
    pods = [wait_until(lambda: assigned(server_kube, f"cohort-{i}"), what=f"cohort-{i}") for i in range(4)]
    assert len(set(pods)) == 1


def test_required_anti_affinity_spreads_runs_over_pods(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=3, capacity={"runs": "4"})
    wait_until(lambda: ready_pods(server_kube) == 3, what="pods")
    server_scheduler(workers=4)
    affinity = {"runAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app="spread")]}}
    names = [f"spread-{i}" for i in range(4)]
    for name in names:
        make_run(server_kube, name, labels={"app": "spread"}, affinity=affinity)
    # which three are bound depends on which workers win their reservations; that three are does not
    wait_until(lambda: all(assigned(server_kube, n) or waiting(server_kube, n) for n in names), what="all four decided")
    pods = [pod for pod in (assigned(server_kube, n) for n in names) if pod]
    assert sorted(pods) == ["python-0", "python-1", "python-2"]
    [left] = [waiting(server_kube, n) for n in names if not assigned(server_kube, n)]
    assert at(left, "status", "message") == (
        'waiting for available runtime pods satisfying required Run anti-affinity for runtime "python"'
    )


def test_weighted_scoring_picks_runtime_c_in_the_spec_example(
    bare_server: Server, bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory
) -> None:
    server_kube = bare_server_kube
    make_pod(server_kube, "runtime-a", "ws", capacity={"runs": "2"})
    make_pod(server_kube, "runtime-b", "ws", capacity={"runs": "4"})
    make_pod(server_kube, "runtime-c", "ws", capacity={"runs": "4"})
    for name, pod, labels in (
        ("on-a", "runtime-a", {"zone": "blue", "tier": "gold"}),
        ("on-b-1", "runtime-b", {}),
        ("on-b-2", "runtime-b", {}),
        ("on-c", "runtime-c", {"zone": "blue"}),
    ):
        make_run(server_kube, name, "ws", labels=labels)
        set_run_phase(server_kube, name, "Running", pod=pod)
    bare_server_scheduler()
    preferred = [
        {"weight": 1, "runAffinityTerm": term(zone="blue")},
        {"weight": 1, "runAffinityTerm": term(tier="gold")},
    ]
    make_run(server_kube, "new", "ws", affinity={"runAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}})
    assert wait_until(lambda: assigned(server_kube, "new"), what="bind") == "runtime-c"


def test_cancel_and_invalid_input_end_in_terminal_statuses(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1)
    server_scheduler()
    make_run(server_kube, "cancelled", cancel=True)
    make_run(server_kube, "bad-resources", requests={"runs": "500m"})
    make_run(server_kube, "bad-affinity", affinity={
        "runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}, "topologyKey": "kruntimes.io/runtime-pod"}
        ]}
    })
    expected = {
        "cancelled": ("Cancelled", "Cancelled", "cancelled by user"),
        "bad-resources": ("Failed", "InvalidResources", 'resource request "runs" must be a non-negative integer'),
        "bad-affinity": ("Failed", "InvalidAffinity", None),
    }
    for name, (phase, reason, message) in expected.items():
        wait_until(lambda: phase_of(server_kube, name) == phase, what=f"{name} {phase}")
        run = get_run(server_kube, name)
        shown = str(at(run, "status", "message"))
        if message is None:
            assert shown.startswith("invalid run affinity: ")
        else:
            assert shown == message
        assert at(run, "status", "completionTime")
        conditions = {c["type"]: c for c in at(run, "status", "conditions")}
        for kind in ("Running", "Completed"):
            assert (conditions[kind]["status"], conditions[kind]["reason"], conditions[kind]["message"]) == (
                "False",
                reason,
                shown,
            )
    assert not assigned(server_kube, "cancelled")
