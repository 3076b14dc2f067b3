"""`kruntimes explain [-n NAMESPACE] RUN`: why a Run is pending (or where it went), from the live cluster.

The shell around :func:`kruntimes.pure.explain.explain`: read the Run, the
Runtime Pods of its (namespace, runtime), the Runs of its namespace and its
workspace over the raw-JSON client, build the same ``ClusterState`` and
``Snapshot`` the scheduler builds, and print the plan with one verdict per pod.

The namespace is ``-n``, the ``NAMESPACE/`` of ``NAMESPACE/RUN``, or else the
kubeconfig context's namespace as kubectl picks it (in a pod: the service
account's namespace file). Installed also as ``kubectl-kruntimes``, so
``kubectl kruntimes explain RUN`` runs it.

The table groups rejected pods with the same verdict into one line with their
count and shows the first ranked candidates only: a fleet of hundreds of full
pods is one line, not hundreds. ``--all-pods`` prints one line per pod.

The snapshot uses an **empty ledger**: a running scheduler's in-memory
reservations (binds written but not yet observed) are not visible from
outside. ``--cycle-log`` adds the Run's last logged cycle, which shows the plan
the scheduler actually made and whether it held a reservation then.

Exit status: 0 explained; 1 the Run does not exist; 2 usage errors, no
cluster configuration, an unreachable or refusing API server, an unreadable
cycle log. Never a traceback.

One module at about 800 lines: reading the live objects, the text and JSON renderings and the
shortfall analysis serve one command and one output; the decisions themselves are in
``pure.explain``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final, TypeAlias

from returns.pipeline import is_successful
from returns.result import Result

import yaml

from kruntimes.kubeclient.kube import PODS, RUNS, WORKSPACES, ApiError, JSONObject, Kube, connect, kubeconfig_files
from kruntimes.commands._terminal import terminal_width
from kruntimes.pure.state.cluster import from_objects
from kruntimes.pure.model.objects import Object
from kruntimes.pure.readers.cyclelog import CycleRecord, TruncatedRecord, decode_line, plan_json
from kruntimes.pure.readers.kube import decode_pod, decode_run, decode_workspace
from kruntimes.pure.explain import Explanation, PodVerdict, explain, selector_text
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import (
    ACTIVE_PHASES,
    RUNTIME_LABEL,
    Condition,
    Resources,
    Run,
    RunKey,
    SchedulerConfig,
)
from kruntimes.pure.parking import RECHECK_SECONDS
from kruntimes.pure.model.plan import Bind, Cancel, CycleError, Delay, Fail, Plan, Rejections, Wait
from kruntimes.pure.model.quantity import Amount, format_quantity
from kruntimes.pure.snapshot import take
from kruntimes.pure.model.times import format_duration, format_time, parse_duration, parse_time

Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"

EXIT_OK: Final = 0
EXIT_NOT_FOUND: Final = 1
EXIT_TROUBLE: Final = 2
TABLE_WIDTH: Final = 100
DEFAULT_TOP: Final = 10
"""Ranked candidates the table shows unless ``--all-pods`` (the rest are counted in one line)."""
AVAILABILITY_PLUGIN: Final = "RuntimePodAvailability"
STALE_DETAIL: Final = "runtimed heartbeat is stale:"
"""How ``availability.unavailable_detail`` begins for a stale heartbeat (its age follows)."""
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

LEDGER_NOTE: Final = (
    "computed with an empty ledger: reservations the running scheduler holds in memory "
    "(binds it wrote but has not yet observed) are not visible from outside"
)

_EPILOG: Final = """\
  kruntimes explain my-run                    # the kubeconfig context's namespace
  kruntimes explain -n team-a my-run
  kubectl kruntimes explain -n team-a my-run  # the same, as a kubectl plugin
  kruntimes explain team-a/my-run -o json
  kruntimes explain -n team-a my-run --all-pods
  kruntimes explain -n team-a my-run --cycle-log cycles.jsonl

For a Pending Run: its status, then its candidate Runtime Pods (namespace +
runtime label): the ranked ones first (the top 10), then the rejected ones
grouped by verdict (the first filter that rejects them and why) with a count;
--all-pods prints one line per pod. Then what the scheduler would do now. For
any other Run: where it is and why it is not being planned. Exit 0 explained,
1 no such Run, 2 trouble.
"""


class _Trouble(Exception):
    def __init__(self, message: str, code: int = EXIT_TROUBLE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("run", metavar="RUN", help="the Run to explain: NAME, or NAMESPACE/NAME")
    parser.add_argument(
        "-n",
        "--namespace",
        help="the Run's namespace (default: the kubeconfig context's namespace, else default)",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="table (default) or json")
    parser.add_argument(
        "--all-pods",
        action="store_true",
        help=f"one table line per candidate pod (default: the top {DEFAULT_TOP} ranked, rejected pods "
        "grouped by verdict); json always lists every pod",
    )
    parser.add_argument(
        "--cycle-log",
        metavar="FILE",
        help="the scheduler's cycle log: also show the Run's last logged cycle (plan, reservation held)",
    )
    parser.add_argument(
        "--heartbeat-stale-after",
        metavar="DURATION",
        default="15s",
        help="the scheduler's --heartbeat-stale-after (default 15s)",
    )
    parser.add_argument("--now", metavar="T", help="RFC 3339 instant to evaluate at (default: the current time)")


# --- reading the cluster ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _World:
    run: Run
    objects: tuple[Object, ...]
    skipped: int
    """Objects that could not be decoded (the scheduler skips them too)."""


def _unwrap(result: Result[JSONObject, ApiError], what: str, host: str) -> JSONObject:
    if is_successful(result):
        return result.unwrap()
    raise _Trouble(_api_message(result.failure(), what, host))


def _api_message(error: ApiError, what: str, host: str) -> str:
    if error.kind in ("transport", "unreachable"):
        return f"cannot reach the API server at {host}: {error.message}"
    if error.kind in ("unauthorized", "forbidden"):
        return f"the API server at {host} refused to {what}: {error.message}"
    return f"cannot {what}: {error}"


def _listed(kube: Kube, path: str, params: dict[str, str], what: str) -> tuple[JSONObject, ...]:
    result = kube.list(path, params)
    if is_successful(result):
        return result.unwrap()[0]
    raise _Trouble(_api_message(result.failure(), what, kube.host))


def _read_world(kube: Kube, key: RunKey) -> _World:
    fetched = kube.get(RUNS.path(key.namespace, key.name))
    if not is_successful(fetched) and fetched.failure().kind == "not_found":
        raise _Trouble(f'run "{key}" not found', EXIT_NOT_FOUND)
    decoded = decode_run(_unwrap(fetched, f"read run {key}", kube.host))
    if not is_successful(decoded):
        raise _Trouble(f"run {key} cannot be decoded: {decoded.failure()}")
    run = decoded.unwrap()
    objects: list[Object] = []
    skipped = 0
    for raw in _listed(kube, RUNS.path(key.namespace), {}, f"list runs in namespace {key.namespace}"):
        other = decode_run(raw).value_or(None)
        if other is None:
            skipped += 1
        elif other.uid != run.uid:
            objects.append(other)
    objects.append(run)  # the one we read, even if the list is older or newer
    if run.runtime:
        selector = {"labelSelector": f"{RUNTIME_LABEL}={run.runtime}"}
        for raw in _listed(kube, PODS.path(key.namespace), selector, f"list pods in namespace {key.namespace}"):
            pod = decode_pod(raw).value_or(None)
            if pod is None:
                skipped += 1
            else:
                objects.append(pod)
    if run.workspace is not None:
        got = kube.get(WORKSPACES.path(key.namespace, run.workspace.name))
        if is_successful(got):
            workspace = decode_workspace(got.unwrap()).value_or(None)
            if workspace is None:
                skipped += 1
            else:
                objects.append(workspace)
        elif got.failure().kind != "not_found":
            raise _Trouble(_api_message(got.failure(), f"read workspace {run.workspace.name}", kube.host))
    return _World(run, tuple(objects), skipped)


# --- the cycle log ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Logged:
    line: int
    record: CycleRecord
    same_uid: bool
    malformed: int


def _last_logged(path: str, run: Run) -> _Logged | None:
    """The last record of ``run``'s key (by name: a Run recreated under the same name is flagged)."""
    needle = json.dumps(run.name, ensure_ascii=True)
    found: tuple[int, CycleRecord] | None = None
    malformed = 0
    try:
        with open(path, encoding="utf-8") as log:
            for number, line in enumerate(log, 1):
                if needle not in line:
                    continue  # cheap: most lines are other Runs' cycles
                decoded = decode_line(line)
                if not is_successful(decoded):
                    malformed += 1
                    continue
                record = decoded.unwrap()
                if isinstance(record, TruncatedRecord):
                    continue  # a record too large for the log: nothing in it to show
                if record.snapshot.key == run.key:
                    found = (number, record)
    except (OSError, UnicodeDecodeError) as problem:
        raise _Trouble(f"--cycle-log: cannot read {path}: {problem}") from None
    if found is None:
        return None
    number, record = found
    logged_run = record.snapshot.run
    same_uid = logged_run is None or logged_run.uid == run.uid
    return _Logged(number, record, same_uid, malformed)


# --- JSON ------------------------------------------------------------------------------------------


def _amounts(resources: Resources) -> dict[str, Json]:
    return {name: format_quantity(value) for name, value in resources.items()}


def _conditions_json(conditions: tuple[Condition, ...]) -> list[Json]:
    out: list[Json] = []
    for c in conditions:
        entry: dict[str, Json] = {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
        if c.last_transition_time is not None:
            entry["lastTransitionTime"] = format_time(c.last_transition_time)
        out.append(entry)
    return out


def _verdict_json(verdict: PodVerdict, exp: Explanation) -> dict[str, Json]:
    entry: dict[str, Json] = {
        "pod": verdict.pod,
        "feasible": verdict.feasible,
        "plugin": verdict.plugin,
        "reason": verdict.reason,
        "detail": pod_detail(verdict, exp),
        "usage": _amounts(verdict.slot.usage),
        "capacity": _amounts(verdict.slot.pod.capacity),
        "rank": verdict.rank,
        "scores": None,
        "total": None,
    }
    if verdict.score is not None:
        entry["scores"] = {name: value for name, value in verdict.score.by_plugin}
        entry["total"] = verdict.score.total
    return entry


def _logged_json(logged: _Logged | None) -> Json:
    if logged is None:
        return None
    snapshot = logged.record.snapshot
    reservation = snapshot.reservation
    return {
        "line": logged.line,
        "at": format_time(snapshot.now),
        "sameRun": logged.same_uid,
        "plan": plan_json(logged.record.plan),
        "reservationHeld": reservation is not None,
        "reservedPod": None if reservation is None else reservation.pod,
    }


def explanation_json(exp: Explanation, logged: _Logged | None, where: str) -> dict[str, Json]:
    run = exp.snapshot.run
    assert run is not None
    status = run.status
    return {
        "run": str(run.key),
        "uid": run.uid,
        "runtime": run.runtime,
        "phase": status.phase or "Pending",
        "message": status.message,
        "assignedPod": status.assigned_pod,
        "attempt": status.attempt,
        "conditions": _conditions_json(status.conditions),
        "now": format_time(exp.snapshot.now),
        "heartbeatStaleAfter": format_duration(exp.snapshot.config.stale_after()),
        "ledger": "empty",
        "note": LEDGER_NOTE,
        "where": where,
        "evaluated": exp.evaluated,
        "hypothetical": exp.hypothetical,
        "weights": {name: weight for name, weight in exp.weights},
        "pods": [_verdict_json(v, exp) for v in exp.verdicts],
        "neverFits": [
            {
                "resource": short.resource,
                "requested": format_quantity(short.requested),
                "largest": None if short.largest is None else format_quantity(short.largest),
            }
            for short in never_fits(exp)
        ],
        "plan": plan_json(exp.plan),
        "lastLogged": _logged_json(logged),
    }


# --- words -------------------------------------------------------------------------------------------


def _ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return ""
    seconds = (now - then).total_seconds()
    if seconds < 0:
        return "in the future"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.0f}h ago"


def _rejections_text(rejections: Rejections) -> str:
    return ", ".join(f"{reason} ×{count}" for _, reason, count in rejections)


def plan_text(plan: Result[Plan, CycleError]) -> str:
    """One sentence: what the cycle does."""
    if not is_successful(plan):
        error = plan.failure()
        return f"nothing this cycle: a plugin failed ({error.reason}: {error.message}); retried with back-off"
    value = plan.unwrap()
    if isinstance(value, Bind):
        return f"Bind to {value.pod} (score {value.scores[0].total})"
    if isinstance(value, Wait):
        rejected = f"; rejected: {_rejections_text(value.rejections)}" if value.rejections else "; no candidate pods"
        return f"Wait: {value.message}{rejected}; re-planned on a wakeup, or within {RECHECK_SECONDS:g}s"
    if isinstance(value, Fail):
        return f"Fail ({value.reason}): {value.message}"
    if isinstance(value, Cancel):
        return f"Cancel ({value.reason}): {value.message}"
    if isinstance(value, Delay):
        return f"Delay: retry back-off, plan again in {value.seconds:g}s"
    return f"Skip: {value.why}"


def where_text(exp: Explanation) -> str:
    """Where the Run is and whether the scheduler plans it."""
    run = exp.snapshot.run
    assert run is not None
    status = run.status
    phase = status.phase or "Pending"
    if status.pending:
        if not run.runtime:
            return "Pending with an empty spec.runtime: no scheduler plans it"
        decided = exp.plan.value_or(None)
        if isinstance(decided, Bind):
            return (
                "Pending, but a cycle now would bind it: the scheduler has not planned it since the cluster "
                "changed (a waiting Run is requeued after 30s or woken by pod and capacity events), holds a "
                "reservation for it whose bind it has not yet observed, or is not running (or not leading)"
            )
        if isinstance(decided, (Fail, Cancel)):
            return "Pending, and the next cycle ends it (see the plan)"
        if isinstance(decided, Delay):
            return "Pending, held by its retry back-off; the verdicts below are for when it is due"
        return "Pending: the scheduler plans it each time it is requeued or woken"
    if phase in ACTIVE_PHASES and status.assigned_pod:
        return (
            f"{phase} on pod {status.assigned_pod}: the scheduler bound it and plans only Pending Runs; "
            f"it holds capacity on {status.assigned_pod} until it leaves {'/'.join(sorted(ACTIVE_PHASES))}"
        )
    if phase in ACTIVE_PHASES:
        return f"{phase} with no assigned pod: not Pending, so the scheduler does not plan it (and it uses no capacity)"
    finished = f" at {format_time(status.completion_time)}" if status.completion_time is not None else ""
    on = f" (ran on pod {status.assigned_pod})" if status.assigned_pod else ""
    return f"{phase}{finished}{on}: finished, the scheduler never plans it again"


def _requests_text(run: Run) -> str:
    if run.requests_error is not None:
        return f"invalid ({run.requests_error})"
    return ", ".join(f"{name}={format_quantity(value)}" for name, value in run.requests.items()) or "-"


def _affinity_lines(run: Run) -> list[str]:
    if run.affinity_error is not None:
        return [f"invalid ({run.affinity_error})"]
    affinity = run.affinity
    lines = [f"required {selector_text(t.selector)}" for t in affinity.required]
    lines += [f"preferred {selector_text(w.term.selector)} (weight {w.weight})" for w in affinity.preferred]
    lines += [f"anti-affinity required {selector_text(t.selector)}" for t in affinity.anti_required]
    lines += [
        f"anti-affinity preferred {selector_text(w.term.selector)} (weight {w.weight})" for w in affinity.anti_preferred
    ]
    return lines


def _usage_text(verdict: PodVerdict) -> str:
    capacity = verdict.slot.pod.capacity
    usage = verdict.slot.usage
    parts = [
        f"{name} {format_quantity(usage.get(name, 0))}/{format_quantity(limit)}" for name, limit in capacity.items()
    ]
    return ", ".join(parts) or "-"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A requested resource no current candidate pod has enough capacity for, even empty."""

    resource: str
    requested: Amount
    largest: Amount | None
    """The largest capacity any candidate pod advertises; ``None`` when none advertises it."""


def never_fits(exp: Explanation) -> tuple[Shortfall, ...]:
    """The resources the Run requests beyond every candidate pod's whole capacity (any state).

    The plugin calls such a pod "full", which sends an operator waiting for
    capacity to free up; it never will until a larger pod of the runtime exists.
    """
    snapshot = exp.snapshot
    run = snapshot.run
    if run is None or not exp.evaluated or run.requests_error is not None or not snapshot.pods:
        return ()
    found: list[Shortfall] = []
    for name, amount in run.requests.items():
        if amount <= 0:
            continue
        limits = [slot.pod.capacity[name] for slot in snapshot.pods if name in slot.pod.capacity]
        largest = max(limits) if limits else None
        if largest is None or amount > largest:
            found.append(Shortfall(name, amount, largest))
    return tuple(found)


def never_fits_text(run: Run, shortfalls: Sequence[Shortfall]) -> str:
    parts = [
        f"{s.resource} {format_quantity(s.requested)}, "
        + (f"the largest pod has {format_quantity(s.largest)}" if s.largest is not None else f"no pod advertises {s.resource}")
        for s in shortfalls
    ]
    return f'no Runtime Pod of runtime "{run.runtime}" can ever hold this Run: it requests ' + "; ".join(parts)


def pod_detail(verdict: PodVerdict, exp: Explanation) -> str:
    """The verdict's detail, except that an available pod too small for the request says so, not "full"."""
    run = exp.snapshot.run
    if verdict.plugin != AVAILABILITY_PLUGIN or run is None or run.requests_error is not None:
        return verdict.detail
    snapshot = exp.snapshot
    pod = verdict.slot.pod
    if not pod.available(snapshot.now, snapshot.config.stale_after()):
        return verdict.detail  # the first failing check is not about capacity
    wanted = [(name, amount, pod.capacity.get(name)) for name, amount in run.requests.items() if amount > 0]
    if not any(limit is not None and amount > limit for _, amount, limit in wanted):
        return verdict.detail
    parts: list[str] = []
    for name, amount, limit in wanted:
        if limit is None:
            parts.append(f"does not advertise {name}")
        elif amount > limit:
            parts.append(f"too small: {name} capacity {format_quantity(limit)}, needs {format_quantity(amount)}")
        else:
            used = verdict.slot.usage.get(name, 0)
            if used + amount > limit:
                parts.append(
                    f"full: {name} {format_quantity(used)}/{format_quantity(limit)} in use, "
                    f"needs {format_quantity(amount)}"
                )
    return "; ".join(parts)


def candidate_rows(exp: Explanation, *, all_pods: bool, top: int = DEFAULT_TOP) -> tuple[list[tuple[str, ...]], bool]:
    """The candidate table's rows, header first, and whether any line stands for several pods.

    Ranked (feasible) pods get a line each, the first ``top`` only; rejected pods
    with the same filter, reason and detail share one line with their count,
    the largest group first (ties in name order). ``all_pods``: a line per pod.
    """
    weights = dict(exp.weights)
    rows: list[tuple[str, ...]] = [("RANK", "POD", "USAGE", "FILTER", "VERDICT")]
    feasible = [v for v in exp.verdicts if v.feasible]
    rejected = [v for v in exp.verdicts if not v.feasible]
    shown = feasible if all_pods else feasible[:top]
    for v in shown:
        rows.append((str(v.rank) if v.rank is not None else "-", v.pod, _usage_text(v), "-", _score_text(v, weights)))
    if len(shown) < len(feasible):
        rows.append(("", f"… {len(feasible) - len(shown)} more feasible", "", "", "(--all-pods lists them)"))
    if all_pods:
        for v in rejected:
            rows.append(("-", v.pod, _usage_text(v), v.plugin or "-", f"{v.reason}: {pod_detail(v, exp)}"))
        return rows, False
    groups: dict[tuple[str | None, str | None, str], list[PodVerdict]] = {}
    for v in rejected:
        detail = pod_detail(v, exp)
        if v.plugin == AVAILABILITY_PLUGIN and detail.startswith(STALE_DETAIL):
            detail = STALE_DETAIL  # each stale pod's age differs: group them, then show the range
        groups.setdefault((v.plugin, v.reason, detail), []).append(v)
    grouped = False
    for (plugin, reason, detail), members in sorted(groups.items(), key=lambda item: -len(item[1])):
        if detail == STALE_DETAIL:
            detail = _stale_text(members, exp)
        usages = {_usage_text(m) for m in members}
        usage = usages.pop() if len(usages) == 1 else "various"
        pod = members[0].pod if len(members) == 1 else f"{len(members)} pods"
        grouped = grouped or len(members) > 1
        rows.append(("-", pod, usage, plugin or "-", f"{reason}: {detail}"))
    return rows, grouped


def _stale_text(members: Sequence[PodVerdict], exp: Explanation) -> str:
    """One pod's stale-heartbeat detail as given, or the range of last-probe ages of several."""
    if len(members) == 1:
        return pod_detail(members[0], exp)
    now = exp.snapshot.now
    probes = sorted((probed for m in members if (probed := m.slot.pod.heartbeat_at) is not None), reverse=True)
    window = format_duration(exp.snapshot.config.stale_after())
    if not probes or probes[0] == probes[-1]:
        return pod_detail(members[0], exp)
    return f"{STALE_DETAIL} last probe {_ago(probes[0], now)} to {_ago(probes[-1], now)} (stale after {window})"


def _score_text(verdict: PodVerdict, weights: dict[str, int]) -> str:
    score = verdict.score
    if score is None:
        return "feasible"
    parts = []
    for name, value in score.by_plugin:
        weight = weights.get(name, 1)
        parts.append(f"{name} {value}" + (f"×{weight}" if weight != 1 else ""))
    return f"total {score.total} = " + " + ".join(parts)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _para(lead: str, text: str, width: int) -> list[str]:
    """``lead`` then ``text``, wrapped to ``width`` with continuation lines indented past the lead's margin."""
    margin = " " * (len(lead) - len(lead.lstrip()) + 2)
    return textwrap.wrap(
        lead + text,
        width,
        subsequent_indent=margin,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _table(rows: Sequence[tuple[str, ...]], caps: Sequence[int], width: int, indent: str = "  ") -> Iterator[str]:
    """Aligned columns (as in ``simulate``); the last one takes what is left of ``width`` and wraps."""
    widths = [min(max(len(row[i]) for row in rows), caps[i]) for i in range(len(caps))]
    last = max(width - len(indent) - sum(w + 2 for w in widths), 24)
    for row in rows:
        cells = [_wrap(cell, w) for cell, w in zip(row, widths)] + [_wrap(row[-1], last)]
        for line in range(max(len(c) for c in cells)):
            parts = [(cells[i][line] if line < len(cells[i]) else "").ljust(widths[i]) for i in range(len(widths))]
            tail = cells[-1][line] if line < len(cells[-1]) else ""
            yield (indent + "  ".join(parts + [tail])).rstrip()


def render_table(
    exp: Explanation,
    logged: _Logged | None,
    cycle_log: str | None,
    width: int = TABLE_WIDTH,
    *,
    all_pods: bool = False,
) -> str:
    snapshot = exp.snapshot
    run = snapshot.run
    assert run is not None
    now = snapshot.now
    status = run.status
    out: list[str] = []
    created = f", created {_ago(run.creation_timestamp, now)}" if run.creation_timestamp is not None else ""
    out.append(f"Run {run.key}  (runtime {run.runtime or '-'}{created})")
    attempt = f" (attempt {status.attempt})" if status.attempt else ""
    out.append(f"  phase:       {status.phase or 'Pending'}{attempt}")
    if status.assigned_pod:
        out.append(f"  assigned:    {status.assigned_pod}")
    if status.message:
        out.append(f"  message:     {status.message}")
    out.append(f"  requests:    {_requests_text(run)}")
    labels = ", ".join(f"{k}={v}" for k, v in run.labels.items())
    if labels:
        out.append(f"  labels:      {labels}")
    for i, line in enumerate(_affinity_lines(run)):
        out.append(f"  {'affinity:' if i == 0 else '':<12} {line}")
    if run.workspace is not None:
        ws = snapshot.workspace
        bound = f" to {ws.bound_pod}" if ws is not None and ws.bound_pod else ""
        state = "missing" if ws is None else f"{ws.phase or 'no phase'}{bound}"
        out.append(f"  workspace:   {run.workspace.name} ({state})")
    if status.conditions:
        out.append("  conditions:")
        rows: list[tuple[str, ...]] = [("TYPE", "STATUS", "REASON", "AGE", "MESSAGE")]
        rows += [
            (c.type, c.status, c.reason or "-", _ago(c.last_transition_time, now) or "-", c.message or "-")
            for c in status.conditions
        ]
        out.extend(_table(rows, (28, 6, 18, 10), width, indent="    "))
    out.append("")
    out.extend(_para("Where: ", f"{where_text(exp)}.", width))
    out.append("")
    shortfalls = never_fits(exp)
    if shortfalls and status.pending:
        out.extend(_para("Never fits: ", f"{never_fits_text(run, shortfalls)}.", width))
        out.append("")

    if exp.evaluated:
        stale = format_duration(snapshot.config.stale_after())
        out.append(
            f"Candidate pods ({RUNTIME_LABEL}={run.runtime} in {run.namespace}: {len(snapshot.pods)}), "
            f"at {format_time(now)}, heartbeat stale after {stale}"
            + (", as if the retry back-off had ended" if exp.hypothetical else "")
            + ":"
        )
        if exp.verdicts:
            rows, grouped = candidate_rows(exp, all_pods=all_pods)
            out.extend(_table(rows, (4, 30, 16, 22), width))
            if grouped:
                out.append("  (rejected pods with the same verdict share a line; --all-pods prints one per pod)")
        else:
            out.append(f"  (none: no pod in {run.namespace} is labelled {RUNTIME_LABEL}={run.runtime})")
        if exp.error is not None:
            out.append(f"  scoring failed: {exp.error.message}")
        out.append("")

    if status.pending:
        out.extend(_para("The scheduler would now: ", plan_text(exp.plan), width))
        out.extend(_para("  note: ", f"{LEDGER_NOTE}.", width))
    if cycle_log is not None:
        out.append("")
        if logged is None:
            out.append(f"Last logged cycle: none for {run.key} in {cycle_log}")
        else:
            snap = logged.record.snapshot
            flag = "" if logged.same_uid else " (an earlier Run of the same name)"
            out.append(f"Last logged cycle{flag}: {cycle_log} line {logged.line}, at {format_time(snap.now)}")
            out.extend(_para("  plan: ", plan_text(logged.record.plan), width))
            if snap.reservation is not None:
                held = (
                    f"yes, on {snap.reservation.pod} (planned from resourceVersion "
                    f"{snap.reservation.resource_version}): its bind was awaiting observation"
                )
                out.extend(_para("  reservation held: ", held, width))
            else:
                out.append("  reservation held: no")
    return "\n".join(out) + "\n"


# --- the command -------------------------------------------------------------------------------------


def _fail(message: str, code: int) -> int:
    print(f"kruntimes explain: {message}", file=sys.stderr)
    return code


def _run_key(text: str, namespace: str | None, kubeconfig: str | None, context: str | None) -> RunKey:
    """``RUN`` or ``NAMESPACE/RUN``, in ``-n``'s namespace or else the context's (as kubectl picks it)."""
    if namespace is not None and (not namespace or "/" in namespace):
        raise _Trouble(f"-n/--namespace: not a namespace name: {namespace!r}")
    if "/" in text:
        key = RunKey.parse(text)
        if key is None:
            raise _Trouble(f"expected RUN or NAMESPACE/RUN (e.g. my-run, default/my-run), not {text!r}")
        if namespace is not None and namespace != key.namespace:
            raise _Trouble(f"the Run {text!r} is not in namespace {namespace!r} (-n): name it once")
        return key
    if not text:
        raise _Trouble("expected RUN or NAMESPACE/RUN (e.g. my-run, default/my-run), not an empty name")
    return RunKey(namespace if namespace is not None else default_namespace(kubeconfig, context), text)


def default_namespace(
    kubeconfig: str | None,
    context: str | None,
    *,
    environ: dict[str, str] | None = None,
    home: Path | None = None,
    service_account_namespace: Path = SERVICE_ACCOUNT_NAMESPACE,
) -> str:
    """The namespace kubectl would use: the chosen context's ``namespace``, else ``default``.

    The files are those ``kubeclient.kube.kubeconfig_files`` finds (those the
    scheduler's client loads), merged as kubectl merges them:
    the first file to set ``current-context``, or to define a context of that
    name, wins. In a pod without a kubeconfig it is the pod's own namespace
    (``$POD_NAMESPACE``, then the service account's namespace file), as
    client-go's in-cluster config answers. A kubeconfig that cannot be read
    gives ``default`` here: connecting reports the problem.
    """
    env = dict(os.environ) if environ is None else environ
    found = kubeconfig_files(kubeconfig, environ=env, home=home)
    files = found[1] if found is not None else ()
    if not files:
        if "KUBERNETES_SERVICE_HOST" in env:
            if env.get("POD_NAMESPACE"):
                return env["POD_NAMESPACE"]
            try:
                return service_account_namespace.read_text(encoding="utf-8").strip() or "default"
            except OSError:
                return "default"
        return "default"
    docs: list[dict[object, object]] = []
    for name in files:
        try:
            with open(name, encoding="utf-8") as handle:
                doc = yaml.safe_load(handle)
        except (OSError, ValueError, RecursionError, yaml.YAMLError):  # ValueError: undecodable, or an over-long integer
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    chosen = context or next((str(d["current-context"]) for d in docs if d.get("current-context")), "")
    for doc in docs:
        contexts = doc.get("contexts")
        for entry in contexts if isinstance(contexts, list) else ():
            if isinstance(entry, dict) and entry.get("name") == chosen:
                body = entry.get("context")
                found = body.get("namespace") if isinstance(body, dict) else None
                return found if isinstance(found, str) and found else "default"
    return "default"


def _options(args: argparse.Namespace) -> tuple[RunKey, datetime, SchedulerConfig]:
    key = _run_key(args.run, args.namespace, args.kubeconfig, args.context)
    now = datetime.now(timezone.utc)
    if args.now is not None:
        parsed = parse_time(args.now)
        if parsed is None:
            raise _Trouble(f"--now: must be an RFC 3339 time such as 2026-01-01T00:00:00Z, not {args.now!r}")
        now = parsed
    stale = parse_duration(args.heartbeat_stale_after)
    if stale is None:
        raise _Trouble(f"--heartbeat-stale-after: must be a duration such as 15s, not {args.heartbeat_stale_after!r}")
    return key, now, SchedulerConfig(heartbeat_stale_after=stale)  # <= 0 means the default, as in the scheduler


def connect_or_explain(kubeconfig: str | None, context: str | None) -> Kube:
    """A client, or ``_Trouble`` saying why not (exit 2): ``kubeclient.kube.connect`` answers any
    kubeconfig, however malformed, with a one-line reason."""
    connected = connect(kubeconfig, context)
    if not is_successful(connected):
        raise _Trouble(connected.failure().message)
    return connected.unwrap()


def run(args: argparse.Namespace) -> int:
    try:
        key, now, config = _options(args)
        kube = connect_or_explain(args.kubeconfig, args.context)
        try:
            world = _read_world(kube, key)
        finally:
            kube.close()
        logged = _last_logged(args.cycle_log, world.run) if args.cycle_log is not None else None
    except _Trouble as trouble:
        return _fail(trouble.message, trouble.code)
    state = from_objects(world.objects)
    exp = explain(take(state, EMPTY_LEDGER, key, now, config, every_target=True))  # it counts matches per pod
    if world.skipped:
        print(f"kruntimes explain: warning: {world.skipped} undecodable object(s) left out", file=sys.stderr)
    if logged is not None and logged.malformed:
        print(f"kruntimes explain: warning: {logged.malformed} malformed cycle-log line(s) skipped", file=sys.stderr)
    if args.output == "json":
        output = json.dumps(explanation_json(exp, logged, where_text(exp)), indent=2, ensure_ascii=False) + "\n"
    else:
        output = render_table(exp, logged, args.cycle_log, terminal_width(sys.stdout, TABLE_WIDTH), all_pods=args.all_pods)
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK
