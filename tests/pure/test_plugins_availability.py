"""RuntimePodAvailability: the predicate and the prepared filter agree (SPEC §1, §4)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.objects import PodSlot, SchedulerConfig, frozen_resources
from kruntimes.pure.plugins.availability import RuntimePodAvailability, available_and_fits
from tests.builders import NOW, at, decoded_run
from tests.pure.planning_world import slot, snapshot

STALE = timedelta(seconds=15)
RUN = decoded_run("r")


def rejects(pod: PodSlot) -> str | None:
    pod_filter = RuntimePodAvailability().prepare(RUN, snapshot(RUN, (pod,))).unwrap()
    assert pod_filter is not None
    return pod_filter(pod)


@pytest.mark.parametrize(
    ("pod", "ok"),
    [
        (slot("p"), True),
        (slot("p", phase="Pending"), False),
        (slot("p", phase="Succeeded"), False),
        (slot("p", deleting=True), False),
        (slot("p", ready=False), False),
        (slot("p", ready=None), False),
        (slot("p", heartbeat_status="False"), False),
        (slot("p", heartbeat_status="Unknown"), False),
        (slot("p", heartbeat_status=None), False),
        (slot("p", heartbeat_at=None), False),
        (slot("p", heartbeat_at=at(-15)), True),
        (slot("p", heartbeat_at=at(-15.000001)), False),
        (slot("p", heartbeat_at=at(86400)), True),
        (slot("p", usage={"runs": 1}), True),
        (slot("p", usage={"runs": 2}), False),
        (slot("p", {"runs": "3"}, {"runs": 2}), True),
        (slot("p", {"runs": "0"}, {"runs": 2}), False),  # runs "0" is ignored: the default 2 stays
    ],
    ids=lambda value: str(value) if isinstance(value, bool) else "",
)
def test_availability_table(pod: PodSlot, ok: bool) -> None:
    assert available_and_fits(pod, RUN.requests, NOW, STALE) is ok
    assert rejects(pod) == (None if ok else "RuntimePodUnavailable")


def test_a_request_for_an_unadvertised_resource_never_fits() -> None:
    run = decoded_run("r", requests={"example.com/gpu": "1"})
    pod = slot("p", {"gpu": "8"})
    assert not available_and_fits(pod, run.requests, NOW, STALE)


@given(
    age_us=st.integers(-10**8, 10**8),
    stale_s=st.integers(1, 60),
    capacity=st.integers(1, 5),
    used=st.integers(0, 6),
    requested=st.integers(1, 3),
    ready=st.booleans(),
)
def test_the_inlined_filter_is_the_predicate(
    age_us: int, stale_s: int, capacity: int, used: int, requested: int, ready: bool
) -> None:
    """The filter inlines availability for speed; it must agree with ``RuntimePod.available`` + ``fits``."""
    probe = NOW - timedelta(microseconds=age_us)
    base = slot("p", {"runs": str(capacity)}, ready=ready)
    pod = PodSlot(replace(base.pod, heartbeat_at=probe), frozen_resources({"runs": used}))
    run = decoded_run("r", requests={"runs": str(requested)})
    config = SchedulerConfig(heartbeat_stale_after=timedelta(seconds=stale_s))
    pod_filter = RuntimePodAvailability().prepare(run, snapshot(run, (pod,), config=config)).unwrap()
    assert pod_filter is not None
    expected = available_and_fits(pod, run.requests, NOW, config.stale_after())
    assert (pod_filter(pod) is None) is expected
