"""Builders for planning tests: snapshots made directly from decoded records.

``plan_cycle`` takes a ``Snapshot``; these helpers build one from a few pods
(with their usage), affinity targets and a Run, without the cluster state or
the ledger, so a planning test states exactly the world the planner sees.
Records come from :mod:`tests.builders` (JSON → decode), so every pod and
Run here is one the decoder could really produce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import (
    DEFAULT_CONFIG,
    PodSlot,
    Reservation,
    Run,
    RunKey,
    SchedulerConfig,
    Snapshot,
    Target,
    Workspace,
    frozen_labels,
    frozen_resources,
)
from kruntimes.pure.model.plan import Plan, Rejections
from kruntimes.pure.model.quantity import Amount
from tests.builders import NOW, NOW_TEXT, decoded_pod

__all__ = ["NOW", "plan", "rejections_map", "reservation", "slot", "snapshot", "target"]


def slot(
    name: str,
    capacity: Mapping[str, str] | None = None,
    usage: Mapping[str, Amount] | None = None,
    *,
    phase: str = "Running",
    ready: bool | None = True,
    deleting: bool = False,
    heartbeat_at: str | None = NOW_TEXT,
    heartbeat_status: str | None = "True",
    runtime: str = "python",
) -> PodSlot:
    """A Runtime Pod (by default Running, Ready, heartbeat fresh at ``NOW``) with ``usage``.

    The pod options mean what they mean in :func:`tests.builders.pod_json`.
    """
    built = decoded_pod(
        name,
        runtime=runtime,
        capacity=capacity,
        phase=phase,
        ready=ready,
        deleting=deleting,
        heartbeat_at=heartbeat_at,
        heartbeat_status=heartbeat_status,
    )
    return PodSlot(built, frozen_resources(dict(usage or {})))


def target(pod: str, labels: Mapping[str, str] | None = None, uid: str = "", assumed: bool = False) -> Target:
    """An affinity target (an active Run, or an assumed reservation) on ``pod``."""
    return Target(pod=pod, labels=frozen_labels(dict(labels or {})), run_uid=uid or f"target-on-{pod}", assumed=assumed)


def reservation(run: Run, pod: str = "p1") -> Reservation:
    """The ledger's reservation of ``run`` on ``pod`` (the Run's bind is in flight)."""
    return Reservation(
        namespace=run.namespace,
        run_uid=run.uid,
        run_name=run.name,
        resource_version=run.resource_version,
        pod=pod,
        pod_uid=f"uid-pod-{run.namespace}-{pod}",
        requests=run.requests,
        labels=run.labels,
    )


def snapshot(
    run: Run | None,
    pods: Sequence[PodSlot] = (),
    targets: Sequence[Target] = (),
    workspace: Workspace | None = None,
    own_reservation: Reservation | None = None,
    now: datetime = NOW,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> Snapshot:
    key = run.key if run is not None else RunKey("default", "missing")
    return Snapshot(
        key=key,
        run=run,
        pods=tuple(pods),
        targets=tuple(targets),
        workspace=workspace,
        reservation=own_reservation,
        now=now,
        config=config,
    )


def plan(snap: Snapshot, registry: Registry = DEFAULT_REGISTRY) -> Plan:
    """The plan of a cycle that must not fail."""
    return plan_cycle(snap, registry).unwrap()


def rejections_map(rejections: Rejections) -> dict[str, dict[str, int]]:
    """``{plugin: {reason: count}}``, the shape ``simulate`` prints."""
    result: dict[str, dict[str, int]] = {}
    for plugin, reason, count in rejections:
        result.setdefault(plugin, {})[reason] = count
    return result
