"""The scheduler process: informers, work queue, N workers, leader election, HTTP probes.

Threads (docs/operations.md, "Which thread spends the CPU", names them):

- one informer per (kind, namespace) — Runs, Runtime Pods (label ``runtime``),
  PersistentWorkspaces — each event one swap of the ``ClusterState`` atom and one
  call to ``on_event``, which turns ``pure.wakeups`` into queue adds;
- a control thread: waits for the caches to sync, then leads at once (no
  election) or campaigns for the Lease and re-campaigns after losing it;
- while leading: N workers, each taking one key at a time from this term's
  ``WorkQueue`` and running ``scheduling.SchedulingCycle`` on it;
- the event recorder's writer, the metrics and the probe HTTP servers.

Leadership terms: becoming leader resets the ledger to empty (a new leader
rebuilds usage from persisted assignments only, SPEC §6), relists every
informer when elected (a standby's watch may lag the previous leader's last
binds; nothing is planned until the consistent relist has been applied), then
creates a fresh queue, starts the workers and activates every Pending Run in
``queueing.initial_order``. Losing the lease stops the workers at once: the
queue shuts down and ``may_write`` turns false, so a cycle in flight writes
nothing more. A graceful ``stop()`` instead lets in-flight cycles finish their
writes *before* the lease is released (releasing first would let the next
leader plan against a ledger that lacks our in-flight reservation).

Standbys run the informers (warm caches, ready to take over) but no workers,
and write nothing.

Supervision (``threads.Supervisor``): every thread here runs under one supervisor. One
object whose handling raises is skipped (an informer's event, a worker's key, backed off; an
Event) and counted; a thread that cannot continue closes the write gate at once and fails both
probes, and ``failure`` names it: ``kruntimes scheduler`` then stops (releasing what it holds) and
exits non-zero, so the kubelet restarts it.

A server that lost its state (an informer sees a resourceVersion go back or a
"too large resource version" answer; the elector finds its Lease gone, replaced
or older: ``kubeclient/reflector.py``, ``kubeclient/leader.py``) starts everything over from a fresh
read, as a new leader does: writes close at once, the term ends (its workers
stop), every informer relists trusting nothing it knew, and a new term opens on
those lists with an empty ledger. A standby only relists. In sharded mode the
cycles in flight finish, every informer relists, the ledger is emptied and every
Pending Run is activated again. Writes reopen once that is done.

Sharded mode (``shard_group``, ``--shard-by-namespace``): no election; every replica runs
its workers from the start and ``effects.sharding.ShardMember`` decides which namespaces it
owns. ``shardhost.ShardHost`` is that member's ``NamespaceHost``: a namespace taken gets its own three
informers (their first list is the new owner's consistent read), an empty ledger for it and
its Pending Runs activated once the lists are applied; a namespace let go has its keys
dropped, its informers stopped and its objects forgotten. The write gate is asked per
namespace, and a worker drops a key whose namespace is not open here.

Modules: ``options`` (the flags' values and their checks), ``scheduler`` (the ``Scheduler``:
wiring, terms, resets), ``servers`` (the HTTP ports), ``election`` (the elected mode's
campaigns), ``shardhost`` (sharded mode's ``NamespaceHost``).
"""

from kruntimes.effects.runner.options import (
    GC_GEN0_THRESHOLD,
    GC_TUNING_ENV,
    LeaderElectionOptions,
    ListenError,
    SchedulerOptions,
    parse_bind_address,
    tune_gc,
)
from kruntimes.effects.runner.scheduler import Scheduler, workspace_wakeups

__all__ = [
    "GC_GEN0_THRESHOLD",
    "GC_TUNING_ENV",
    "LeaderElectionOptions",
    "ListenError",
    "Scheduler",
    "SchedulerOptions",
    "parse_bind_address",
    "tune_gc",
    "workspace_wakeups",
]
