"""`kruntimes explain`: the pure per-pod verdicts agree with ``plan_cycle``, and the command reads a live cluster.

The pure half needs no server: ``explain(snapshot)`` must show exactly the
feasible pods and the ranking ``plan_cycle`` binds by (checked on generated
worlds), count exactly the rejections it counts, and say in words which
condition each rejection stands for. The command half talks HTTP to the
project's local API server (simulator off: pods and Runs are written directly),
with no scheduler running.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from returns.result import Success

from kruntimes.cli import main
from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.kube import Kube, load_configuration
from kruntimes.pure.state.cluster import from_objects
from kruntimes.pure.model.objects import Object
from kruntimes.pure.readers.cyclelog import CycleRecord, encode_record
from kruntimes.pure.explain import FEASIBLE, explain
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import DEFAULT_CONFIG, RunKey
from kruntimes.pure.model.plan import Bind, Delay, Fail, Wait
from kruntimes.pure.snapshot import take
from kruntimes.pure.model.times import format_time
from tests.builders import (
    make_pod,
    make_run,
    NOW,
    active_run,
    affinity_json,
    at,
    decoded_pod,
    decoded_run,
    decoded_workspace,
    term,
)
from tests.pure.planning_world import reservation, slot, snapshot, target
from tests.pure.test_plan_properties import World, worlds

# --- pure: consistent with plan_cycle ------------------------------------------------------------


@given(worlds())
def test_explain_shows_exactly_the_feasible_pods_and_ranking_plan_cycle_binds_by(world: World) -> None:
    snap = world.snapshot()
    exp = explain(snap)
    plan = plan_cycle(snap).unwrap()
    assert exp.plan == Success(plan)
    if isinstance(plan, Fail):  # the world's Run is refused before any pod is looked at (invalid requests)
        assert not exp.evaluated and exp.verdicts == ()
        return
    assert exp.evaluated and not exp.hypothetical
    assert sorted(v.pod for v in exp.verdicts) == sorted(s.pod.name for s in snap.pods)
    feasible = [v for v in exp.verdicts if v.feasible]
    if isinstance(plan, Bind):
        assert tuple(v.pod for v in feasible) == plan.ranking
        assert tuple(v.score for v in feasible) == plan.scores
        assert [v.rank for v in feasible] == list(range(1, len(feasible) + 1))
        assert feasible[0].pod == plan.pod
        rejections = plan.rejections
    else:
        assert isinstance(plan, Wait)
        assert feasible == []
        rejections = plan.rejections
    counted: dict[tuple[str, str], int] = {}
    for verdict in exp.verdicts:
        if not verdict.feasible:
            assert verdict.plugin is not None and verdict.reason is not None
            counted[(verdict.plugin, verdict.reason)] = counted.get((verdict.plugin, verdict.reason), 0) + 1
            assert verdict.detail and verdict.detail != FEASIBLE
    assert counted == {(plugin, reason): count for plugin, reason, count in rejections}
    # feasible pods first (rank order), then the rejected ones in the snapshot's (name) order
    rejected = [v.pod for v in exp.verdicts if not v.feasible]
    assert [v.pod for v in exp.verdicts] == [v.pod for v in feasible] + rejected
    assert rejected == [s.pod.name for s in snap.pods if s.pod.name in set(rejected)]


def test_spec_weighted_example_ranks_runtime_c_first_with_totals_150_100_50() -> None:
    prefers = affinity_json(preferred=[(1, term({"zone": "blue"})), (1, term({"tier": "gold"}))])
    objects: list[Object] = [
        decoded_pod("runtime-a", capacity={"runs": "2"}),
        decoded_pod("runtime-b", capacity={"runs": "4"}),
        decoded_pod("runtime-c", capacity={"runs": "4"}),
        active_run("warm-gold", "runtime-a", labels={"zone": "blue", "tier": "gold"}),
        active_run("warm-plain-1", "runtime-b"),
        active_run("warm-plain-2", "runtime-b", phase="Ready"),
        active_run("warm-blue", "runtime-c", labels={"zone": "blue"}, phase="Scheduled"),
        decoded_run("pick", affinity=prefers),
    ]
    snap = take(from_objects(objects), EMPTY_LEDGER, RunKey("default", "pick"), NOW, DEFAULT_CONFIG)
    exp = explain(snap)
    assert [(v.pod, v.rank, v.score.total if v.score else None) for v in exp.verdicts] == [
        ("runtime-c", 1, 150),
        ("runtime-a", 2, 100),
        ("runtime-b", 3, 50),
    ]
    by_pod = {v.pod: dict(v.score.by_plugin) for v in exp.verdicts if v.score is not None}
    assert by_pod["runtime-c"] == {"PreferredRunAffinity": 50, "LeastLoaded": 100}
    assert by_pod["runtime-a"] == {"PreferredRunAffinity": 100, "LeastLoaded": 0}
    assert by_pod["runtime-b"] == {"PreferredRunAffinity": 0, "LeastLoaded": 50}
    decided = exp.plan.unwrap()
    assert isinstance(decided, Bind) and decided.pod == "runtime-c"


def test_each_rejection_names_the_condition_that_failed() -> None:
    run = decoded_run(
        "r",
        labels={"app": "db"},
        requests={"runs": "1", "gpu": "1"},
        affinity=affinity_json(required=[term({"cohort": "lab"})], anti_required=[term({"app": "db"})]),
    )
    pods = [
        slot("down", {"runs": "2", "gpu": "1"}, phase="Pending"),
        slot("stale", {"runs": "2", "gpu": "1"}, heartbeat_at=at(-60)),
        slot("full", {"runs": "2", "gpu": "1"}, {"runs": 2}),
        slot("no-gpu", {"runs": "2"}),
        slot("lonely", {"runs": "2", "gpu": "1"}),
        slot("crowded", {"runs": "4", "gpu": "1"}),
    ]
    targets = [target("crowded", {"cohort": "lab"}, uid="t1"), target("crowded", {"app": "db"}, uid="t2")]
    exp = explain(snapshot(run, pods, targets))
    details = {v.pod: (v.reason, v.detail) for v in exp.verdicts}
    assert details["down"] == ("RuntimePodUnavailable", "pod phase is Pending, not Running")
    assert details["stale"][1] == "runtimed heartbeat is stale: last probe 60s ago (stale after 15s)"
    assert details["full"][1] == "full: runs 2/2 in use, needs 1"
    assert details["no-gpu"][1] == "does not advertise gpu"
    assert details["lonely"] == (
        "UnsatisfiedRunAffinity",
        "required affinity term 1 (cohort=lab): hosts no matching Run (matching Runs are on crowded)",
    )
    assert details["crowded"] == (
        "UnsatisfiedRunAntiAffinity",
        "required anti-affinity term 1 (app=db): hosts 1 matching Run",
    )
    assert isinstance(exp.plan.unwrap(), Wait)


def test_a_term_that_cannot_seed_says_so() -> None:
    run = decoded_run("stray", affinity=affinity_json(required=[term({"cohort": "field"})]))
    exp = explain(snapshot(run, [slot("p1")]))
    assert exp.verdicts[0].detail.endswith("the Run's own labels do not (cannot seed)")


def test_a_bound_workspace_names_its_pod() -> None:
    run = decoded_run("r", workspace="ws")
    exp = explain(snapshot(run, [slot("p1"), slot("p2")], workspace=decoded_workspace("ws", bound_pod="p2")))
    assert [(v.pod, v.rank, v.detail) for v in exp.verdicts] == [
        ("p2", 1, FEASIBLE),
        ("p1", None, 'workspace "ws" is bound to pod p2'),
    ]


def test_a_run_in_retry_back_off_is_explained_as_when_it_is_due() -> None:
    run = decoded_run(
        "retry",
        attempt=3,
        conditions=[{"type": "Running", "status": "False", "lastTransitionTime": format_time(NOW)}],
    )
    exp = explain(snapshot(run, [slot("p1")]))
    assert isinstance(exp.plan.unwrap(), Delay)
    assert exp.evaluated and exp.hypothetical
    assert [(v.pod, v.rank) for v in exp.verdicts] == [("p1", 1)]


def test_a_run_that_ends_before_filtering_has_no_verdicts() -> None:
    exp = explain(snapshot(decoded_run("bad", requests={"runs": "500m"}), [slot("p1")]))
    assert isinstance(exp.plan.unwrap(), Fail)
    assert not exp.evaluated and exp.verdicts == ()
    running = explain(snapshot(active_run("busy", "p1"), [slot("p1")]))
    assert not running.evaluated and running.verdicts == ()


# --- the command against a live API server -----------------------------------------------------------

NS = "default"


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start(simulator=None) as running:
        yield running


@pytest.fixture(scope="module")
def kubeconfig(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cluster.kubeconfig_path(tmp_path_factory.mktemp("explain"))


@pytest.fixture(scope="module")
def world(cluster: DevCluster, kubeconfig: Path) -> Iterator[Kube]:
    """Three pods of runtime ``python`` and a few Runs, written the way the scheduler and runtimed would."""
    kube = Kube(load_configuration(str(kubeconfig)).unwrap().configuration, request_timeout=10)
    now = datetime.now(timezone.utc)
    make_pod(kube, "python-a", capacity={"runs": "2"}, probed=now)
    make_pod(kube, "python-b", capacity={"runs": "1"}, probed=now)
    make_pod(kube, "python-c", capacity={"runs": "2"}, probed=now - timedelta(minutes=5))
    make_run(kube, "busy", status={"phase": "Running", "assignedPod": "python-b"})
    make_run(kube, "db-1", labels={"app": "db"}, status={"phase": "Running", "assignedPod": "python-a"})
    spread = affinity_json(anti_required=[term({"app": "db"})])
    make_run(
        kube,
        "db-2",
        labels={"app": "db"},
        affinity=spread,
        status={
            "phase": "Pending",
            "message": 'waiting for available runtime pods satisfying required Run anti-affinity for runtime "python"',
        },
    )
    make_run(kube, "plain")
    make_run(kube, "done", status={"phase": "Succeeded", "assignedPod": "python-a"})
    yield kube
    kube.close()


def explain_cli(capsys: pytest.CaptureFixture[str], kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    code = main(["explain", "--kubeconfig", str(kubeconfig), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_prints_each_pods_verdict_and_the_wait_reason(
    world: Kube, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = explain_cli(capsys, kubeconfig, "default/db-2")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "Run default/db-2" in out
    assert "phase: Pending" in flat
    assert "python-a runs 1/2 RunAffinity UnsatisfiedRunAntiAffinity: required anti-affinity term 1 (app=db)" in flat
    assert "python-b runs 1/1 RuntimePodAvailability RuntimePodUnavailable: full: runs 1/1 in use, needs 1" in flat
    assert "python-c runs 0/2 RuntimePodAvailability RuntimePodUnavailable: runtimed heartbeat is stale" in flat
    assert (
        'The scheduler would now: Wait: waiting for available runtime pods satisfying required Run anti-affinity '
        'for runtime "python"' in flat
    )
    assert "empty ledger" in flat


def test_the_command_ranks_feasible_pods_for_a_run_that_would_bind(
    world: Kube, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = explain_cli(capsys, kubeconfig, "default/plain")
    assert code == 0
    flat = " ".join(out.split())
    assert "1 python-a runs 1/2 - total 100 = PreferredRunAffinity 0 + LeastLoaded 100" in flat
    assert "The scheduler would now: Bind to python-a (score 100)" in flat


def test_json_output_has_the_run_the_pods_and_the_plan(
    world: Kube, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = explain_cli(capsys, kubeconfig, "default/db-2", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    expected = {"run", "phase", "message", "conditions", "now", "ledger", "pods", "plan", "where", "lastLogged"}
    assert expected <= doc.keys()
    assert doc["run"] == "default/db-2" and doc["phase"] == "Pending" and doc["ledger"] == "empty"
    pods = {p["pod"]: p for p in doc["pods"]}
    assert set(pods) == {"python-a", "python-b", "python-c"}
    assert pods["python-a"]["feasible"] is False
    assert (pods["python-a"]["plugin"], pods["python-a"]["reason"]) == ("RunAffinity", "UnsatisfiedRunAntiAffinity")
    assert pods["python-b"]["usage"] == {"runs": "1"} and pods["python-b"]["capacity"] == {"runs": "1"}
    assert doc["plan"]["action"] == "Wait"
    assert doc["plan"]["message"].endswith('anti-affinity for runtime "python"')
    assert doc["lastLogged"] is None
    _, plain, _ = explain_cli(capsys, kubeconfig, "default/plain", "-o", "json")
    ranked = json.loads(plain)["pods"][0]
    assert ranked == {
        "pod": "python-a",
        "feasible": True,
        "plugin": None,
        "reason": None,
        "detail": "feasible",
        "usage": {"runs": "1"},
        "capacity": {"runs": "2"},
        "rank": 1,
        "scores": {"PreferredRunAffinity": 0, "LeastLoaded": 100},
        "total": 100,
    }


def test_a_run_that_is_not_pending_says_where_it_is(
    world: Kube, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = explain_cli(capsys, kubeconfig, "default/busy")
    assert code == 0
    flat = " ".join(out.split())
    assert "Running on pod python-b: the scheduler bound it and plans only Pending Runs" in flat
    assert "Candidate pods" not in out
    _, done, _ = explain_cli(capsys, kubeconfig, "default/done")
    assert "Succeeded (ran on pod python-a): finished, the scheduler never plans it again" in " ".join(done.split())


def test_the_cycle_log_shows_the_last_logged_plan_and_reservation(
    world: Kube, kubeconfig: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = decoded_run("plain", namespace=NS)
    held = snapshot(run, [slot("python-a")], own_reservation=reservation(run, "python-a"))
    first = snapshot(run, [slot("python-a")])
    log = tmp_path / "cycles.jsonl"
    records = [
        CycleRecord(first, DEFAULT_REGISTRY.weights, plan_cycle(first)),
        CycleRecord(held, DEFAULT_REGISTRY.weights, plan_cycle(held)),
    ]
    log.write_text("".join(encode_record(r) + "\n" for r in records))
    code, out, _ = explain_cli(capsys, kubeconfig, "default/plain", "--cycle-log", str(log))
    assert code == 0
    flat = " ".join(out.split())
    assert f"Last logged cycle (an earlier Run of the same name): {log} line 2" in flat
    assert "plan: Skip: awaiting bind observation" in flat
    assert "reservation held: yes, on python-a" in flat
    code, out, _ = explain_cli(capsys, kubeconfig, "default/plain", "--cycle-log", str(log), "-o", "json")
    logged = json.loads(out)["lastLogged"]
    assert logged["line"] == 2 and logged["reservationHeld"] is True and logged["reservedPod"] == "python-a"
    assert logged["plan"] == {"action": "Skip", "why": "awaiting bind observation"}


def test_a_missing_run_exits_1_with_a_clear_message(
    world: Kube, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = explain_cli(capsys, kubeconfig, "default/nope")
    assert code == 1 and out == ""
    assert err.strip() == 'kruntimes explain: run "default/nope" not found'


def test_an_unreachable_cluster_or_a_bad_kubeconfig_exits_2_without_a_traceback(
    cluster: DevCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = tmp_path / "dead.kubeconfig"
    config = cluster.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    dead.write_text(json.dumps(config))
    code, _, err = explain_cli(capsys, dead, "default/x")
    assert code == 2 and f"cannot reach the API server at http://127.0.0.1:{port}" in err
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("clusters: [\n")
    code, _, err = explain_cli(capsys, garbage, "default/x")
    assert code == 2 and "cannot load cluster configuration" in err and "Traceback" not in err
    code, _, err = explain_cli(capsys, garbage, "too/many/slashes")
    assert code == 2 and "expected RUN or NAMESPACE/RUN" in err and "Traceback" not in err
    code, _, err = explain_cli(capsys, garbage, "-n", "other", "default/x")
    assert code == 2 and "is not in namespace 'other'" in err
