"""A bind whose outcome is unknown, settled by a read the deploy/ RBAC must allow.

The scheduler's first status write is lost before it reaches the server (the connection broke
after the request was sent, as far as the client can tell), so its outcome is unknown. The
reservation is held for the ambiguous hold, then one read of the Run decides: still Pending at the
planned-from version, so the write never landed and the capacity is released. On a real API server
under deploy/ RBAC that read must be allowed; if it is refused, the reservation is kept for good
and the pod's only slot is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from returns.result import Failure, Result

from kruntimes.kubeclient.kube import MERGE_PATCH, ApiError, JSONObject, Kube, load_configuration
from kruntimes.effects.runner import Scheduler, SchedulerOptions
from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import create, ready_runtime_pod, run_manifest, runs


class LosesTheFirstBind(Kube):
    """Answers the first Run status write as a broken connection, without sending it."""

    lost: list[str]

    def patch_status(self, path: str, body: str | bytes, content_type: str = MERGE_PATCH) -> Result[JSONObject, ApiError]:
        if "/runs/" in path and not self.lost:
            self.lost.append(path)
            return Failure(ApiError("transport", 0, "", "connection reset after the request was sent"))
        return super().patch_status(path, body, content_type)


@pytest.fixture
def losing_scheduler(scheduler_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[tuple[Scheduler, LosesTheFirstBind]]:
    loaded = load_configuration(str(scheduler_kubeconfig)).unwrap()
    client = LosesTheFirstBind(loaded.configuration, request_timeout=10, user_agent="kruntimes-scheduler/confirm")
    client.lost = []
    options = SchedulerOptions(
        identity="confirm",
        namespaces=(namespace,),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        heartbeat_stale_after=timedelta(minutes=10),
        ambiguous_hold=2.0,
        cycle_log=tmp_path / "cycles.jsonl",
    )
    scheduler = Scheduler(client, options)
    scheduler.start()
    try:
        assert scheduler.wait_ready(30)
        yield scheduler, client
    finally:
        assert scheduler.stop(timeout=10)
        client.close()


def test_a_bind_lost_on_the_way_frees_its_slot_after_the_hold_under_deploy_rbac(
    deployed: ControlPlane,
    namespace: str,
    losing_scheduler: tuple[Scheduler, LosesTheFirstBind],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    scheduler, client = losing_scheduler
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "1"})
    for name in ("a", "b"):
        create(deployed, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", run_manifest(namespace, name, "python"))
    wait_until(lambda: client.lost, timeout=30, what="the first bind to be lost")

    def scheduled() -> list[str]:
        return [n for n, r in runs(deployed, namespace).items() if r.get("status", {}).get("phase") == "Scheduled"]

    # the hold is 2 s; then one read settles the lost write and the slot is planned again
    bound = wait_until(scheduled, timeout=45, interval=0.2, what="a Run bound to the slot the lost write held")
    assert len(bound) == 1
    refused = [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage().lower() or "HTTP 403" in r.getMessage()]
    refused += [str(getattr(r, "error", "")) for r in caplog.records if "forbidden" in str(getattr(r, "error", "")).lower()]
    assert not refused, refused
