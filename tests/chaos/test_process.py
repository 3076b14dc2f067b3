"""Process-level promises that the chaos harness relies on: SIGTERM is a graceful exit 0."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


from kruntimes.devcluster import DevCluster

from .harness import KRUNTIMES


def _sigterm_after(kubeconfig: Path, delay: float) -> int:
    proc = subprocess.Popen(
        [str(KRUNTIMES), "scheduler", "--kubeconfig", str(kubeconfig), "--metrics-bind-address", "0",
         "--health-probe-bind-address", "0", "--leader-elect", "--leader-elect-resource-namespace", "default",
         "--leader-elect-identity", "t",
         "--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "300ms"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def test_sigterm_of_a_running_scheduler_exits_0(tmp_path: Path) -> None:
    with DevCluster.start(simulator=None) as cluster:
        assert _sigterm_after(cluster.kubeconfig_path(tmp_path), 2.0) == 0


def test_sigterm_while_the_scheduler_is_still_importing_exits_0(tmp_path: Path) -> None:
    """0.5 s after exec the process is importing the Kubernetes client (about 1 s): a signal
    there was once fatal (exit 143); ``cli.main`` now records it from its first line.
    (Before the interpreter runs any Python code, no process can install a handler.)"""
    with DevCluster.start(simulator=None) as cluster:
        assert _sigterm_after(cluster.kubeconfig_path(tmp_path), 0.5) == 0
