"""L0 planning benchmark: one cycle's pure work, and the cost of watch events, at scale.

    .venv/bin/python benchmarks/planning_l0.py                    # full: ~2-3 min
    .venv/bin/python benchmarks/planning_l0.py --quick            # 2/100/1k pods, fewer rounds, ~30 s
    .venv/bin/python benchmarks/planning_l0.py --sizes 1000:0,1000:10000 --rounds 101
    .venv/bin/python benchmarks/planning_l0.py --json-out l0.json # also write the JSON to a file

Prints one JSON object, then a one-line summary; the exit status is 1 when a
target is missed. See benchmarks/README.md ("planning_l0.py") for the method.

**Cycles.** A world is (P Runtime Pods, A active Runs) in one namespace, one
runtime, plus 100 assumed reservations in the ledger (Pending Runs whose bind
is in flight). Per world, five Runs are planned (``step.plan``: the ledger
observed and synced, ``snapshot.take``, ``plan_cycle``, timed together): ``plain`` (no affinity), ``anti`` (required
anti-affinity against 10 % of the active Runs), ``cohort`` (required affinity
to its own label: the bootstrap), ``preferred`` (two preferred terms) and
``full`` (requests more than any pod has free: every pod is rejected, the Wait
path). Variants and worlds of one pod count are interleaved round by round.

**Events.** At the largest size: pod heartbeats, Run status updates that stay
active (Running → Ready), Runs finishing (Running → Succeeded) and binds being
observed (Pending → Scheduled), applied with ``cluster.apply`` in batches of
1, 10 and 100 from the same base state; and ``cluster.from_objects`` over the
whole object list. Cycles run with the collector as the scheduler process runs
it (``--gc scheduler``, the default: ``effects.runner.tune_gc``'s raised
young-generation threshold, and the worlds frozen as the scheduler freezes its
synced caches) or with CPython's defaults (``--gc default``). Events run with
the collector enabled at default thresholds, and also after ``gc.freeze()`` and
with the collector disabled.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Final

from _worlds import runtime_pod

from kruntimes.effects.runner import GC_GEN0_THRESHOLD
from kruntimes.pure import ledger, step
from kruntimes.pure.state import cluster
from kruntimes.pure.state.cluster import ClusterState, Event
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger
from kruntimes.pure.model.objects import (
    API_VERSION,
    DEFAULT_CONFIG,
    TOPOLOGY_KEY,
    Run,
    RuntimePod,
    frozen_labels,
)
from kruntimes.pure.model.plan import Bind, Wait
from kruntimes.pure.model.times import format_time

NOW: Final = datetime(2026, 1, 1, tzinfo=timezone.utc)
NAMESPACE: Final = "bench"
RUNTIME: Final = "python"
RESERVATIONS: Final = 100
DEFAULT_SIZES: Final = "2:0,100:1000,1000:10000,5000:0,5000:50000"
QUICK_SIZES: Final = "2:0,100:1000,1000:0,1000:10000"

# Targets (medians), docs/performance.md.
TARGET_US: Final[dict[int, float]] = {100: 200.0, 1000: 1000.0, 5000: 5000.0}
TARGET_RATIO: Final = 1.2
TARGET_EVENT_US: Final = 10.0
TARGET_PLAIN_US: Final[dict[int, float]] = {5000: 200.0}
"""A plain Run (no affinity) is placed from the load index: its cycle does not grow with the pods."""

VARIANTS: Final = ("plain", "anti", "cohort", "preferred", "full")
EXPECTED: Final[dict[str, type]] = {"plain": Bind, "anti": Bind, "cohort": Bind, "preferred": Bind, "full": Wait}


# --- the worlds -----------------------------------------------------------------------


def _pod(name: str, capacity: int) -> RuntimePod:
    return runtime_pod(name, namespace=NAMESPACE, runtime=RUNTIME, capacity=capacity, now=NOW)


def _term(labels: dict[str, str]) -> dict[str, object]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": TOPOLOGY_KEY}


def _run(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    affinity: dict[str, object] | None = None,
    runs: int = 1,
) -> Run:
    spec: dict[str, object] = {"runtime": RUNTIME, "resources": {"requests": {"runs": str(runs)}}}
    if affinity is not None:
        spec["affinity"] = affinity
    metadata: dict[str, object] = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"uid-run-{name}",
        "resourceVersion": "1",
        "creationTimestamp": format_time(NOW - timedelta(minutes=1)),
    }
    if labels:
        metadata["labels"] = labels
    return decode_run({"apiVersion": API_VERSION, "kind": "Run", "metadata": metadata, "spec": spec}).unwrap()


PLANNED: Final[dict[str, Run]] = {
    "plain": _run("plan-plain"),
    "anti": _run(
        "plan-anti",
        affinity={"runAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term({"group": "x"})]}},
    ),
    "cohort": _run(
        "plan-cohort",
        labels={"cohort": "c1"},
        affinity={"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term({"cohort": "c1"})]}},
    ),
    "preferred": _run(
        "plan-preferred",
        affinity={
            "runAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "runAffinityTerm": _term({"zone": "blue"})},
                    {"weight": 1, "runAffinityTerm": _term({"tier": "gold"})},
                ]
            }
        },
    ),
    "full": _run("plan-full", runs=1_000_000),
}


def _active_labels(j: int, pod_index: int) -> dict[str, str]:
    labels = {"app": f"a{j % 50}"}
    if pod_index % 10 == 0:
        labels["group"] = "x"  # the Runs on every tenth pod: 10 % of the active Runs
    if j % 3 == 0:
        labels["zone"] = "blue"
    elif j % 3 == 1:
        labels["tier"] = "gold"
    return labels


@dataclass(frozen=True)
class World:
    pods: int
    active: int
    objects: tuple[RuntimePod | Run, ...]
    state: ClusterState
    ledger: Ledger
    active_runs: tuple[Run, ...]
    reserved_runs: tuple[Run, ...]
    pod_records: tuple[RuntimePod, ...]


def build_world(pods: int, active: int) -> World:
    """P pods, A active Runs round-robin over them, 100 reservations, the five planned Runs."""
    load = [active // pods + (1 if i < active % pods else 0) for i in range(pods)]
    reserved_on = [k % pods for k in range(RESERVATIONS)]
    reserved = [0] * pods
    for i in reserved_on:
        reserved[i] += 1
    # Headroom 2..6 varies per pod, so LeastLoaded has real work (many distinct keys).
    pod_records = [_pod(f"rt-{i:05d}", load[i] + reserved[i] + 2 + (i * 7) % 5) for i in range(pods)]
    template = _run("active")
    running = replace(template.status, phase="Running")
    active_runs = [
        replace(
            template,
            name=f"active-{j:06d}",
            uid=f"uid-active-{j:06d}",
            labels=frozen_labels(_active_labels(j, j % pods)),
            status=replace(running, assigned_pod=pod_records[j % pods].name),
        )
        for j in range(active)
    ]
    reserved_runs = [_run(f"reserved-{k:03d}", labels={"zone": "blue"} if k % 2 == 0 else {}) for k in range(RESERVATIONS)]
    objects: tuple[RuntimePod | Run, ...] = (*pod_records, *active_runs, *reserved_runs, *PLANNED.values())
    state = cluster.from_objects(objects)
    book = EMPTY_LEDGER
    for run, i in zip(reserved_runs, reserved_on):
        pod = pod_records[i]
        book = ledger.reserve(book, state, run, pod.name, pod.uid, NOW, DEFAULT_CONFIG).unwrap()
    if len(book) != RESERVATIONS:
        raise AssertionError(f"{len(book)} reservations")
    return World(pods, active, objects, state, book, tuple(active_runs), tuple(reserved_runs), tuple(pod_records))


# --- cycles -------------------------------------------------------------------------------


def one_cycle_ns(world: World, variant: str) -> int:
    key = PLANNED[variant].key
    start = time.perf_counter_ns()
    planned = step.plan(world.state, world.ledger, key, NOW, DEFAULT_CONFIG)  # observe, sync, take, plan
    elapsed = time.perf_counter_ns() - start
    plan = planned.planned
    if not isinstance(plan.value_or(None), EXPECTED[variant]):
        raise AssertionError(f"{variant} at {world.pods} pods planned {plan}")
    return elapsed


def _stats(samples: Sequence[int]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, (len(ordered) * 9) // 10)]
    return {"median_us": round(statistics.median(ordered) / 1000, 1), "p90_us": round(p90 / 1000, 1), "n": len(ordered)}


def _rounds(pods: int, override: int, quick: bool) -> int:
    if override:
        return override
    rounds = max(51, min(3000, 300_000 // max(pods, 1)))
    return max(21, rounds // 10) if quick else rounds


def measure_cycles(
    worlds: Sequence[World], rounds: int, gc_mode: str = "scheduler"
) -> dict[tuple[int, int, str], dict[str, float]]:
    """Median and p90 per (world, variant), interleaved round by round.

    ``gc_mode="scheduler"``: the collector as the scheduler process runs it
    (``effects.runner.tune_gc``: young-generation threshold raised, the state built
    before the cycles frozen); ``"default"``: CPython's defaults, nothing frozen.
    """
    cells = [(w, v) for w in worlds for v in VARIANTS]
    samples: dict[tuple[int, int, str], list[int]] = {(w.pods, w.active, v): [] for w, v in cells}
    for world, variant in cells:  # warm-up and a correctness check of every variant
        for _ in range(3):
            one_cycle_ns(world, variant)
    saved = gc.get_threshold()
    gc.collect()
    if gc_mode == "scheduler":
        gc.set_threshold(GC_GEN0_THRESHOLD, saved[1], saved[2])
        gc.freeze()
    try:
        for round_ in range(rounds):
            shift = round_ % len(cells)
            for world, variant in cells[shift:] + cells[:shift]:
                samples[(world.pods, world.active, variant)].append(one_cycle_ns(world, variant))
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
    return {key: _stats(values) for key, values in samples.items()}


# --- events -------------------------------------------------------------------------------

EVENT_KINDS: Final = ("heartbeat", "run_update", "run_finish", "run_bind")


def _events(world: World, kind: str, count: int, offset: int) -> list[Event]:
    """``count`` distinct events of one kind against ``world.state``."""
    out: list[Event] = []
    for n in range(count):
        i = offset + n
        if kind == "heartbeat":
            pod = world.pod_records[i % len(world.pod_records)]
            beat = NOW + timedelta(seconds=5, microseconds=i)
            out.append(Event("MODIFIED", replace(pod, resource_version=str(2 + i), heartbeat_at=beat)))
            continue
        if kind == "run_bind":
            run = world.reserved_runs[i % len(world.reserved_runs)]
            pod = world.pod_records[i % len(world.pod_records)]
            status = replace(run.status, phase="Scheduled", assigned_pod=pod.name, assigned_pod_uid=pod.uid)
            out.append(Event("MODIFIED", replace(run, resource_version=str(2 + i), status=status)))
            continue
        run = world.active_runs[(i * 7919) % len(world.active_runs)]
        phase = "Ready" if kind == "run_update" else "Succeeded"
        out.append(Event("MODIFIED", replace(run, resource_version=str(2 + i), status=replace(run.status, phase=phase))))
    return out


def _apply_all(state: ClusterState, events: Sequence[Event]) -> ClusterState:
    for event in events:
        state = cluster.apply(state, event)
    return state


GC_MODES: Final = ("on", "frozen", "off")


def measure_events(world: World, repetitions: int) -> list[dict[str, object]]:
    """Per (gc mode, kind, batch size): µs per event, median and p90 over the repetitions."""
    batches = (1, 10, 100)
    results: list[dict[str, object]] = []
    for mode in GC_MODES:
        gc.enable()
        gc.unfreeze()
        gc.collect()
        if mode == "frozen":
            gc.freeze()
        elif mode == "off":
            gc.disable()
        cells = [(kind, size) for kind in EVENT_KINDS for size in batches]
        prepared = {
            (kind, size): [_events(world, kind, size, r * size) for r in range(repetitions)] for kind, size in cells
        }
        samples: dict[tuple[str, int], list[int]] = {cell: [] for cell in cells}
        for r in range(repetitions):
            shift = r % len(cells)
            for cell in cells[shift:] + cells[:shift]:
                events = prepared[cell][r]
                start = time.perf_counter_ns()
                _apply_all(world.state, events)
                samples[cell].append((time.perf_counter_ns() - start) // cell[1])
        gc.enable()
        gc.unfreeze()
        for (kind, size), values in samples.items():
            results.append({"gc": mode, "kind": kind, "batch": size, **_stats(values)})
    gc.collect()
    return results


def measure_from_objects(world: World, repetitions: int) -> dict[str, float]:
    samples = []
    for _ in range(repetitions):
        gc.collect()
        start = time.perf_counter_ns()
        cluster.from_objects(world.objects)
        samples.append(time.perf_counter_ns() - start)
    stats = _stats(samples)
    return {"median_ms": round(stats["median_us"] / 1000, 2), "p90_ms": round(stats["p90_us"] / 1000, 2), "n": len(samples)}


# --- main ------------------------------------------------------------------------------------


def _sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        if part.strip():
            pods, _, active = part.partition(":")
            sizes.append((int(pods), int(active or 0)))
    return sorted(set(sizes))


def _build_time(fn: Callable[[], World]) -> tuple[World, float]:
    start = time.perf_counter()
    world = fn()
    return world, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="", help=f"pods:activeRuns pairs (default {DEFAULT_SIZES})")
    parser.add_argument("--rounds", type=int, default=0, help="timed rounds per pod count (default: by pod count)")
    parser.add_argument("--event-reps", type=int, default=0, help="repetitions per event cell (default 300)")
    parser.add_argument("--no-events", action="store_true", help="cycles only")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, a tenth of the rounds")
    parser.add_argument("--json-out", default="", help="also write the JSON result to this file")
    parser.add_argument(
        "--gc",
        choices=("scheduler", "default"),
        default="scheduler",
        help="the collector during cycles: as the scheduler runs it (threshold raised, state frozen; default) "
        "or CPython's defaults",
    )
    args = parser.parse_args(argv)
    sizes = _sizes(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES))

    cycles: list[dict[str, object]] = []
    worlds: dict[tuple[int, int], World] = {}
    for pods in sorted({p for p, _ in sizes}):
        group = []
        for p, a in sizes:
            if p == pods:
                world, _ = _build_time(functools.partial(build_world, p, a))
                worlds[(p, a)] = world
                group.append(world)
        rounds = _rounds(pods, args.rounds, args.quick)
        stats = measure_cycles(group, rounds, args.gc)
        for (p, a, variant), values in stats.items():
            cycles.append({"pods": p, "active_runs": a, "variant": variant, **values})
        print(f"  measured {pods} pods x {[w.active for w in group]} active ({rounds} rounds)", file=sys.stderr)

    biggest = max(worlds.values(), key=lambda w: (w.active, w.pods))
    events: list[dict[str, object]] = []
    from_objects: dict[str, float] = {}
    if not args.no_events:
        events = measure_events(biggest, args.event_reps or (60 if args.quick else 300))
        from_objects = measure_from_objects(biggest, 3 if args.quick else 7)
        print(f"  measured events at {biggest.pods} pods / {biggest.active} active Runs", file=sys.stderr)

    def median(p: int, a: int, variant: str) -> float | None:
        for row in cycles:
            if (row["pods"], row["active_runs"], row["variant"]) == (p, a, variant):
                value = row["median_us"]
                assert isinstance(value, float)
                return value
        return None

    checks: list[dict[str, object]] = []
    for (p, a) in sorted(worlds):
        limit = TARGET_US.get(p)
        if limit is None or a == 0 and any(q == p and b > 0 for q, b in worlds):
            continue
        worst = max(VARIANTS, key=lambda v: median(p, a, v) or 0.0)
        value = median(p, a, worst) or 0.0
        checks.append({"target": f"cycle at {p} pods / {a} active <= {limit:g} us (worst variant {worst})",
                       "value_us": value, "ok": value <= limit})
    for (p, a) in sorted(worlds):
        plain_limit = TARGET_PLAIN_US.get(p)
        if plain_limit is not None and a > 0:
            plain = median(p, a, "plain") or 0.0
            checks.append({"target": f"plain cycle at {p} pods / {a} active <= {plain_limit:g} us",
                           "value_us": plain, "ok": plain <= plain_limit})
    for (p, a) in sorted(worlds):
        if a > 0 and (p, 0) in worlds:
            ratios = {v: round((median(p, a, v) or 0.0) / (median(p, 0, v) or 1.0), 3) for v in VARIANTS if v != "anti"}
            worst_ratio = max(ratios.values())
            checks.append({"target": f"cycle with {a} active Runs / none at {p} pods <= {TARGET_RATIO}x",
                           "ratios": ratios, "ok": worst_ratio <= TARGET_RATIO})
    if events:
        for kind in EVENT_KINDS:
            row = next(e for e in events if e["gc"] == "on" and e["kind"] == kind and e["batch"] == 100)
            event_us = row["median_us"]
            assert isinstance(event_us, float)
            checks.append({"target": f"{kind} event (gc on, batch 100) <= {TARGET_EVENT_US:g} us/event",
                           "value_us": event_us, "ok": event_us <= TARGET_EVENT_US})

    result = {
        "benchmark": "L0 planning: snapshot.take + plan_cycle per Run; cluster.apply per event",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "reservations": RESERVATIONS,
        "cycles_gc": args.gc,
        "cycles": cycles,
        "events_at": {"pods": biggest.pods, "active_runs": biggest.active},
        "events": events,
        "from_objects": {"objects": len(biggest.objects), **from_objects},
        "checks": checks,
        "ok": all(bool(c["ok"]) for c in checks),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    missed = [str(c["target"]) for c in checks if not c["ok"]]
    largest = max(worlds)
    plain = median(largest[0], largest[1], "plain") or 0.0
    print(
        f"planning_l0: {len(checks) - len(missed)}/{len(checks)} targets met"
        f"{'; missed: ' + '; '.join(missed) if missed else ''}; "
        f"{largest[0]} pods / {largest[1]} active, plain: {plain / 1000:.2f} ms/cycle"
    )
    return 0 if not missed else 1


if __name__ == "__main__":
    raise SystemExit(main())
