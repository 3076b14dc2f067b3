"""Process-level promises that the chaos harness relies on: SIGTERM is a graceful exit 0; a
thread that cannot continue is not: the process lets go of its Leases and exits non-zero.

Each runs on both servers (``chaos_server``): on the real one the scheduler runs on the deploy/
ServiceAccount's token through a fault proxy (no fault set), and a 401 or 403 in its log fails the test."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kruntimes.pure.sharding import DEFAULT_GROUP, assignment_lease_name, member_lease_name

from .harness import KRUNTIMES, Target, refused_lines
from .servers import LEASES, RUNS, ChaosServer
from tests.polling import wait_until


def _sigterm_after(server: ChaosServer, directory: Path, delay: float) -> int:
    log = directory / "scheduler.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(KRUNTIMES), "scheduler", "--kubeconfig", str(server.scheduler_kubeconfig(directory)), "--metrics-bind-address", "0",
             "--health-probe-bind-address", "0", "--leader-elect", "--leader-elect-resource-namespace", server.lease_namespace,
             "--leader-elect-identity", "t",
             "--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "300ms"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    assert not refused_lines(log.read_text(errors="replace")), log.read_text(errors="replace")[-3000:]
    return code


def test_sigterm_of_a_running_scheduler_exits_0(tmp_path: Path, chaos_server: Target) -> None:
    with chaos_server.server(1, 0.3, workdir=tmp_path, sharded=False) as server:
        assert _sigterm_after(server, tmp_path, 2.0) == 0


def test_sigterm_while_the_scheduler_is_still_importing_exits_0(tmp_path: Path, chaos_server: Target) -> None:
    """0.5 s after exec the process is importing the Kubernetes client (about 1 s): a signal
    there was once fatal (exit 143); ``cli.main`` now records it from its first line.
    (Before the interpreter runs any Python code, no process can install a handler.)"""
    with chaos_server.server(1, 0.3, workdir=tmp_path, sharded=False) as server:
        assert _sigterm_after(server, tmp_path, 0.5) == 0


BROKEN_INFORMER = """
import sys
from kruntimes.effects import informer

emit = informer.Informer._emit

def broken(self, type_, obj):
    if obj.name == "trigger":
        raise RuntimeError("injected " + "into the informer loop")
    emit(self, type_, obj)

informer.Informer._emit = broken
from kruntimes.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""``kruntimes scheduler`` whose Run informer meets a bug in its loop itself (outside the handling
of one object, which would only skip the object) when a Run called ``trigger`` arrives, by a watch
event or a list: the Run is created once the scheduler holds its Lease, and its informer may list
after that (a sharded replica lists a namespace as it takes it)."""

TIMINGS = ("--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms",
           "--leader-elect-retry-period", "300ms")


def _holder(server: ChaosServer, name: str) -> str | None:
    """The Lease's holder ("" when released), ``None`` when there is no such Lease."""
    got = next((o for o in server.objects(LEASES, server.lease_namespace, fresh=True) if o["metadata"]["name"] == name), None)
    if got is None:
        return None
    spec = got.get("spec")
    return str(spec.get("holderIdentity") or "") if isinstance(spec, dict) else ""


@pytest.mark.parametrize("mode", ["leader-elect", "shard-by-namespace"])
def test_a_scheduler_whose_informer_thread_cannot_continue_lets_go_of_its_leases_and_exits_non_zero(
    tmp_path: Path, mode: str, chaos_server: Target
) -> None:
    """Nothing but the failure stops the process; should it not stop within a minute, a SIGTERM
    must still not report a clean exit."""
    sharded = mode == "shard-by-namespace"
    held = assignment_lease_name(DEFAULT_GROUP, "default") if sharded else "kruntimes-scheduler"
    with chaos_server.server(1, 0.3, workdir=tmp_path, sharded=sharded) as server:
        kubeconfig = server.scheduler_kubeconfig(tmp_path)
        mode_flags = ["--shard-by-namespace", "--namespace", "default"] if sharded else []
        proc = subprocess.Popen(
            [sys.executable, "-c", BROKEN_INFORMER, "scheduler", "--kubeconfig", str(kubeconfig),
             "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-format", "json",
             "--leader-elect", "--leader-elect-resource-namespace", server.lease_namespace, "--leader-elect-identity", "t",
             *TIMINGS, *mode_flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_until(lambda: _holder(server, held) == "t", timeout=60, what=f"the scheduler holds {held}")
            assert server.create(RUNS, "default", {
                "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
                "metadata": {"name": "trigger", "namespace": "default"}, "spec": {"runtime": "python", "mode": {"task": {}}},
            }, "kruntimes-tests") is not None
            try:
                code = proc.wait(60)
                exited_by_itself = True
            except subprocess.TimeoutExpired:
                exited_by_itself = False
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(30)
            _, stderr = proc.communicate(timeout=10)
            assert code != 0, f"exit {code} after its informer thread died (by itself: {exited_by_itself})"
            assert exited_by_itself
            assert _holder(server, held) == "", f"{held} was not released"
            if sharded:
                assert _holder(server, member_lease_name(DEFAULT_GROUP, "t")) is None, "the membership Lease is left"
            # the message is not logged (the type and the stack are); from Python 3.13 on, the stack
            # quotes this -c script's source, which spells the message in two halves
            assert '"thread_name":"informer-runs"' in stderr and "injected into the informer loop" not in stderr
            assert not refused_lines(stderr), stderr[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
