"""WorkspacePlacement: the constraint in SPEC §4's exact check order, and the filter."""

from __future__ import annotations

import pytest

from kruntimes.pure.model.objects import Workspace, WorkspaceRef
from kruntimes.pure.plugins.workspace import NoConstraint, OnlyPod, Unavailable, WorkspaceConstraint, WorkspacePlacement, workspace_constraint
from tests.builders import decoded_run, decoded_workspace
from tests.pure.planning_world import slot, snapshot

REF = WorkspaceRef("ws")


def ws(**kwargs: object) -> Workspace:
    return decoded_workspace("ws", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ref", "workspace", "expected"),
    [
        (None, None, NoConstraint()),
        (None, ws(bound_pod="p1"), NoConstraint()),
        (REF, None, Unavailable()),
        (REF, decoded_workspace("other", bound_pod="p1"), Unavailable()),
        (REF, ws(runtime="java", bound_pod="p1"), Unavailable()),
        (REF, ws(runtime="java", phase="Pending"), Unavailable()),
        (REF, ws(runtime="java", mode="Shared"), Unavailable()),
        (REF, ws(phase="Lost", bound_pod="p1"), Unavailable()),
        (REF, ws(phase="Released", bound_pod="p1"), Unavailable()),
        (REF, ws(phase="Lost", mode="Shared"), Unavailable()),
        (REF, ws(bound_pod="p1"), OnlyPod("p1")),
        (REF, ws(mode="", bound_pod="p1"), OnlyPod("p1")),
        (REF, ws(bound_pod=""), Unavailable()),
        (REF, ws(mode="Shared", bound_pod=""), Unavailable()),
        (REF, ws(mode="Shared", bound_pod="p1"), NoConstraint()),
        (REF, ws(phase="Pending"), NoConstraint()),
        (REF, ws(phase="Pending", bound_pod="p1"), NoConstraint()),
        (REF, ws(phase=""), NoConstraint()),
    ],
)
def test_workspace_constraint_order(ref: WorkspaceRef | None, workspace: Workspace | None, expected: WorkspaceConstraint) -> None:
    assert workspace_constraint(ref, workspace, "python") == expected


def test_the_filter_admits_only_the_bound_pod() -> None:
    run = decoded_run("r", workspace="ws")
    pods = (slot("p1"), slot("p2"))
    pod_filter = WorkspacePlacement().prepare(run, snapshot(run, pods, workspace=ws(bound_pod="p2"))).unwrap()
    assert pod_filter is not None
    assert [pod_filter(p) for p in pods] == ["WorkspacePlacement", None]


def test_an_unavailable_workspace_rejects_every_pod() -> None:
    run = decoded_run("r", workspace="ws")
    pods = (slot("p1"), slot("p2"))
    pod_filter = WorkspacePlacement().prepare(run, snapshot(run, pods, workspace=ws(phase="Lost"))).unwrap()
    assert pod_filter is not None
    assert [pod_filter(p) for p in pods] == ["WorkspaceUnavailable", "WorkspaceUnavailable"]


def test_no_constraint_skips_the_filter() -> None:
    run = decoded_run("r")
    assert WorkspacePlacement().prepare(run, snapshot(run, (slot("p1"),))).unwrap() is None
