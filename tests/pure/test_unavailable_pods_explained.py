"""Why a pod is unavailable to a Run, as ``kruntimes explain`` details it beside the pod and as
the ``FailedScheduling`` Event counts it: the first failing check of SPEC §4, in its order."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kruntimes.pure.explain import explain
from kruntimes.pure.model.objects import DEFAULT_CONFIG, PodSlot
from kruntimes.pure.plugins.availability import unavailable_kind
from tests.builders import NOW, at, decoded_run
from tests.pure.planning_world import slot, snapshot


def detail(pod: PodSlot, requests: Mapping[str, object] | None = None) -> str:
    run = decoded_run("r", requests=requests)
    (verdict,) = explain(snapshot(run, [pod])).verdicts
    return verdict.detail


def kind(pod: PodSlot, requests: Mapping[str, object]) -> str | None:
    return unavailable_kind(pod, decoded_run("r", requests=requests).requests, NOW, DEFAULT_CONFIG.stale_after())


@pytest.mark.parametrize(
    ("pod", "text"),
    [
        (slot("p1", phase=""), "pod phase is unknown, not Running"),
        (slot("p1", phase="Pending", deleting=True), "pod phase is Pending, not Running"),
        (slot("p1", deleting=True, ready=False), "pod is being deleted"),
        (slot("p1", ready=False, heartbeat_status="False"), "pod is not Ready"),
        (slot("p1", heartbeat_status="False", heartbeat_at=None), "runtimed heartbeat (kruntimes.io/RuntimedReady) is missing or not True"),
        (slot("p1", heartbeat_at=None), "runtimed heartbeat has no lastProbeTime"),
        (slot("p1", heartbeat_at=at(-90)), "runtimed heartbeat is stale: last probe 90s ago (stale after 15s)"),
    ],
    ids=["no phase", "pending", "deleting", "not ready", "heartbeat false", "no probe time", "stale"],
)
def test_explain_names_the_first_availability_check_a_pod_fails(pod: PodSlot, text: str) -> None:
    assert detail(pod) == text


def test_explain_lists_every_requested_resource_the_pod_lacks_but_not_one_that_just_fits() -> None:
    pod = slot("p1", {"runs": "2", "gpu": "3"}, {"runs": 2, "gpu": 1})
    assert detail(pod, {"runs": "1", "gpu": "2", "fpga": "1"}) == "does not advertise fpga; full: runs 2/2 in use, needs 1"


def test_explain_counts_an_unused_resource_as_zero_in_use() -> None:
    assert detail(slot("p1", {"runs": "2", "gpu": "1"}), {"runs": "1", "gpu": "2"}) == "full: gpu 0/1 in use, needs 2"


@pytest.mark.parametrize(
    ("pod", "requests", "label"),
    [
        (slot("p1", phase="Pending", deleting=True), {"runs": "1"}, "not running"),
        (slot("p1", deleting=True, ready=False), {"runs": "1"}, "being deleted"),
        (slot("p1", ready=False), {"runs": "1"}, "not ready"),
        (slot("p1", heartbeat_status="False"), {"runs": "1"}, "no heartbeat"),
        (slot("p1", heartbeat_at=None), {"runs": "1"}, "no heartbeat"),
        (slot("p1", heartbeat_at=at(-60)), {"runs": "1"}, "stale heartbeat"),
        (slot("p1", {"runs": "2"}), {"gpu": "1", "runs": "1"}, "without gpu"),
        (slot("p1", {"runs": "2", "gpu": "1"}), {"gpu": "2", "runs": "1"}, "too small (gpu)"),
        (slot("p1", {"runs": "2", "gpu": "2"}, {"gpu": 1}), {"gpu": "2", "runs": "1"}, "full (gpu)"),
        (slot("p1", {"runs": "2", "gpu": "2"}, {"gpu": 1, "runs": 1}), {"gpu": "1", "runs": "1"}, None),
        (slot("p1", {"runs": "2", "gpu": "2"}), {"gpu": "2", "runs": "2"}, None),
    ],
    ids=["not running", "deleting", "not ready", "heartbeat false", "no probe time", "stale", "without",
         "too small", "full", "exactly fills", "fills an unused pod"],
)
def test_the_failed_scheduling_event_counts_a_pod_under_its_first_failing_check(
    pod: PodSlot, requests: Mapping[str, object], label: str | None
) -> None:
    assert kind(pod, requests) == label
