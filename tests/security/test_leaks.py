"""Nothing hostile leaks out: metric labels come only from SPEC §9's closed sets, and status messages and
Events echo no selector text, no label values, no other Run's name, and stay bounded."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kruntimes.devcluster import KRUNTIMES_RESOURCES, DevCluster, SimulatorSettings
from kruntimes.devcluster.resources import permissive
from kruntimes.devcluster.types import GroupResource
from kruntimes.pure.model import messages

from tests.operator_metrics import OPERATOR_LABELS

from .support import PODS, RUNS, create, run_phase, runs, scheduler, wait_until

EVENTS = GroupResource("", "events")
SELECTOR_MARK = "SELQ\u2603"
"""In label values and selector values: must never appear in any status, Event or metric."""
RUNTIME_MARK = "RTQ"
"""In hostile runtime names: may appear only in the messages of Runs that name that runtime (SPEC §7)."""
HOSTILE_RUNTIMES = (
    f'{RUNTIME_MARK}"}}{{le="+Inf"}} 1e9\n# TYPE x counter',
    f"{RUNTIME_MARK}\u65e5\u672c\u202e\u200b'\\",
    f"{RUNTIME_MARK}{{{{}}}}[]$`<script>",
)
CLOSED_LABELS: dict[str, dict[str, frozenset[str]]] = {
    "kruntimes_scheduler_sync_total": {"result": frozenset({"scheduled", "no_pods", "selection_error"})},
    "kruntimes_scheduler_reservation_conflicts_total": {"stage": frozenset({"reserve", "bind"})},
    "kruntimes_scheduler_pending_run_wakeups_total": {"source": frozenset({"runtime_pod", "capacity_released"})},
    "kruntimes_scheduler_filter_rejections_total": {
        "plugin": frozenset({"RuntimePodAvailability", "RunAffinity", "WorkspacePlacement"}),
        "reason": frozenset({"RuntimePodUnavailable", "UnsatisfiedRunAffinity", "UnsatisfiedRunAntiAffinity", "WorkspacePlacement", "WorkspaceUnavailable"}),
    },
}
UNLABELLED = frozenset(
    {"kruntimes_scheduler_sync_duration_seconds", "kruntimes_scheduler_no_pods_total", "kruntimes_scheduler_run_queue_duration_seconds"}
)


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    """The kruntimes kinds with no schema at all: the scheduler must not rely on the CRD to keep hostile values out
    (a cluster may run an older or hand-edited CRD), so these Runs go beyond what deploy/crds admits."""
    kinds = permissive(KRUNTIMES_RESOURCES)
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0), auto_create_namespaces=True, bookmark_interval=1.0, custom_resources=kinds) as running:
        yield running


def stamp() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod(cluster: DevCluster, namespace: str, name: str, runtime: str, capacity: str = "2", **labels: str) -> None:
    now = stamp()
    create(cluster, PODS, namespace, {
        "metadata": {"name": name, "labels": {"runtime": runtime, **labels}, "annotations": {"kruntimes.io/capacity.runs": capacity}},
        "spec": {"containers": [{"name": "runtimed", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2999-01-01T00:00:00Z", "lastTransitionTime": now},
        ]},
    }, subresource="status")


def term(labels: dict[str, str], topology: str = "kruntimes.io/runtime-pod") -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": topology}


def hostile_world(cluster: DevCluster, namespace: str) -> list[str]:
    """Pods and Runs whose names, labels, runtimes and selectors are hostile; returns the Run names."""
    names: list[str] = []
    for index, runtime in enumerate(HOSTILE_RUNTIMES):
        pod(cluster, namespace, f"pod-{index}", runtime, **{f"k{SELECTOR_MARK}": f'v"{SELECTOR_MARK}{{}}'})
        specs: tuple[dict[str, Any], ...] = (
            {},
            {"affinity": {"runAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "runAffinityTerm": term({"app": f"{SELECTOR_MARK}\"}}"})}]}}},
            {"affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term({"app": f"{SELECTOR_MARK}-nobody"})]}}},
            {"affinity": {"runAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term({"team": f"{SELECTOR_MARK}x"})]}}},
            {"affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term({"app": SELECTOR_MARK}, topology=f"{SELECTOR_MARK}-zone")]}}},
            {"affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchExpressions": [{"key": SELECTOR_MARK, "operator": f"{SELECTOR_MARK}Op", "values": [SELECTOR_MARK]}]}, "topologyKey": "kruntimes.io/runtime-pod"}]}}},
            {"resources": {"requests": {"runs": f"{SELECTOR_MARK}"}}},
            {"workspace": {"name": f"ws-{index}", "kind": "PersistentWorkspace", "apiGroup": "kruntimes.io"}},
        )
        for j, spec in enumerate(specs):
            name = f"victim-{index}-{j}-" + "n" * 180
            labels = {"team": f"{SELECTOR_MARK}x", f"weird/{SELECTOR_MARK}": f"\u202e{SELECTOR_MARK}\"}}"}
            create(cluster, RUNS, namespace, {"metadata": {"name": name, "labels": labels}, "spec": {"runtime": runtime, **spec}})
            names.append(name)
    return names


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:  # noqa: S310 (loopback)
        return str(response.read().decode())


def test_hostile_names_never_become_metric_labels_messages_or_events(cluster: DevCluster, tmp_path: Path) -> None:
    namespace = "hostile"
    with scheduler(cluster, tmp_path) as running:
        # created while it leads, so each Run's own event plans it (a new leader's backlog is
        # planned as slots free, which is not what this test is about)
        assert running.wait_leading(10)
        names = hostile_world(cluster, namespace)
        wait_until(lambda: all(run_phase(cluster, namespace, n) for n in names) and all(
            (r.get("status") or {}).get("message") or (r.get("status") or {}).get("phase") != "Pending" for r in runs(cluster)
        ), what="every hostile Run decided")
        assert running.metrics_url is not None
        text = scrape(running.metrics_url)
    # metrics: closed label sets only
    assert SELECTOR_MARK not in text and RUNTIME_MARK not in text and "victim" not in text and namespace not in text
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(("kruntimes_", "workqueue_")):
            continue
        for sample in family.samples:
            base = sample.name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            closed = next((table[n] for table in (CLOSED_LABELS, OPERATOR_LABELS) for n in (sample.name, base) if n in table), None)
            labels = {k: v for k, v in sample.labels.items() if k not in ("le", "quantile")}
            if closed is None:
                assert sample.name in UNLABELLED or base in UNLABELLED, sample.name
                assert not labels, (family.name, labels)
                continue
            assert set(labels) == set(closed), (family.name, labels)
            for key, value in labels.items():
                assert value in closed[key], (family.name, key, value)
    # statuses and Events: no selector text, no label values, no other Run's name, bounded
    all_names = {r["metadata"]["name"] for r in runs(cluster)}
    for run in runs(cluster):
        status = run.get("status") or {}
        own = run["metadata"]["name"]
        texts = [status.get("message") or ""] + [str(c.get("message") or "") + str(c.get("reason") or "") for c in status.get("conditions") or []]
        for text_ in texts:
            assert SELECTOR_MARK not in text_, (own, text_)
            assert not any(other in text_ for other in all_names if other != own), (own, text_)
            assert len(text_.encode()) <= 1024
            if RUNTIME_MARK in text_:
                assert run["spec"]["runtime"] in text_, "only the Run's own runtime name may appear"
        if status.get("phase") == "Failed":
            reasons = {c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Completed"}
            assert reasons <= {messages.REASON_INVALID_AFFINITY, messages.REASON_INVALID_RESOURCES, messages.REASON_INVALID_SPEC}
    events = cluster.store.list_objects(EVENTS, namespace)[0]
    assert events, "the scheduler records Events"
    for event in events:
        message = str(event.get("message") or "")
        owner = event["involvedObject"]["name"]
        assert SELECTOR_MARK not in message and SELECTOR_MARK not in str(event.get("reason"))
        assert not any(other in message for other in all_names if other != owner)
        assert len(message.encode()) <= 1024


def test_a_huge_runtime_name_does_not_make_an_unbounded_status_message(cluster: DevCluster, tmp_path: Path) -> None:
    """A schema-less Run admits a 5,000-character ``spec.runtime`` (the deploy CRD caps it at 63)."""
    runtime = "r" * 5000
    with scheduler(cluster, tmp_path):
        create(cluster, RUNS, "default", {"metadata": {"name": "long"}, "spec": {"runtime": runtime}})
        run = wait_until(lambda: next((r for r in runs(cluster) if (r.get("status") or {}).get("message")), None), what="a wait message")
    assert len(run["status"]["message"].encode()) <= 1024
