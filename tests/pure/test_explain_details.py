"""What ``kruntimes explain`` says beside a pod refused for affinity or for the Run's workspace:
the term that failed, as ``kubectl -l`` would take its selector, and where its matches are."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kruntimes.pure.explain import explain, selector_text
from kruntimes.pure.model.objects import LabelSelector, PodSlot, Run, Target, Workspace
from tests.builders import Json, affinity_json, decoded_run, decoded_workspace, expression, term
from tests.pure.planning_world import slot, snapshot, target


def details(run: Run, pods: Sequence[PodSlot], targets: Sequence[Target] = (), workspace: Workspace | None = None) -> dict[str, str]:
    return {v.pod: v.detail for v in explain(snapshot(run, pods, targets, workspace)).verdicts}


def requiring(*terms: Json, labels: dict[str, str] | None = None) -> Run:
    return decoded_run("r", labels=labels, affinity=affinity_json(required=list(terms)))


def avoiding(*terms: Json) -> Run:
    return decoded_run("r", affinity=affinity_json(anti_required=list(terms)))


# --- required affinity ----------------------------------------------------------------------------


def test_a_refused_pod_names_the_first_term_it_fails_and_every_pod_hosting_a_match() -> None:
    run = requiring(term({"zone": "blue"}), term({"tier": "gold"}))
    targets = [target("p3", {"zone": "blue", "tier": "gold"}), target("p2", {"zone": "blue"}, uid="t2")]
    got = details(run, [slot("p1"), slot("p2"), slot("p3")], targets)
    assert got == {
        "p3": "feasible",
        "p1": "required affinity term 1 (zone=blue): hosts no matching Run (matching Runs are on p2, p3)",
        "p2": "required affinity term 2 (tier=gold): hosts no matching Run (matching Runs are on p3)",
    }


def test_a_term_the_run_can_seed_is_skipped_in_the_explanation() -> None:
    run = requiring(term({"app": "db"}), term({"cohort": "lab"}), labels={"app": "db"})
    assert details(run, [slot("p1")]) == {
        "p1": "required affinity term 2 (cohort=lab): no active Run in the namespace matches it, "
        "and the Run's own labels do not (cannot seed)",
    }


# --- required anti-affinity -----------------------------------------------------------------------


def test_a_pod_refused_for_anti_affinity_counts_its_matching_runs_and_the_assumed_ones() -> None:
    run = avoiding(term({"app": "db"}), term({"app": "cache"}))
    targets = [
        target("p1", {"app": "cache"}, uid="t1"),
        target("p1", {"app": "cache"}, uid="t2", assumed=True),
        target("p1", {"app": "web"}, uid="t3"),
        target("p2", {"app": "db"}, uid="t4"),
        target("p3", {"app": "cache"}, uid="t5", assumed=True),
    ]
    got = details(run, [slot("p1"), slot("p2"), slot("p3"), slot("p4")], targets)
    assert got == {
        "p4": "feasible",
        "p1": "required anti-affinity term 2 (app=cache): hosts 2 matching Runs, 1 assumed",
        "p2": "required anti-affinity term 1 (app=db): hosts 1 matching Run",
        "p3": "required anti-affinity term 2 (app=cache): hosts 1 matching Run, 1 assumed",
    }


# --- selectors as kubectl -l takes them ------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        (term({"app": "db", "tier": "gold"}), "app=db,tier=gold"),
        (term(expressions=[expression("tier", "In", ["silver", "gold"])]), "tier in (gold,silver)"),
        (term(expressions=[expression("tier", "NotIn", ["silver", "gold"])]), "tier notin (gold,silver)"),
        (term(expressions=[expression("gpu", "Exists")]), "gpu"),
        (term(expressions=[expression("legacy", "DoesNotExist")]), "!legacy"),
    ],
    ids=["labels", "in", "notin", "exists", "does not exist"],
)
def test_the_failed_term_shows_its_selector_as_kubectl_takes_it(selector: Json, text: str) -> None:
    run = avoiding(selector)
    matching = {"app": "db", "tier": "gold", "gpu": "1"} if text != "tier notin (gold,silver)" else {"tier": "bronze"}
    assert details(run, [slot("p1")], [target("p1", matching)]) == {
        "p1": f"required anti-affinity term 1 ({text}): hosts 1 matching Run",
    }


def test_an_empty_selector_read_from_a_cycle_log_shows_as_everything() -> None:
    assert selector_text(LabelSelector(())) == "everything"


# --- the Run's workspace ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workspace", "detail"),
    [
        (decoded_workspace("ws", bound_pod="p2"), 'workspace "ws" is bound to pod p2'),
        (None, 'workspace "ws" does not exist'),
        (decoded_workspace("other", bound_pod="p2"), 'workspace "ws" does not exist'),
        (decoded_workspace("ws", runtime="node", bound_pod="p2"), 'workspace "ws" is for runtime "node"'),
        (decoded_workspace("ws"), 'workspace "ws" is Bound to no pod'),
        (decoded_workspace("ws", phase="Lost", bound_pod="p2"), 'workspace "ws" is Lost'),
        (decoded_workspace("ws", phase="Released"), 'workspace "ws" is Released'),
    ],
    ids=["bound elsewhere", "missing", "another name", "another runtime", "bound to no pod", "lost", "released"],
)
def test_a_pod_refused_for_the_workspace_says_what_is_wrong_with_it(workspace: Workspace | None, detail: str) -> None:
    run = decoded_run("r", workspace="ws")
    assert details(run, [slot("p1")], workspace=workspace) == {"p1": detail}
