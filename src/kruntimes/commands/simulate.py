"""`kruntimes simulate`: what-if scheduling of a scenario file on an in-memory cluster.

The shell around :mod:`kruntimes.pure.simulation`: read the file (YAML or JSON,
``-`` for stdin), decode, simulate, print JSON or a table, append the cycle log.
A malformed scenario exits 2 with the document and field; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Final, TextIO, TypeAlias

import yaml
from returns.pipeline import is_successful

from kruntimes.commands._terminal import terminal_width
from kruntimes.pure.readers.cyclelog import encode_record
from kruntimes.commands._yaml import SafeLoader
from kruntimes.pure.readers.json import loads
from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.parking import RECHECK_SECONDS
from kruntimes.pure.model.plan import Bind, Cancel, CycleError, Delay, Fail, Rejections, Skip, Wait
from kruntimes.pure.readers.scenario import decode_scenario
from kruntimes.pure.simulation import Simulation, simulate
from kruntimes.pure.step import Step
from kruntimes.pure.model.times import format_time, parse_time

Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"

EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
TABLE_WIDTH: Final = 80

_EPILOG: Final = """\
A scenario is a YAML (or JSON) map; every field but `objects` is optional:

  now: "2026-01-01T00:00:00Z"        # the clock of every cycle
  config: {heartbeatStaleAfter: 15s}
  objects:                           # as `kubectl get -o yaml` prints them
  - apiVersion: v1
    kind: Pod
    metadata:
      name: runtime-a
      labels: {runtime: python}
      annotations: {kruntimes.io/capacity.runs: "2"}
    status:
      phase: Running
      conditions:
      - {type: Ready, status: "True"}
      - {type: kruntimes.io/RuntimedReady, status: "True",
         lastProbeTime: "2026-01-01T00:00:00Z"}
  - apiVersion: kruntimes.io/v1alpha1
    kind: Run
    metadata: {name: run-a}
    spec: {runtime: python}
  reservations: []                   # assumed binds: {runUID|runName, pod, ...}
  cycles: [default/run-a]            # default: every Pending Run, oldest first

Objects may omit metadata.namespace (default), uid, resourceVersion and
creationTimestamp (a Run's defaults to `now`). A `kind: List` or a
multi-document YAML of objects works too (then no now/config/cycles).
Each cycle sees every earlier decision: binds, waits and failures are written
as the informer would show them.

Actions: Bind, Wait, Fail, Cancel, Delay (retry back-off), Skip (why); also
Error (a plugin failed: nothing written) and Conflict (the reservation was
refused at reserve time: nothing written, a worker would retry it after a back-off).

  kruntimes simulate examples/weighted-scoring.yaml
  kruntimes simulate -o json --cycle-log cycles.jsonl scenario.yaml
  kruntimes replay cycles.jsonl
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario file (YAML or JSON); - reads stdin")
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for programs: one object",
    )
    parser.add_argument(
        "--now",
        metavar="T",
        help="RFC 3339 clock when the scenario has no `now` (default: the current time)",
    )
    parser.add_argument(
        "--cycle-log",
        metavar="FILE",
        help="append one cycle record per line (JSON lines) for `kruntimes replay`",
    )


# --- reading ------------------------------------------------------------------------------


class _ScenarioLoader(SafeLoader):
    """Safe YAML, except that times stay strings, only true/false are booleans, and an
    integer longer than Python converts is an ``OverlongNumber`` (``commands._yaml``).

    The scheduler parses times itself (RFC 3339, exact); `on`/`yes`/`no` are
    strings in Kubernetes objects, not YAML 1.1 booleans; and such an integer is read
    as the scheduler reads it from the API (``pure.readers.json.loads``): a value no
    field accepts, so a Run holding one fails as it would in the cluster, and any
    other field holding one is named in a one-line error.
    """


_ScenarioLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:bool")
    ]
    for first, resolvers in SafeLoader.yaml_implicit_resolvers.items()
}
_ScenarioLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _Unreadable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_documents(text: str, source: str) -> list[object]:
    """The documents of a YAML or JSON text; ``_Unreadable`` names the document and position."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [loads(text)]
        except ValueError:
            pass  # not JSON after all: YAML flow style, read below
    documents: list[object] = []
    try:
        for document in yaml.load_all(text, Loader=_ScenarioLoader):
            documents.append(document)
    except yaml.YAMLError as exc:
        where = f"{source} (document {len(documents) + 1})" if documents else source
        raise _Unreadable(f"{where}: not valid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise _Unreadable(f"{source}: nested too deeply") from None
    return documents


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except (OSError, UnicodeDecodeError) as exc:
        raise _Unreadable(f"{path}: cannot read: {exc}") from None


# --- JSON output ----------------------------------------------------------------------------


def _rejections_json(rejections: Rejections) -> dict[str, Json]:
    result: dict[str, dict[str, Json]] = {}
    for plugin, reason, count in rejections:
        result.setdefault(plugin, {})[reason] = count
    return dict(result)


def outcome_json(outcome: Step) -> dict[str, Json]:
    """One entry of ``cycles`` (SPEC §12), plus ``Error`` and ``Conflict`` (see ``--help``)."""
    entry: dict[str, Json] = {"run": str(outcome.key)}
    if not is_successful(outcome.plan):
        error: CycleError = outcome.plan.failure()
        entry.update(action="Error", reason=error.reason, message=error.message)
        return entry
    plan = outcome.plan.unwrap()
    if outcome.conflict is not None and isinstance(plan, Bind):
        entry.update(
            action="Conflict",
            pod=plan.pod,
            reason=outcome.conflict.reason,
            message=outcome.conflict.message,
        )
    elif isinstance(plan, Bind):
        scores: dict[str, Json] = {}
        for score in plan.scores:
            by_plugin: dict[str, Json] = {name: value for name, value in score.by_plugin}
            by_plugin["total"] = score.total
            scores[score.pod] = by_plugin
        entry.update(
            action="Bind",
            pod=plan.pod,
            ranking=list(plan.ranking),
            scores=scores,
            rejections=_rejections_json(plan.rejections),
        )
    elif isinstance(plan, Wait):
        entry.update(
            action="Wait",
            message=plan.message,
            reason=plan.reason,
            rejections=_rejections_json(plan.rejections),
            recheckWithinSeconds=RECHECK_SECONDS,
        )
    elif isinstance(plan, (Fail, Cancel)):
        entry.update(action="Fail" if isinstance(plan, Fail) else "Cancel", reason=plan.reason, message=plan.message)
    elif isinstance(plan, Delay):
        entry.update(action="Delay", requeueAfterSeconds=plan.seconds)
    else:
        entry.update(action="Skip", why=plan.why)
    return entry


def simulation_json(result: Simulation) -> dict[str, Json]:
    return {
        "now": format_time(result.now),
        "cycles": [outcome_json(o) for o in result.steps],
        "assignments": {str(key): pod for key, pod in result.assignments},
    }


# --- table output ----------------------------------------------------------------------------


def _rejections_text(rejections: Rejections) -> str:
    """Reasons only: they name the plugin's verdict; the JSON output has both."""
    return ", ".join(f"{reason} ×{count}" for _, reason, count in rejections)


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _row(outcome: Step, namespace: str | None) -> tuple[str, str, str, str]:
    """(RUN, ACTION, POD/REASON, DETAIL) for one cycle; RUN is the bare name when ``namespace`` is shared."""
    entry = outcome_json(outcome)
    action = str(entry["action"])
    run = outcome.key.name if namespace is not None else str(outcome.key)
    if not is_successful(outcome.plan):
        return run, action, str(entry["reason"]), str(entry["message"])
    plan = outcome.plan.unwrap()
    if outcome.conflict is not None:
        return run, action, outcome.conflict.reason, f"reserve on {entry['pod']} refused: {outcome.conflict.message}"
    if isinstance(plan, Bind):
        best = plan.scores[0]
        parts = " + ".join(f"{name} {value}" for name, value in best.by_plugin)
        detail = f"score {best.total} = {parts}"
        others = [f"{s.pod} {s.total}" for s in plan.scores[1:4]]
        if len(plan.scores) > 4:
            others.append(f"+{len(plan.scores) - 4} more")
        if others:
            detail += f"; next: {', '.join(others)}"
        if plan.rejections:
            detail += f"; rejected: {_rejections_text(plan.rejections)}"
        return run, action, plan.pod, detail
    if isinstance(plan, Wait):
        detail = plan.message
        if plan.rejections:
            detail += f"; rejected: {_rejections_text(plan.rejections)}"
        return run, action, plan.reason, f"{detail}; re-planned on a wakeup, or within {_seconds(RECHECK_SECONDS)}"
    if isinstance(plan, (Fail, Cancel)):
        return run, action, plan.reason, plan.message
    if isinstance(plan, Delay):
        return run, action, "RetryBackoff", f"retry delay: requeue in {_seconds(plan.seconds)}"
    assert isinstance(plan, Skip)
    return run, action, "-", plan.why


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _table(rows: Sequence[tuple[str, ...]], caps: Sequence[int], width: int) -> Iterator[str]:
    """Aligned columns; the last one takes what is left of ``width``; long cells wrap."""
    widths = [min(max(len(row[i]) for row in rows), caps[i]) for i in range(len(caps))]
    last = max(width - sum(w + 2 for w in widths), 24)
    for row in rows:
        cells = [_wrap(cell, w) for cell, w in zip(row, widths)] + [_wrap(row[-1], last)]
        for line in range(max(len(c) for c in cells)):
            parts = [(cells[i][line] if line < len(cells[i]) else "").ljust(widths[i]) for i in range(len(widths))]
            tail = cells[-1][line] if line < len(cells[-1]) else ""
            yield "  ".join(parts + [tail]).rstrip()


def render_table(result: Simulation, width: int = TABLE_WIDTH) -> str:
    """The simulation for a person: one aligned row per cycle, then the assignments."""
    keys = [o.key for o in result.steps] + [key for key, _ in result.assignments]
    namespaces = {key.namespace for key in keys}
    shared = namespaces.pop() if len(namespaces) == 1 else None
    title = f"now {format_time(result.now)}, {len(result.steps)} cycles"
    lines = [title + (f", namespace {shared}" if shared is not None else ""), ""]
    rows: list[tuple[str, ...]] = [("RUN", "ACTION", "POD/REASON", "DETAIL")]
    rows.extend(_row(o, shared) for o in result.steps)
    if result.steps:
        lines.extend(_table(rows, (30, 8, 18), width))
    else:
        lines.append("(no cycles: no Pending Runs and no `cycles` given)")
    lines.append("")

    def shown(key: RunKey) -> str:
        return key.name if shared is not None else str(key)

    if result.assignments:
        lines.append("assignments:")
        key_width = min(max(len(shown(key)) for key, _ in result.assignments), 40)
        lines.extend(f"  {shown(key).ljust(key_width)}  -> {pod}" for key, pod in result.assignments)
    else:
        lines.append("assignments: none")
    return "\n".join(lines) + "\n"


# --- the command -----------------------------------------------------------------------------


def _fail(message: str, err: TextIO) -> int:
    print(f"kruntimes simulate: {message}", file=err)
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    err = sys.stderr
    default_now = datetime.now(timezone.utc)
    if args.now is not None:
        parsed = parse_time(args.now)
        if parsed is None:
            return _fail(f"--now: must be an RFC 3339 time such as 2026-01-01T00:00:00Z, not {args.now!r}", err)
        default_now = parsed
    try:
        text, source = _read(args.scenario)
        documents = parse_documents(text, source)
    except _Unreadable as problem:
        return _fail(problem.message, err)
    scenario = decode_scenario(documents, source, default_now)
    if not is_successful(scenario):
        return _fail(str(scenario.failure()), err)
    result = simulate(scenario.unwrap())
    if args.cycle_log is not None:
        try:
            with open(args.cycle_log, "a", encoding="utf-8") as log:
                log.writelines(encode_record(record) + "\n" for record in result.records)
        except OSError as exc:
            return _fail(f"--cycle-log: cannot append to {args.cycle_log}: {exc}", err)
    if args.output == "json":
        output = json.dumps(simulation_json(result), indent=2, ensure_ascii=False) + "\n"
    else:
        output = render_table(result, terminal_width(sys.stdout, TABLE_WIDTH))
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of the simulation.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK
