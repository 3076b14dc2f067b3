"""Planning cost vs. unrelated Runs: snapshot.take + plan_cycle, medians, interleaved.

    .venv/bin/python benchmarks/planning.py            # 10/100/1000 pods × 0/10k/100k unrelated Runs
    .venv/bin/python benchmarks/planning.py --quick    # a fast smoke run
    .venv/bin/python benchmarks/planning.py --pods 100 --unrelated 0,100000 --cycles 501

Prints one JSON object, then a one-line summary. See benchmarks/README.md for the method.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Final

from _worlds import runtime_pod

from kruntimes.pure import snapshot
from kruntimes.pure.state import cluster
from kruntimes.pure.state.cluster import ClusterState
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import (
    API_VERSION,
    DEFAULT_CONFIG,
    TOPOLOGY_KEY,
    Run,
    RunKey,
    RuntimePod,
    frozen_labels,
)
from kruntimes.pure.model.plan import Bind
from kruntimes.pure.model.times import format_time

NOW: Final = datetime(2026, 1, 1, tzinfo=timezone.utc)
NAMESPACE: Final = "bench"
RUNTIME: Final = "python"
TARGET_RATIO: Final = 1.2
RELATED_PER_POD: Final = 1
"""Active Runs of the candidate runtime on each candidate pod (a realistic, non-empty usage)."""


def _pod(name: str, runtime: str, capacity: int) -> RuntimePod:
    return runtime_pod(name, namespace=NAMESPACE, runtime=runtime, capacity=capacity, now=NOW)


def _run(name: str, affinity: dict[str, object] | None = None) -> Run:
    spec: dict[str, object] = {"runtime": RUNTIME}
    if affinity is not None:
        spec["affinity"] = affinity
    return decode_run(
        {
            "apiVersion": API_VERSION,
            "kind": "Run",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": f"uid-run-{name}",
                "resourceVersion": "1",
                "creationTimestamp": format_time(NOW - timedelta(minutes=1)),
            },
            "spec": spec,
        }
    ).unwrap()


def _preferred(labels: dict[str, str]) -> dict[str, object]:
    return {"weight": 1, "runAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": TOPOLOGY_KEY}}


PLAIN: Final = RunKey(NAMESPACE, "plain")
AFFINE: Final = RunKey(NAMESPACE, "affine")
AFFINITY: Final[dict[str, object]] = {
    "runAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [_preferred({"zone": "blue"}), _preferred({"tier": "gold"})]
    }
}
"""Two preferred ``matchLabels`` terms; some related active Runs match them, no unrelated Run does."""


def _candidates(count: int) -> list[RuntimePod]:
    return [_pod(f"runtime-{i:04d}", RUNTIME, 4) for i in range(count)]


def _related(pods: Sequence[RuntimePod]) -> list[Run]:
    """One active Run per candidate pod; every third matches one of the affinity terms."""
    template = _run("related")
    labels = ({"zone": "blue"}, {"tier": "gold"}, {"zone": "red"})
    runs = []
    for i, pod in enumerate(pods):
        for j in range(RELATED_PER_POD):
            name = f"related-{i:04d}-{j}"
            runs.append(
                replace(
                    template,
                    name=name,
                    uid=f"uid-run-{name}",
                    labels=frozen_labels(labels[i % 3]),
                    status=replace(template.status, phase="Running", assigned_pod=pod.name),
                )
            )
    return runs


def _unrelated(count: int) -> list[Run]:
    """Active Runs of other runtimes in the same namespace, with labels no term of the Run names."""
    template = replace(_run("unrelated"), runtime="other")
    return [
        replace(
            template,
            name=f"unrelated-{i:06d}",
            uid=f"uid-unrelated-{i:06d}",
            labels=frozen_labels({"team": f"t{i % 100}", "app": f"a{i}"}),
            status=replace(template.status, phase="Running", assigned_pod=f"other-{i % 100:03d}"),
        )
        for i in range(count)
    ]


def build_state(pods: int, unrelated: Sequence[Run]) -> ClusterState:
    candidates = _candidates(pods)
    others = [_pod(f"other-{i:03d}", "other", 10**9) for i in range(100)]
    pending = [_run(PLAIN.name), _run(AFFINE.name, AFFINITY)]
    return cluster.from_objects([*candidates, *others, *_related(candidates), *unrelated, *pending])


def one_cycle_ns(state: ClusterState, key: RunKey) -> int:
    start = time.perf_counter_ns()
    snap = snapshot.take(state, EMPTY_LEDGER, key, NOW, DEFAULT_CONFIG)
    plan = plan_cycle(snap)
    elapsed = time.perf_counter_ns() - start
    if not isinstance(plan.value_or(None), Bind):  # every variant must really plan a bind
        raise AssertionError(plan)
    return elapsed


@dataclass(frozen=True)
class Row:
    pods: int
    affinity: str
    medians_ns: dict[int, int]
    ratio: float


def measure(pods: int, unrelated_sizes: Sequence[int], cycles: int, population: Sequence[Run]) -> list[Row]:
    states = {size: build_state(pods, population[:size]) for size in unrelated_sizes}
    variants = [(size, key) for size in unrelated_sizes for key in (PLAIN, AFFINE)]
    samples: dict[tuple[int, RunKey], list[int]] = {v: [] for v in variants}
    for size, key in variants:  # warm-up: caches, first-touch of the indexes
        for _ in range(3):
            one_cycle_ns(states[size], key)
    gc.collect()
    for round_ in range(cycles):
        # Interleave every variant in each round, rotating the start, so drift hits all alike.
        shift = round_ % len(variants)
        for size, key in variants[shift:] + variants[:shift]:
            samples[(size, key)].append(one_cycle_ns(states[size], key))
    rows = []
    for key, label in ((PLAIN, "none"), (AFFINE, "preferred x2")):
        medians = {size: int(statistics.median(samples[(size, key)])) for size in unrelated_sizes}
        low, high = min(unrelated_sizes), max(unrelated_sizes)
        rows.append(Row(pods, label, medians, round(medians[high] / medians[low], 3)))
    return rows


def _sizes(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="10,100,1000", help="candidate pod counts (comma-separated)")
    parser.add_argument("--unrelated", default="0,10000,100000", help="unrelated active Run counts")
    parser.add_argument("--cycles", type=int, default=0, help="timed cycles per variant (default: by pod count)")
    parser.add_argument("--quick", action="store_true", help="10 and 100 pods, 0 and 100k unrelated, 41 cycles")
    args = parser.parse_args(argv)
    pods_sizes, unrelated_sizes = _sizes(args.pods), _sizes(args.unrelated)
    if args.quick:
        pods_sizes, unrelated_sizes = [10, 100], [0, 100_000]
    if len(unrelated_sizes) < 2:
        parser.error("--unrelated needs at least two sizes")
    population = _unrelated(max(unrelated_sizes))
    rows: list[Row] = []
    for pods in pods_sizes:
        cycles = args.cycles or (41 if args.quick else max(101, 200_000 // (pods * 10)))
        rows.extend(measure(pods, unrelated_sizes, cycles, population))
        print(f"  measured {pods} pods ({cycles} cycles per variant)", file=sys.stderr)
    worst = max(rows, key=lambda r: r.ratio)
    low, high = min(unrelated_sizes), max(unrelated_sizes)
    result = {
        "benchmark": "snapshot.take + plan_cycle, median per cycle",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "unrelated_runs": unrelated_sizes,
        "ratio": f"time({high} unrelated) / time({low})",
        "target_ratio": TARGET_RATIO,
        "results": [
            {
                "pods": r.pods,
                "affinity": r.affinity,
                "median_us": {str(size): round(ns / 1000, 1) for size, ns in r.medians_ns.items()},
                "ratio": r.ratio,
            }
            for r in rows
        ],
        "worst_ratio": worst.ratio,
        "ok": worst.ratio <= TARGET_RATIO,
    }
    print(json.dumps(result, indent=2))
    biggest = max(rows, key=lambda r: (r.pods, r.affinity != "none"))
    print(
        f"planning: worst {worst.ratio:.2f}x ({worst.pods} pods, affinity {worst.affinity}) "
        f"for {high:,} vs {low:,} unrelated Runs, target <= {TARGET_RATIO}x: {'OK' if result['ok'] else 'MISSED'}; "
        f"{biggest.pods} pods + {biggest.affinity}: {biggest.medians_ns[high] / 1e6:.2f} ms/cycle"
    )
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
