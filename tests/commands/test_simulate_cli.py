"""`kruntimes simulate`: scenarios in, every cycle's decision out (JSON and table)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest
import yaml
from returns.result import Result, Success

from kruntimes.cli import main
from kruntimes.commands.simulate import outcome_json, parse_documents
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.framework.interface import ParkKind, PendingMessage, PodFilter, PodScorer
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, Registry
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.readers.scenario import decode_scenario
from kruntimes.pure.simulation import simulate
from tests.builders import NOW, NOW_TEXT, affinity_json, at, pod_json, run_json, term

REPO: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = REPO / "examples" / "weighted-scoring.yaml"
Json = dict[str, object]


def write(tmp_path: Path, scenario: object, name: str = "scenario.json") -> str:
    path = tmp_path / name
    path.write_text(scenario if isinstance(scenario, str) else json.dumps(scenario), encoding="utf-8")
    return str(path)


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str) -> Json:
    assert main(["simulate", "-o", "json", *args]) == 0
    out = capsys.readouterr().out
    result: Json = json.loads(out)
    return result


def cycles(result: Json) -> list[Json]:
    value = result["cycles"]
    assert isinstance(value, list)
    return value


def worked_example_objects() -> list[Json]:
    """SPEC §5: a cap{runs:2}, b and c cap{runs:4}; targets {zone,tier} on a, two plain on b, {zone} on c."""
    return [
        pod_json("runtime-a", capacity={"runs": "2"}),
        pod_json("runtime-b", capacity={"runs": "4"}),
        pod_json("runtime-c", capacity={"runs": "4"}),
        run_json("on-a", labels={"zone": "blue", "tier": "gold"}, phase="Running", assigned_pod="runtime-a"),
        run_json("on-b-1", phase="Running", assigned_pod="runtime-b"),
        run_json("on-b-2", phase="Running", assigned_pod="runtime-b"),
        run_json("on-c", labels={"zone": "blue"}, phase="Running", assigned_pod="runtime-c"),
        run_json(
            "new",
            affinity=affinity_json(preferred=[(1, term({"zone": "blue"})), (1, term({"tier": "gold"}))]),
        ),
    ]


# --- decisions --------------------------------------------------------------------------------


def test_the_worked_example_binds_runtime_c_with_the_spec_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = simulate_json(capsys, write(tmp_path, {"now": NOW_TEXT, "objects": worked_example_objects()}))
    assert result["now"] == NOW_TEXT
    assert cycles(result) == [
        {
            "run": "default/new",
            "action": "Bind",
            "pod": "runtime-c",
            "ranking": ["runtime-c", "runtime-a", "runtime-b"],
            "scores": {
                "runtime-c": {"PreferredRunAffinity": 50, "LeastLoaded": 100, "total": 150},
                "runtime-a": {"PreferredRunAffinity": 100, "LeastLoaded": 0, "total": 100},
                "runtime-b": {"PreferredRunAffinity": 0, "LeastLoaded": 50, "total": 50},
            },
            "rejections": {},
        }
    ]
    assert result["assignments"] == {"default/new": "runtime-c"}


def test_the_bundled_tour_shows_the_worked_example_pick_first(capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate_json(capsys, str(EXAMPLE))
    first = cycles(result)[0]
    assert (first["run"], first["action"], first["pod"]) == ("default/pick", "Bind", "runtime-c")
    assert first["scores"] == {
        "runtime-c": {"PreferredRunAffinity": 50, "LeastLoaded": 100, "total": 150},
        "runtime-a": {"PreferredRunAffinity": 100, "LeastLoaded": 0, "total": 100},
        "runtime-b": {"PreferredRunAffinity": 0, "LeastLoaded": 50, "total": 50},
    }
    actions = {str(c["run"]): c["action"] for c in cycles(result)}
    assert actions == {
        "default/pick": "Bind",
        "default/batch-1": "Bind",
        "default/batch-2": "Bind",
        "default/batch-3": "Wait",
        "default/cohort-leader": "Bind",
        "default/cohort-follower": "Bind",
        "default/cohort-stray": "Wait",
        "default/replica-1": "Bind",
        "default/replica-2": "Bind",
        "default/replica-3": "Wait",
        "default/stop-me": "Cancel",
        "default/broken": "Fail",
    }
    assignments = result["assignments"]
    assert isinstance(assignments, dict)
    assert assignments["default/cohort-follower"] == assignments["default/cohort-leader"]
    assert assignments["default/replica-1"] != assignments["default/replica-2"]


def test_later_cycles_see_earlier_binds_until_capacity_is_full_then_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "now": NOW_TEXT,
        "objects": [pod_json("runtime-a", capacity={"runs": "2"})]
        + [run_json(f"run-{i}", created=at(i - 100)) for i in range(3)],
    }
    result = simulate_json(capsys, write(tmp_path, scenario))
    assert [c["action"] for c in cycles(result)] == ["Bind", "Bind", "Wait"]
    assert cycles(result)[2] == {
        "run": "default/run-2",
        "action": "Wait",
        "message": 'waiting for available runtime pods for runtime "python"',
        "reason": "Unschedulable",
        "rejections": {"RuntimePodAvailability": {"RuntimePodUnavailable": 1}},
        "recheckWithinSeconds": 30,
    }
    assert result["assignments"] == {"default/run-0": "runtime-a", "default/run-1": "runtime-a"}


def test_default_cycles_take_every_pending_run_once_oldest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "now": NOW_TEXT,
        "objects": [
            pod_json("runtime-a", capacity={"runs": "10"}),
            run_json("zulu", created=at(-300)),
            run_json("alpha", created=at(-100)),
            run_json("tie-b", created=at(-200)),
            run_json("tie-a", created=at(-200)),
            run_json("tie-a", namespace="aaa", created=at(-200)),
            run_json("done", created=at(-999), phase="Succeeded"),
        ],
    }
    result = simulate_json(capsys, write(tmp_path, scenario))
    assert [c["run"] for c in cycles(result)] == [
        "default/zulu",
        "aaa/tie-a",
        "default/tie-a",
        "default/tie-b",
        "default/alpha",
    ]


def test_cycles_naming_no_run_skip_not_found_and_a_repeated_key_is_no_longer_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "now": NOW_TEXT,
        "objects": [pod_json("runtime-a"), run_json("run-a")],
        "cycles": ["default/ghost", "run-a", "default/run-a"],
    }
    result = simulate_json(capsys, write(tmp_path, scenario))
    assert cycles(result) == [
        {"run": "default/ghost", "action": "Skip", "why": "not found"},
        cycles(result)[1],
        {"run": "default/run-a", "action": "Skip", "why": "not pending"},
    ]
    assert cycles(result)[1]["action"] == "Bind"


def every_action_scenario() -> Json:
    retrying = run_json(
        "retrying",
        attempt=3,
        backoff="1s",
        conditions=[{"type": "Running", "status": "False", "lastTransitionTime": at(-1)}],
        created=at(-50),
    )
    return {
        "now": NOW_TEXT,
        "config": {"heartbeatStaleAfter": "15s"},
        "objects": [
            pod_json("runtime-a", capacity={"runs": "1"}),
            run_json("fits", created=at(-90)),
            run_json("no-room", created=at(-80)),
            run_json("invalid", requests={"runs": "500m"}, created=at(-70)),
            run_json("cancelled", cancel=True, created=at(-60)),
            retrying,
            run_json("finished", phase="Succeeded", created=at(-40)),
            run_json("assumed", runtime="java", resource_version="5", created=at(-30)),
        ],
        "reservations": [{"runName": "assumed", "pod": "runtime-j"}],
        "cycles": [
            "default/fits",
            "default/no-room",
            "default/invalid",
            "default/cancelled",
            "default/retrying",
            "default/finished",
            "default/assumed",
        ],
    }


def test_every_action_kind_has_the_documented_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate_json(capsys, write(tmp_path, every_action_scenario()))
    assert set(result) == {"now", "cycles", "assignments"}
    shapes = {str(c["action"]): set(c) for c in cycles(result)}
    assert shapes == {
        "Bind": {"run", "action", "pod", "ranking", "scores", "rejections"},
        "Wait": {"run", "action", "message", "reason", "rejections", "recheckWithinSeconds"},
        "Fail": {"run", "action", "reason", "message"},
        "Cancel": {"run", "action", "reason", "message"},
        "Delay": {"run", "action", "requeueAfterSeconds"},
        "Skip": {"run", "action", "why"},
    }
    by_run = {str(c["run"]).removeprefix("default/"): c for c in cycles(result)}
    assert by_run["invalid"]["reason"] == "InvalidResources"
    assert by_run["invalid"]["message"] == 'resource request "runs" must be a non-negative integer'
    assert (by_run["cancelled"]["reason"], by_run["cancelled"]["message"]) == ("Cancelled", "cancelled by user")
    assert by_run["retrying"]["requeueAfterSeconds"] == 1.0  # 1s × 2^(3−2) after a failure 1 s ago
    assert by_run["finished"]["why"] == "not pending"
    assert by_run["assumed"]["why"] == "awaiting bind observation"


def test_a_scenario_reservation_holds_capacity_until_sync_drops_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = [
        pod_json("runtime-a", capacity={"runs": "1"}),
        run_json("bound-elsewhere", resource_version="4", created=at(-20)),
        run_json("next", created=at(-10)),
    ]
    kept = {"now": NOW_TEXT, "objects": objects, "cycles": ["next"],
            "reservations": [{"runName": "bound-elsewhere", "pod": "runtime-a"}]}
    assert cycles(simulate_json(capsys, write(tmp_path, kept)))[0]["action"] == "Wait"
    # Planned from version 3, but the informer shows version 4: written after our bind, so it goes (§6).
    stale = dict(kept, reservations=[{"runName": "bound-elsewhere", "pod": "runtime-a", "resourceVersion": "3"}])
    assert cycles(simulate_json(capsys, write(tmp_path, stale)))[0]["action"] == "Bind"


def test_lists_multi_document_yaml_and_stdin_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = [pod_json("runtime-a"), run_json("run-a")]
    as_list = write(tmp_path, {"apiVersion": "v1", "kind": "List", "items": objects})
    assert cycles(simulate_json(capsys, "--now", NOW_TEXT, as_list))[0]["action"] == "Bind"
    multi = write(tmp_path, yaml.safe_dump_all(objects), "objects.yaml")
    assert cycles(simulate_json(capsys, "--now", NOW_TEXT, multi))[0]["pod"] == "runtime-a"
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump({"now": NOW_TEXT, "objects": objects})))
    assert simulate_json(capsys, "-")["assignments"] == {"default/run-a": "runtime-a"}


def test_hand_written_objects_get_deterministic_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = f"""
now: "{NOW_TEXT}"
objects:
- apiVersion: v1
  kind: Pod
  metadata: {{name: runtime-a, labels: {{runtime: python, flag: on}}}}
  status:
    phase: Running
    conditions:
    - {{type: Ready, status: "True"}}
    - {{type: kruntimes.io/RuntimedReady, status: "True", lastProbeTime: {NOW_TEXT}}}
- {{apiVersion: kruntimes.io/v1alpha1, kind: Run, metadata: {{name: run-a}}, spec: {{runtime: python}}}}
"""
    path = write(tmp_path, scenario, "hand.yaml")
    first = simulate_json(capsys, path)
    assert first["assignments"] == {"default/run-a": "runtime-a"}
    assert simulate_json(capsys, path) == first


# --- malformed scenarios -----------------------------------------------------------------------------

MALFORMED: Final[Sequence[tuple[str, str, str]]] = (
    ("bad-yaml", "objects: [\n  {kind: Pod\n", "not valid YAML"),
    ("no-name", json.dumps({"objects": [pod_json("a"), {"apiVersion": "v1", "kind": "Pod", "metadata": {}}]}),
     "objects[1].metadata.name: is required"),
    ("unknown-kind", json.dumps({"objects": [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}]}),
     "objects[0].kind: unknown kind 'Deployment'"),
    ("bad-duration", json.dumps({"config": {"heartbeatStaleAfter": "15 seconds"}}), "config.heartbeatStaleAfter: must be a Go duration"),
    ("bad-now", json.dumps({"now": "yesterday"}), "now: must be an RFC 3339 time"),
    ("bad-time", json.dumps({"objects": [run_json("r", created="noon")]}), "objects[0].metadata.creationTimestamp: must be an RFC 3339 time"),
    ("wrong-type", json.dumps({"objects": {"kind": "Pod"}}), "objects: must be a list"),
    ("label-number", "objects:\n- {apiVersion: v1, kind: Pod, metadata: {name: a, labels: {tier: 1}}}\n",
     'objects[0].metadata.labels.tier: must be a string, not the number 1 (quote it: "1")'),
    ("typo", json.dumps({"object": []}), "object: unknown field"),
    ("bad-backoff", json.dumps({"objects": [run_json("r", backoff="soon")]}), "objects[0].spec.retryPolicy.backoff"),
    ("bad-cycle", json.dumps({"cycles": ["a/b/c"]}), "cycles[0]: must be a Run key"),
    ("bad-reservation", json.dumps({"reservations": [{"runName": "ghost", "pod": "p"}]}), "reservations[0].runName: no Run named 'ghost'"),
)


@pytest.mark.parametrize(("name", "text", "expected"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_scenario_exits_2_naming_the_document_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, expected: str
) -> None:
    path = write(tmp_path, text, f"{name}.yaml")
    assert main(["simulate", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"kruntimes simulate: {path}")
    assert expected in captured.err
    assert "Traceback" not in captured.err


PAST_PYTHON: Final = "9" * 5000
"""More digits than Python's ``int()`` converts (4,300)."""


def _hostile_scenario() -> str:
    """Runs holding values past the scheduler's bounds (SPEC §1, revision 3), as JSON text."""
    objects = [
        pod_json("runtime-a", capacity={"runs": "1", "cpu": "1e" + "0" * 5000 + "1"}),
        run_json("backoff", backoff=PAST_PYTHON + "s", resource_version="__N__"),
        run_json("exponent", requests={"cpu": "1e" + "0" * 5000 + "1"}),
        run_json("number", requests={"cpu": "__N__"}),
        run_json("plain"),
    ]
    return json.dumps({"now": NOW_TEXT, "objects": objects}).replace('"__N__"', PAST_PYTHON).replace(
        '"resourceVersion": ' + PAST_PYTHON, '"resourceVersion": "' + PAST_PYTHON + '"'
    )


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_runs_past_the_bounds_fail_in_simulate_as_the_scheduler_fails_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    text = _hostile_scenario() if form == "json" else "# read as YAML\n" + _hostile_scenario()
    result = simulate_json(capsys, write(tmp_path, text, f"hostile.{form}"))
    bounds = "(a quantity is read when it has at most 128 characters, 64 digits and an exponent within ±64)"
    assert cycles(result) == [
        {"run": "default/backoff", "action": "Fail", "reason": "InvalidSpec",
         "message": "spec.retryPolicy.backoff is longer than 128 characters (a Go duration such as 500ms, 15s or 1m30s)"},
        {"run": "default/exponent", "action": "Fail", "reason": "InvalidSpec",
         "message": f'spec.resources.requests "cpu" is longer than 128 characters {bounds}'},
        {"run": "default/number", "action": "Fail", "reason": "InvalidSpec",
         "message": f'spec.resources.requests "cpu" is longer than 128 characters {bounds}'},
        {"run": "default/plain", "action": "Bind", "pod": "runtime-a", "ranking": ["runtime-a"],
         "scores": {"runtime-a": {"LeastLoaded": 100, "PreferredRunAffinity": 0, "total": 100}}, "rejections": {}},
    ]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_a_scenario_field_past_pythons_digits_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    text = json.dumps({"objects": [run_json("r", attempt=7)]}).replace('"attempt": 7', '"attempt": ' + PAST_PYTHON)
    path = write(tmp_path, text if form == "json" else "# read as YAML\n" + text, f"attempt.{form}")
    assert main(["simulate", path]) == 2
    err = capsys.readouterr().err
    assert err == f"kruntimes simulate: {path}: objects[0].status.attempt: must be an integer, not a number of 5000 digits\n"


def test_a_multi_document_error_names_the_document_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents = [pod_json("runtime-a"), {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {}}}]
    path = write(tmp_path, yaml.safe_dump_all(documents), "multi.yaml")
    assert main(["simulate", path]) == 2
    assert f"{path} (document 2): metadata.name: is required" in capsys.readouterr().err


def test_a_missing_file_and_a_bad_now_flag_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["simulate", "--now", "soon", write(tmp_path, {"objects": []})]) == 2
    assert "--now" in capsys.readouterr().err


# --- tables, help, the installed entry point ------------------------------------------------------------


def test_the_table_is_aligned_and_fits_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("RUN"))
    assert header.split() == ["RUN", "ACTION", "POD/REASON", "DETAIL"]
    detail_column = header.index("DETAIL")
    pick = next(line for line in lines if line.startswith("pick "))
    assert pick[header.index("ACTION") :].startswith("Bind")
    assert pick[header.index("POD/REASON") :].startswith("runtime-c")
    assert pick[detail_column:].startswith("score 150")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "assignments:" in lines
    assert any(line.split() == ["pick", "->", "runtime-c"] for line in lines)
    # Continuation lines of a wrapped DETAIL stay in the DETAIL column.
    assert all(line[:detail_column].strip() == "" for line in lines if line.startswith(" " * detail_column))


def test_help_teaches_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "kind: Run" in out and "kruntimes simulate examples/weighted-scoring.yaml" in out
    assert "--cycle-log" in out


def test_the_installed_entry_point_simulates_the_example() -> None:
    executable = Path(sys.executable).parent / "kruntimes"
    completed = subprocess.run(
        [str(executable), "simulate", "-o", "json", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["cycles"][0]["pod"] == "runtime-c"


# --- what only a custom registry can provoke ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Broken:
    name: str = "Broken"
    fast_path: bool = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        return Success(lambda slots: tuple(101 for _ in slots))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return raw


@dataclass(frozen=True, slots=True)
class _PassAll:
    name: str = "PassAll"
    reasons: frozenset[str] = frozenset()
    park_kinds: Mapping[str, ParkKind] = field(default_factory=dict)
    fast_path: bool = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        return Success(None)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return reason


def _scenario(objects: list[Json]) -> Json:
    return {"now": NOW_TEXT, "objects": objects}


def test_a_score_plugin_error_is_reported_as_action_error() -> None:
    registry = DEFAULT_REGISTRY.register_score("Broken", 1, _Broken).unwrap()
    scenario = decode_scenario([_scenario([pod_json("runtime-a"), run_json("run-a")])], "test", NOW).unwrap()
    result = simulate(scenario, registry)
    assert outcome_json(result.steps[0]) == {
        "run": "default/run-a",
        "action": "Error",
        "reason": "ScoreError",
        "message": 'score plugin "Broken" pod "runtime-a" returned 101 outside 0..100',
    }
    assert result.assignments == ()


def test_a_refused_reserve_is_reported_as_a_conflict_and_writes_nothing() -> None:
    # Without the availability filter the planner picks a full pod; reserve re-checks and refuses.
    registry: Registry = (
        EMPTY_REGISTRY.register_filter("PassAll", _PassAll).bind(lambda r: r.register_score("LeastLoaded", 1, LeastLoaded))
    ).unwrap()
    objects = [pod_json("runtime-a", capacity={"runs": "1"}), run_json("on-a", phase="Running", assigned_pod="runtime-a"),
               run_json("run-a")]
    scenario = decode_scenario([_scenario(objects)], "test", NOW).unwrap()
    result = simulate(scenario, registry)
    entry = outcome_json(result.steps[0])
    assert entry == {
        "run": "default/run-a",
        "action": "Conflict",
        "pod": "runtime-a",
        "reason": "NoRoom",
        "message": "the chosen runtime pod no longer has room for the run's requests",
    }
    run = result.state.run(result.steps[0].key)
    assert run is not None and run.status.phase == "" and len(result.ledger) == 0


def test_the_documents_reader_keeps_times_as_strings_and_on_as_a_string() -> None:
    (document,) = parse_documents("a: 2026-01-01T00:00:00Z\nb: on\nc: true\n", "x.yaml")
    assert document == {"a": "2026-01-01T00:00:00Z", "b": "on", "c": True}
    run = decode_run(run_json("r")).unwrap()
    assert run.creation_timestamp is not None
