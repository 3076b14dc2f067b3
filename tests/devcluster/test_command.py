"""`kruntimes dev-cluster` as a user runs it: banner, kubeconfig, runtimes from flags, clean stop on SIGTERM."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kruntimes.devcluster import command
from tests.kubectl import Kubectl

from .helpers import LineReader, wait_until


def test_runtime_flags_parse_replicas_capacity_and_namespace() -> None:
    assert command.parse_runtime("python=3x2") == command.RuntimeSpec("default", "python", 3, 2)
    assert command.parse_runtime("team-a/node=1") == command.RuntimeSpec("team-a", "node", 1, 2)
    with pytest.raises(argparse.ArgumentTypeError):
        command.parse_runtime("python")


@pytest.mark.parametrize(("text", "seconds"), [("5", 5.0), ("2s", 2.0), ("500ms", 0.5), ("1m", 60.0)])
def test_durations_accept_plain_seconds_and_units(text: str, seconds: float) -> None:
    assert command.parse_duration(text) == seconds


def test_help_teaches_how_to_use_it() -> None:
    parser = argparse.ArgumentParser(prog="kruntimes dev-cluster")
    command.configure(parser)
    text = parser.format_help()
    for needle in ("--runtime", "python=3x2", "export KUBECONFIG", "kubectl get runs", "not a", "--execute-runs", "/_devcluster/faults"):
        assert needle in text


def test_the_command_serves_its_runtimes_until_sigterm_and_says_it_is_local(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "dev.kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kruntimes.devcluster", "--port", "0", "--runtime", "python=2x3", "--kubeconfig-out", str(kubeconfig), "--heartbeat-interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out = LineReader(proc)
        listening = out.wait_for(lambda line: line.startswith("listening on"), what="the listening line")
        assert re.fullmatch(r"listening on http://127\.0\.0\.1:\d+ \(loopback only\)", listening)
        out.wait_for(lambda line: line == "Ctrl-C to stop.", what="the end of the banner")
        banner = "\n".join(out.snapshot())
        assert "LOCAL, IN-MEMORY" in banner and "not a production cluster" in banner
        assert f"export KUBECONFIG={kubeconfig}" in banner
        kubectl = Kubectl(kubeconfig, tmp_path / "cache")
        wait_until(lambda: kubectl("get", "pods", "-l", "runtime=python", "-o", "name").stdout.split() == ["pod/python-0", "pod/python-1"], what="the runtime's pods")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert "stopping" in out.wait_for(lambda line: "stopping" in line, what="the stop line")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
