"""No I/O, no clock, no randomness: everything that decides a placement lives here.

This package is the typed library surface of kruntimes. A cycle is:

    state = state.cluster.from_objects(decoded objects)    # or cluster.apply(state, event)
    step = step.transact(state, ledger, RunKey(ns, name), now, config, registry)
    step.plan, step.write, step.ledger                     # the plan, the status write, the next ledger

and everything it touches is an immutable value, so a cycle can be logged
(``cyclelog``) and replayed bit for bit. See ``docs/architecture.md``.
"""

from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply, from_objects
from kruntimes.pure.readers.cyclelog import CycleRecord, decode_record, encode_record
from kruntimes.pure.readers.kube import DecodeError, decode_object, decode_pod, decode_run, decode_workspace
from kruntimes.pure.framework.interface import FilterPlugin, PodFilter, PodScorer, ScorePlugin, normalize_to_max
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, RegistryError, Registry
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger, ReserveConflict, observe, release, reserve, sync
from kruntimes.pure.model.objects import (
    DEFAULT_CONFIG,
    LabelSelector,
    PodSlot,
    Requirement,
    Reservation,
    Run,
    RunKey,
    RuntimePod,
    SchedulerConfig,
    Snapshot,
    Target,
    Workspace,
)
from kruntimes.pure.model.plan import Bind, Cancel, CycleError, Delay, Fail, Plan, PodScore, Skip, Wait
from kruntimes.pure.model.quantity import Amount, format_quantity, parse_quantity
from kruntimes.pure.snapshot import take
from kruntimes.pure.status import StatusPatch, applied, patch_body, status_for
from kruntimes.pure.step import Planned, Settled, Step, transact
from kruntimes.pure.wakeups import Signal, signals

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_REGISTRY",
    "EMPTY_LEDGER",
    "EMPTY_REGISTRY",
    "EMPTY_STATE",
    "Amount",
    "Bind",
    "Cancel",
    "ClusterState",
    "RegistryError",
    "CycleError",
    "CycleRecord",
    "DecodeError",
    "Delay",
    "Event",
    "Fail",
    "FilterPlugin",
    "LabelSelector",
    "Ledger",
    "Plan",
    "PodFilter",
    "PodScore",
    "PodScorer",
    "PodSlot",
    "Registry",
    "Requirement",
    "Reservation",
    "ReserveConflict",
    "Run",
    "RunKey",
    "RuntimePod",
    "SchedulerConfig",
    "ScorePlugin",
    "Skip",
    "Snapshot",
    "StatusPatch",
    "Target",
    "Wait",
    "Planned",
    "Settled",
    "Signal",
    "Step",
    "Workspace",
    "applied",
    "apply",
    "decode_object",
    "decode_pod",
    "decode_record",
    "decode_run",
    "decode_workspace",
    "encode_record",
    "format_quantity",
    "from_objects",
    "normalize_to_max",
    "observe",
    "parse_quantity",
    "patch_body",
    "plan_cycle",
    "release",
    "reserve",
    "status_for",
    "sync",
    "take",
    "signals",
    "transact",
]
