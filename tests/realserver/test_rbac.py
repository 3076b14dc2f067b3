"""The scheduler as deploy/ installs it: its own ServiceAccount, its own RBAC, the real API server."""

from __future__ import annotations

from pathlib import Path

from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import create, dumps, ready_runtime_pod, run_manifest, runs


def test_the_scheduler_binds_runs_and_writes_events_as_its_own_service_account_without_a_403(
    deployed: ControlPlane, namespace: str, scheduler_log: Path
) -> None:
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "2"})
    for i in range(3):
        create(deployed, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", run_manifest(namespace, f"r{i}", "python"))

    def phases() -> list[str]:
        return sorted(r.get("status", {}).get("phase", "") for r in runs(deployed, namespace).values())

    try:  # two bound, the third told why it waits: the pod's two slots are taken
        wait_until(lambda: phases() == ["Pending", "Scheduled", "Scheduled"], timeout=60, interval=0.2, what="two bound, one waiting")
    except AssertionError as failed:
        raise AssertionError(f"{failed}: {dumps(runs(deployed, namespace))}\nthe scheduler's log ends:\n{scheduler_log.read_text()[-3000:]}") from None

    def reasons() -> list[str]:
        listed = deployed.request("GET", f"/api/v1/namespaces/{namespace}/events")
        assert isinstance(listed, dict)
        return sorted(str(e.get("reason")) for e in listed["items"])

    wait_until(lambda: reasons().count("Scheduled") == 2 and "FailedScheduling" in reasons(), timeout=30, interval=0.2,
               what="a Scheduled Event per bind and a FailedScheduling Event")
