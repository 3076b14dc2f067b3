"""Chaos: the scheduler keeps every promise under injected faults, crashes and failovers.

Every test runs twice (``chaos_server``): ``[dev]`` on the in-process dev cluster, ``[real]`` on a
real kube-apiserver (``tests/chaos/servers.py``), where the schedulers run on the deploy/
ServiceAccount's token through a fault proxy, a 401 or 403 in their logs fails the test, and the
history the checker judges is what the proxies recorded, audited by the server's own watches.
The real server's epochs are smaller (fewer Runs; the same faults, kills and pauses).

Quick size (the normal suite, well under a minute): one epoch of a few hundred Runs with
every fault type, two replicas with short leases, leader SIGKILLs, SIGKILL and SIGTERM
restarts; then a single replica SIGKILLed and restarted; then two replicas whose leader is
SIGSTOPped past its Lease (every write — status and Events — is judged against the Lease holder
of its moment); then lost responses to committed status writes. Large size (``--chaos-large`` or
``KRUNTIMES_CHAOS=large``): thousands of Runs per test. ``benchmarks/chaos_large.py`` is
the 50,000-Run run.
"""

from __future__ import annotations

from pathlib import Path


from .harness import FAULTS, LOSE_RESPONSE, ChaosSpec, EpochResult, Target, run_epoch


def assert_kept_promises(result: EpochResult) -> None:
    summary = result.summary()
    # the history is the server's whole, and no request was refused: else nothing below means much
    assert result.audit == [], f"the recorded history is not the server's: {result.audit[:20]}"
    assert result.refused == [], f"a scheduler's request was refused: {result.refused[:10]}"
    assert result.settled, f"{result.diagnosis}\n{summary}"
    # the diagnosis first: a long summary gets cut in CI output, the violations must not
    assert result.report.ok, f"{result.diagnosis}\n{summary}"
    assert result.report.binds > 0, summary
    assert all(code == 0 for code in result.graceful_exit_codes), f"SIGTERM must exit 0: {summary}"


def test_every_fault_two_replicas_leader_kills(tmp_path: Path, chaos_large: bool, chaos_server: Target) -> None:
    spec = ChaosSpec(runs=3000 if chaos_large else chaos_server.size(240, 80), create_rate=40.0 if chaos_large else 16.0, fault_interval=0.2,
                     leader_kills=6 if chaos_large else 2, sigkill_restarts=6 if chaos_large else 2,
                     sigterm_restarts=2 if chaos_large else 1, seed=7)
    result = run_epoch(spec, tmp_path, server=chaos_server.server)
    assert_kept_promises(result)
    injected = {kind for kind, n in result.faults.items() if n > 0}
    assert injected == set(FAULTS), f"not injected: {set(FAULTS) - injected}; misses {dict(result.misses)}; extra phase {result.extra_phase}"
    assert result.kills["leader_sigkill"] == spec.leader_kills
    # standbys never write: every scheduler write (status, Events) was checked against the Lease holder of its moment
    assert result.report.checked["leader_only"] > 0


def test_single_replica_sigkilled_and_restarted(tmp_path: Path, chaos_large: bool, chaos_server: Target) -> None:
    spec = ChaosSpec(runs=2000 if chaos_large else chaos_server.size(120, 60), create_rate=40.0 if chaos_large else 15.0, replicas=1, leader_kills=0,
                     sigkill_restarts=8 if chaos_large else 2, sigterm_restarts=0, fault_interval=0.3, seed=11)
    result = run_epoch(spec, tmp_path, server=chaos_server.server)
    assert_kept_promises(result)
    assert result.kills["sigkill_restart"] == spec.sigkill_restarts


PAUSE_LEASE = (3.0, 1.5, 0.3)
"""Lease duration, renew deadline, retry period of the pause epochs: a write that passed the gate
right before a SIGSTOP may still wait out up to 1 s of injected server latency before it commits."""
PAUSE_SECONDS = (8.0, 9.0)
"""How long a pause epoch's SIGSTOP lasts: past the latest instant a standby can take over. It sees
the last renewal up to one retry period and one slowed read after it was written (0.3 + 1 s),
waits the lease (3 s), then reads once more and writes, or in sharded mode reads, fences and
takes: up to three requests, each slowed by up to 1 s of injected latency (0.3 + 3 s), 7.6 s at
worst. Pauses of 5-6 s ended before any takeover in one suite run of several on a loaded machine."""
PAUSE_FAULTS = tuple(f for f in FAULTS if f not in ("error_500", "error_503", "throttle_429", "gone_410"))
"""The quick pause epoch leaves out the faults that fail lists: a takeover relists every cache, and
under those a quick epoch spends most of its time waiting for the relist (the large one has them all)."""


def test_a_leader_paused_past_its_lease_writes_nothing_once_a_standby_took_over(tmp_path: Path, chaos_large: bool, chaos_server: Target) -> None:
    # a 3 s lease, a 1.5 s renew deadline (a margin above the injected latency): a SIGSTOP of
    # PAUSE_SECONDS outlives the lease and the standby's own retry period and injected latency
    spec = ChaosSpec(runs=1500 if chaos_large else chaos_server.size(150, 80), create_rate=40.0 if chaos_large else 16.0, fault_interval=0.25,
                     leader_kills=1 if chaos_large else 0, sigkill_restarts=0, sigterm_restarts=0,
                     leader_pauses=8 if chaos_large else 3, pause_seconds=PAUSE_SECONDS, lease=PAUSE_LEASE,
                     faults=FAULTS if chaos_large else PAUSE_FAULTS, seed=23)
    result = run_epoch(spec, tmp_path, server=chaos_server.server)
    assert_kept_promises(result)
    summary = result.summary()
    assert result.kills["leader_sigstop"] == spec.leader_pauses, summary
    assert result.takeovers_during_pauses >= 1, f"no pause outlived the lease: {summary}"
    # a request already past the gate when the SIGSTOP came commits after the SIGCONT: at most one
    # per writer thread (the workers and the Event writer), never a stream of queued writes
    assert len(result.in_flight) <= (spec.workers + 1) * spec.leader_pauses, summary
    # every write of every replica, Events included, was checked against the Lease holder of its moment
    assert result.report.checked["leader_only"] > result.report.binds, summary


def test_status_writes_whose_response_was_lost_keep_every_promise(tmp_path: Path, chaos_large: bool, chaos_server: Target) -> None:
    spec = ChaosSpec(runs=1500 if chaos_large else chaos_server.size(120, 60), create_rate=40.0 if chaos_large else 16.0, fault_interval=0.2,
                     leader_kills=2 if chaos_large else 1, sigkill_restarts=0, sigterm_restarts=0,
                     leader_pauses=2 if chaos_large else 1, pause_seconds=PAUSE_SECONDS, lease=PAUSE_LEASE,
                     faults=FAULTS + (LOSE_RESPONSE,), seed=31)
    result = run_epoch(spec, tmp_path, server=chaos_server.server)
    assert result.faults[LOSE_RESPONSE] > 0, result.summary()
    assert result.kills["leader_sigstop"] == spec.leader_pauses, result.summary()
    assert_kept_promises(result)


SHARD_NAMESPACES = ("default", "chaos-b", "chaos-c", "chaos-d", "chaos-e", "chaos-f")


def test_sharded_replicas_never_write_for_a_namespace_they_do_not_own(tmp_path: Path, chaos_large: bool, chaos_server: Target) -> None:
    # three replicas share six namespaces; one is SIGSTOPped past its lease (its namespaces are fenced
    # and taken over while it sleeps), another SIGKILLed and restarted: every write, status and Events,
    # is judged against its namespace's assignment Lease at that point of the commit order
    spec = ChaosSpec(runs=1500 if chaos_large else chaos_server.size(180, 90), create_rate=40.0 if chaos_large else 16.0, fault_interval=0.25,
                     namespaces=SHARD_NAMESPACES, pods_per_runtime=2, replicas=3, shard_group="chaos",
                     leader_kills=0, sigkill_restarts=3 if chaos_large else 1, sigterm_restarts=1 if chaos_large else 0,
                     replica_pauses=4 if chaos_large else 1, pause_seconds=PAUSE_SECONDS, lease=PAUSE_LEASE,
                     faults=FAULTS if chaos_large else PAUSE_FAULTS, seed=41)
    result = run_epoch(spec, tmp_path, server=chaos_server.server)
    assert_kept_promises(result)
    summary = result.summary()
    assert result.kills["replica_sigstop"] == spec.replica_pauses, summary
    assert result.kills["sigkill_restart"] == spec.sigkill_restarts, summary
    assert result.takeovers_during_pauses >= 1, f"no namespace of the paused replica changed hands: {summary}"
    assert len(result.in_flight) <= (spec.workers + 1) * spec.replica_pauses, summary
    # no election: every write was judged by its namespace's owner, and the work was shared
    assert result.report.checked["leader_only"] == 0, summary
    assert result.report.checked["shard_owner"] > result.report.binds, summary
    assert len([who for who, n in result.binds_by_writer.items() if n > 0]) >= 2, summary
