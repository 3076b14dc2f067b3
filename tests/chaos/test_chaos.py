"""Chaos: the scheduler keeps every promise under injected faults, crashes and failovers.

Quick size (the normal suite, well under a minute): one epoch of a few hundred Runs with
every fault type, two replicas with short leases, leader SIGKILLs, SIGKILL and SIGTERM
restarts; then a single replica SIGKILLed and restarted. Large size (``--chaos-large`` or
``KRUNTIMES_CHAOS=large``): thousands of Runs per test. ``benchmarks/chaos_large.py`` is
the 50,000-Run run.
"""

from __future__ import annotations

from pathlib import Path

from .harness import FAULTS, ChaosSpec, EpochResult, run_epoch


def assert_kept_promises(result: EpochResult) -> None:
    summary = result.summary()
    assert result.settled, summary
    # the diagnosis first: a long summary gets cut in CI output, the violations must not
    assert result.report.ok, f"{result.diagnosis}\n{summary}"
    assert result.report.binds > 0, summary
    assert all(code == 0 for code in result.graceful_exit_codes), f"SIGTERM must exit 0: {summary}"


def test_every_fault_two_replicas_leader_kills(tmp_path: Path, chaos_large: bool) -> None:
    spec = ChaosSpec(runs=3000 if chaos_large else 240, create_rate=40.0 if chaos_large else 16.0, fault_interval=0.2,
                     leader_kills=6 if chaos_large else 2, sigkill_restarts=6 if chaos_large else 2,
                     sigterm_restarts=2 if chaos_large else 1, seed=7)
    result = run_epoch(spec, tmp_path)
    assert_kept_promises(result)
    injected = {kind for kind, n in result.faults.items() if n > 0}
    assert injected == set(FAULTS), f"not injected: {set(FAULTS) - injected}"
    assert result.kills["leader_sigkill"] == spec.leader_kills
    # standbys never write: every scheduler write on runs was checked against the Lease holder of its moment
    assert result.report.checked["leader_only"] > 0


def test_single_replica_sigkilled_and_restarted(tmp_path: Path, chaos_large: bool) -> None:
    spec = ChaosSpec(runs=2000 if chaos_large else 120, create_rate=40.0 if chaos_large else 15.0, replicas=1, leader_kills=0,
                     sigkill_restarts=8 if chaos_large else 2, sigterm_restarts=0, fault_interval=0.3, seed=11)
    result = run_epoch(spec, tmp_path)
    assert_kept_promises(result)
    assert result.kills["sigkill_restart"] == spec.sigkill_restarts
