"""A filter plugin added in one file and one line is heard everywhere the scheduler speaks of filters.

The plugin (:mod:`tests.pure.example_plugin`) declares its reason, its claim on
the Pending message and its ``explain`` detail; nothing else in the code base
names it. Its metric series are checked in ``tests/effects/test_metrics.py``.
"""

from __future__ import annotations

from kruntimes.commands.explain import explanation_json, render_table
from kruntimes.pure.explain import explain
from kruntimes.pure.model import messages
from kruntimes.pure.model.plan import Bind, Wait
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from tests.builders import affinity_json, decoded_run, decoded_workspace, term
from tests.pure.example_plugin import WITH_AVOID_DRAINING, waiting_for_undrained
from tests.pure.planning_world import plan, slot, snapshot, target

DRAINING = waiting_for_undrained("python")


def test_the_plugin_refuses_draining_pods_under_its_own_reason() -> None:
    world = snapshot(decoded_run("r"), (slot("draining-a"), slot("b")))
    result = plan(world, WITH_AVOID_DRAINING)
    assert isinstance(result, Bind)
    assert result.pod == "b"
    assert result.rejections == (("AvoidDraining", "PodDraining", 1),)


def test_its_pending_message_replaces_the_generic_one() -> None:
    world = snapshot(decoded_run("r"), (slot("draining-a"), slot("b", ready=False)))
    assert plan(world, WITH_AVOID_DRAINING) == Wait(
        DRAINING, (("RuntimePodAvailability", "RuntimePodUnavailable", 1), ("AvoidDraining", "PodDraining", 1))
    )
    # The same pods without the plugin: the draining pod is a candidate again, the Run binds.
    assert isinstance(plan(world, DEFAULT_REGISTRY), Bind)


def test_the_generic_message_stands_when_the_plugin_rejected_nothing() -> None:
    world = snapshot(decoded_run("r"), (slot("a", ready=False),))
    result = plan(world, WITH_AVOID_DRAINING)
    assert isinstance(result, Wait)
    assert result.message == messages.waiting_for_pods("python")


def test_its_message_outranks_a_workspace_placement_as_its_rank_declares() -> None:
    run = decoded_run("r", workspace="ws")
    world = snapshot(run, (slot("draining-a"), slot("b")), workspace=decoded_workspace("ws", bound_pod="draining-a"))
    result = plan(world, WITH_AVOID_DRAINING)
    assert isinstance(result, Wait)
    assert {reason for _, reason, _ in result.rejections} == {"WorkspacePlacement", "PodDraining"}
    assert result.message == DRAINING
    # Without the plugin the Run binds to the pod its workspace is on.
    without = plan(world, DEFAULT_REGISTRY)
    assert isinstance(without, Bind) and without.pod == "draining-a"


def test_required_affinity_and_anti_affinity_still_outrank_it() -> None:
    needs_db = decoded_run("r", affinity=affinity_json(required=[term({"app": "db"})]))
    world = snapshot(needs_db, (slot("draining-a"), slot("b")), targets=(target("draining-a", {"app": "db"}),))
    result = plan(world, WITH_AVOID_DRAINING)
    assert isinstance(result, Wait)
    assert {reason for _, reason, _ in result.rejections} == {"UnsatisfiedRunAffinity", "PodDraining"}
    assert result.message == messages.waiting_for_affinity("python")

    shuns_db = decoded_run("s", affinity=affinity_json(anti_required=[term({"app": "db"})]))
    world = snapshot(shuns_db, (slot("draining-a"), slot("b")), targets=(target("b", {"app": "db"}),))
    result = plan(world, WITH_AVOID_DRAINING)
    assert isinstance(result, Wait)
    assert {reason for _, reason, _ in result.rejections} == {"UnsatisfiedRunAntiAffinity", "PodDraining"}
    assert result.message == messages.waiting_for_anti_affinity("python")


def test_its_pending_message_names_no_pod() -> None:
    world = snapshot(decoded_run("r"), (slot("draining-zz9"),))
    result = plan(world, WITH_AVOID_DRAINING)
    assert isinstance(result, Wait)
    assert "draining-zz9" not in result.message


def test_explain_shows_its_detail_beside_each_pod_it_refuses() -> None:
    world = snapshot(decoded_run("r"), (slot("draining-a"), slot("draining-b"), slot("c", ready=False)))
    exp = explain(world, WITH_AVOID_DRAINING)
    by_pod = {v.pod: (v.plugin, v.reason, v.detail) for v in exp.verdicts}
    detail = 'pod is draining (its name starts with "draining-")'
    assert by_pod == {
        "draining-a": ("AvoidDraining", "PodDraining", detail),
        "draining-b": ("AvoidDraining", "PodDraining", detail),
        "c": ("RuntimePodAvailability", "RuntimePodUnavailable", "pod is not Ready"),
    }
    printed = render_table(exp, None, None, width=200, all_pods=True)
    rows = [line for line in printed.splitlines() if line.strip().startswith("- ")]
    draining_rows = [row for row in rows if "draining-" in row]
    assert len(draining_rows) == 2
    assert all("AvoidDraining" in row and f"PodDraining: {detail}" in row for row in draining_rows)
    assert DRAINING in printed  # "the scheduler would now" wait with the plugin's message
    grouped = render_table(exp, None, None, width=200)  # by default the two share one line, with their count
    (group,) = [line.split() for line in grouped.splitlines() if "AvoidDraining" in line]
    assert group[:5] == ["-", "2", "pods", "runs", "0/2"] and " ".join(group).endswith(f"PodDraining: {detail}")
    pods = explanation_json(exp, None, "here")["pods"]
    assert isinstance(pods, list)
    shown = [(p["pod"], p["plugin"], p["reason"], p["detail"]) for p in pods if isinstance(p, dict)]
    assert ("draining-a", "AvoidDraining", "PodDraining", detail) in shown
