"""The scheduler as deploy/ installs it: its own ServiceAccount, its own RBAC, the real API server."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane.server import ControlPlane, free_port
from tests.polling import wait_until

from .support import create, dumps, ready_runtime_pod, run_manifest, runs

KRUNTIMES = Path(sys.executable).with_name("kruntimes")


@pytest.fixture
def scheduler_process(scheduler_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "scheduler.log"
    health = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(KRUNTIMES), "scheduler", "--kubeconfig", str(scheduler_kubeconfig), "--namespace", namespace,
             # deploy/ grants the one Lease the Deployment uses: a test of its own may not make another
             "--leader-elect=false",
             "--metrics-bind-address", "0", "--health-probe-bind-address", f"127.0.0.1:{health}", "--log-format", "json"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        # ready and leading: from now on each new Run is planned by its own event
        wait_until(lambda: _ready(health), timeout=60, interval=0.1, what="the scheduler's /readyz")
        yield proc, log
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-3000:]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_the_scheduler_binds_runs_as_its_own_service_account_without_a_403(
    deployed: ControlPlane, namespace: str, scheduler_process: tuple[subprocess.Popen[bytes], Path]
) -> None:
    _, log = scheduler_process
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "2"})
    for i in range(3):
        create(deployed, f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", run_manifest(namespace, f"r{i}", "python"))
    def phases() -> list[str]:
        return sorted(r.get("status", {}).get("phase", "") for r in runs(deployed, namespace).values())

    try:  # two bound, the third told why it waits: the pod's two slots are taken
        wait_until(lambda: phases() == ["Pending", "Scheduled", "Scheduled"], timeout=60, interval=0.2, what="two bound, one waiting")
    except AssertionError as failed:
        raise AssertionError(f"{failed}: {dumps(runs(deployed, namespace))}\nthe scheduler's log ends:\n{log.read_text()[-3000:]}") from None
    text = log.read_text()
    assert "forbidden" not in text.lower() and " 403" not in text, text[-3000:]
