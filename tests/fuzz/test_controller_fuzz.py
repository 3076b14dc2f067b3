"""Hostile objects through the dev server (which admits them: its schemas are permissive where upstream's
are) while the whole controller runs: it keeps serving valid Runs, fails the invalid ones with a reason from
the closed set, never crashes a worker, and the write history keeps every invariant."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from kruntimes.devcluster import KRUNTIMES_RESOURCES, ApiError, DevCluster, SimulatorSettings
from kruntimes.devcluster.resources import permissive
from kruntimes.devcluster.types import GroupResource
from kruntimes.verify import CheckOptions, check_history
from tests.security.support import PODS, RUNS, create, run_phase, runs, scheduler, wait_until

from .strategies import MARK, deep

WORKSPACES = GroupResource("kruntimes.io", "persistentworkspaces")
PAST_PYTHON = "1e" + "0" * 5000 + "1"
"""A quantity whose exponent has more digits than Python's ``int()`` converts (4,300)."""
QUANTITIES = ["1e99999", "99999999999999999999Ei", "-1", "500m", "abc", "", "1e-99999", "NaN", "9" * 300, "1.5.5", "0x10", 10**30, -5, 0, PAST_PYTHON, "9" * 5000]


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    """The kruntimes kinds with no schema: hostile Runs must reach the scheduler, which may not rely on the
    CRD to keep them out (a cluster may run an older or hand-edited CRD)."""
    kinds = permissive(KRUNTIMES_RESOURCES)
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0, execute_runs=0.2), auto_create_namespaces=True, bookmark_interval=1.0, custom_resources=kinds) as running:
        yield running


def hostile_specs(rng: random.Random, count: int) -> Iterator[dict[str, Any]]:
    term_ok = {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kruntimes.io/runtime-pod"}
    fixed: list[dict[str, Any]] = [
        {"resources": {"requests": {"runs": q}}} for q in QUANTITIES
    ] + [
        {"resources": {"requests": {MARK * 50: "abc"}}},
        {"resources": {"requests": {f"r{i}": "1" for i in range(2000)}}},
        {"affinity": deep(400)},
        {"affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term_ok] * 5000}}},
        {"affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "everything"}}},
        {"affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchExpressions": [{"key": MARK, "operator": "Gt", "values": ["1"]}]}, "topologyKey": "kruntimes.io/runtime-pod"}]}}},
        {"affinity": {"runAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10**20, "runAffinityTerm": term_ok}]}}},
        {"affinity": {"runAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "runAffinityTerm": None}]}}},
        {"workspace": {"name": MARK, "kind": "Secret", "apiGroup": "v1"}},
        {"workspace": {"name": "", "kind": "PersistentWorkspace"}},
        {"retryPolicy": {"backoff": "99999999999h"}},
        {"retryPolicy": {"backoff": "9" * 5000 + "s"}},
        {"retryPolicy": {"backoff": MARK}},
        {"cancelRequested": True, "resources": {"requests": {"runs": "abc"}}},
    ]
    yield from fixed
    for _ in range(count):
        yield {
            "resources": {"requests": {rng.choice(["runs", "gpu", MARK]): rng.choice([*QUANTITIES, "1", "2"])}},
            "affinity": rng.choice([{}, {"runAffinity": deep(rng.randint(1, 50))}, {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": MARK}]}}]),
        }


def hostile_pods(cluster: DevCluster) -> None:
    """Runtime Pods of runtime ``python`` that must not be used, and one whose bad annotations are just ignored."""
    garbage_conditions: list[Any] = [
        "not a list", [1, 2, 3], [{"type": "Ready"}], [{"type": "Ready", "status": "True"}, {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "yesterday"}],
        [{"type": "Ready", "status": "True"}, {"type": "kruntimes.io/RuntimedReady", "status": True, "lastProbeTime": "2999-01-01T00:00:00Z"}],
        [{"type": "Ready", "status": "False"}, {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2999-01-01T00:00:00Z"}],
    ]
    for index, conditions in enumerate(garbage_conditions):
        create(cluster, PODS, "default", {
            "metadata": {"name": f"bad-{index}", "labels": {"runtime": "python"}, "annotations": {"kruntimes.io/capacity.runs": str(QUANTITIES[index])}},
            "spec": {"containers": [{"name": "x", "image": "x"}]},
            "status": {"phase": "Running", "conditions": conditions},
        }, subresource="status")
    # usable, but every capacity annotation is absurd: the default {runs: 2} applies
    create(cluster, PODS, "default", {
        "metadata": {"name": "odd-0", "labels": {"runtime": "odd"}, "annotations": {f"kruntimes.io/capacity.{k}": v for k, v in (("runs", "1e99999"), ("gpu", "-1"), ("", "5"), ("a/b", "3"), ("cpu", PAST_PYTHON))}},
        "spec": {"containers": [{"name": "x", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2999-01-01T00:00:00Z"},
        ]},
    }, subresource="status")


def test_the_controller_keeps_serving_valid_runs_among_hostile_ones(cluster: DevCluster, tmp_path: Path) -> None:
    rng = random.Random(5)
    cluster.add_runtime("python", replicas=2, capacity={"runs": "2"})
    hostile_pods(cluster)
    refused = 0
    with scheduler(cluster, tmp_path, identity="fuzz") as running:
        for index, spec in enumerate(hostile_specs(rng, 40)):
            labels = {f"k{index}": f'{MARK}"{{}}\u202e'} if index % 2 else {f"l{i}": MARK for i in range(300)}
            try:
                create(cluster, RUNS, f"ns-{index % 3}", {"metadata": {"name": f"hostile-{index}", "labels": labels}, "spec": {"runtime": "python", "mode": {"task": {}}, **spec}})
            except ApiError:
                refused += 1  # the dev server's schema refused it: fine, it never reached the scheduler
        for index in range(20):
            create(cluster, RUNS, "default", {"metadata": {"name": f"valid-{index}"}, "spec": {"runtime": "python", "mode": {"task": {}}}})
        create(cluster, RUNS, "default", {"metadata": {"name": "odd-run"}, "spec": {"runtime": "odd", "mode": {"task": {}}, "resources": {"requests": {"runs": "2"}}}})
        wait_until(lambda: all(run_phase(cluster, "default", f"valid-{i}") == "Succeeded" for i in range(20)), timeout=60, what="every valid Run executed")
        wait_until(lambda: run_phase(cluster, "default", "odd-run") == "Scheduled", what="the odd pod used with its default capacity")
        wait_until(lambda: all((r.get("status") or {}).get("phase") not in (None, "", "Pending") or (r.get("status") or {}).get("message") for r in runs(cluster)), timeout=30, what="every Run decided")
        assert running.healthy(), "a worker or an informer died"
        assert (running.metrics.value("kruntimes_scheduler_sync_total", {"result": "scheduled"}) or 0) >= 21
    assert refused < 3, f"the dev server refused {refused} hostile Runs: the test would not exercise the scheduler"
    bad_pods = {f"bad-{i}" for i in range(6)}
    for run in runs(cluster):
        status = run.get("status") or {}
        assert status.get("assignedPod") not in bad_pods, (run["metadata"]["name"], status.get("assignedPod"))
        message = str(status.get("message") or "")
        assert len(message.encode()) <= 1024, (run["metadata"]["name"], len(message))
        if not message.startswith(('resource request "', 'spec.resources.requests "')):  # SPEC §2 names the offending request
            assert MARK not in message, (run["metadata"]["name"], message)
        if status.get("phase") == "Failed":
            reasons = {c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Completed"}
            assert reasons <= {"InvalidResources", "InvalidAffinity", "InvalidSpec"}, reasons
    report = check_history(cluster.history(), CheckOptions(final_now=datetime.now(timezone.utc)))
    assert report.ok, report.summary()
