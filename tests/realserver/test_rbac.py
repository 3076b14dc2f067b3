"""The scheduler as deploy/ installs it: its own ServiceAccount, its own RBAC, the real API server."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import create, ready_runtime_pod, run_manifest, runs

KRUNTIMES = Path(sys.executable).with_name("kruntimes")


@pytest.fixture
def scheduler_process(scheduler_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "scheduler.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(KRUNTIMES), "scheduler", "--kubeconfig", str(scheduler_kubeconfig), "--namespace", namespace,
             # deploy/ grants the one Lease the Deployment uses: a test of its own may not make another
             "--leader-elect=false",
             "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-format", "json"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        yield proc, log
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-3000:]


def test_the_scheduler_binds_runs_as_its_own_service_account_without_a_403(
    deployed: ControlPlane, namespace: str, scheduler_process: tuple[subprocess.Popen[bytes], Path]
) -> None:
    _, log = scheduler_process
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "2"})
    for i in range(3):
        create(deployed, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", run_manifest(namespace, f"r{i}", "python"))
    wait_until(
        lambda: sum(1 for r in runs(deployed, namespace).values() if r.get("status", {}).get("phase") == "Scheduled") == 2,
        timeout=60, interval=0.2, what="two Runs scheduled",
    )
    time.sleep(1)  # a third bind would overcommit: give it the chance to show
    phases = sorted(r.get("status", {}).get("phase", "") for r in runs(deployed, namespace).values())
    assert phases == ["Pending", "Scheduled", "Scheduled"]
    text = log.read_text()
    assert "forbidden" not in text.lower() and " 403" not in text, text[-3000:]
