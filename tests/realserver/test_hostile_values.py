"""Values the real API server stores under deploy/'s CRDs but Python cannot read naively (SPEC §1,
revision 3): one such object fails alone, and every other object is scheduled as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import create, ready_runtime_pod, run_manifest, runs

PAST_PYTHON = 5_000
"""More digits than Python's ``int()`` converts (4,300)."""


def _completed(run: dict[str, Any]) -> tuple[str, str, str]:
    status = run.get("status") or {}
    reason = next((c.get("reason", "") for c in status.get("conditions") or [] if c.get("type") == "Completed"), "")
    return status.get("phase", ""), reason, status.get("message", "")


def test_runs_and_pods_holding_numbers_past_pythons_limit_fail_alone_and_scheduling_goes_on(
    deployed: ControlPlane, namespace: str, scheduler_log: Path
) -> None:
    runs_path = f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs"
    # the CRD's schema admits all three: a string backoff, a quantity matching its pattern
    create(deployed, runs_path, run_manifest(namespace, "backoff", "python", retryPolicy={"backoff": "9" * PAST_PYTHON + "s"}))
    create(deployed, runs_path, run_manifest(namespace, "exponent", "python", resources={"requests": {"cpu": "1e" + "0" * PAST_PYTHON + "1"}}))
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "1", "cpu": "1e" + "0" * PAST_PYTHON + "1"})
    create(deployed, runs_path, run_manifest(namespace, "plain", "python"))

    def settled() -> bool:
        found = runs(deployed, namespace)
        return (found["plain"].get("status") or {}).get("phase") == "Scheduled" and all(
            _completed(found[name])[0] == "Failed" for name in ("backoff", "exponent")
        )

    wait_until(settled, timeout=60, interval=0.2, what="the plain Run scheduled and both hostile Runs failed")
    found = runs(deployed, namespace)
    assert found["plain"]["status"]["assignedPod"] == "python-0"  # the pod's malformed annotation is ignored
    phase, reason, message = _completed(found["backoff"])
    assert (reason, message) == ("InvalidSpec", "spec.retryPolicy.backoff is longer than 128 characters (a Go duration such as 500ms, 15s or 1m30s)")
    phase, reason, message = _completed(found["exponent"])
    assert reason == "InvalidSpec" and message.startswith('spec.resources.requests "cpu" is longer than 128 characters'), message
