"""L0 queue benchmark: the queue's and the state's work per bind, against the size of the backlog.

    .venv/bin/python benchmarks/queue_l0.py                         # ~1 min
    .venv/bin/python benchmarks/queue_l0.py --sizes 1000,50000 --rounds 5
    .venv/bin/python benchmarks/queue_l0.py --json-out queue_l0.json

In one process, no API server: what ``backlog.py`` measures end to end includes the dev cluster,
the HTTP client and the machine's other load; this isolates the scheduler's own structures. Per
backlog size N (default 1k, 10k, 50k Pending Runs of one namespace and runtime):

* ``admission``: the parking lot holds N Runs parked in creation order (``park_unplanned``, as a
  new leader parks its backlog). One admission is what a released slot costs the lot: the head of
  the line (``parked``, 8 keys), the first activated for a pod, its cycle ``finished``, and one
  newer Run parked at the tail, so N stays N. µs per admission.
* ``events``: the three watch events of a bind (Pending -> Scheduled -> Running -> Succeeded),
  each a JSON line parsed, slimmed, decoded and applied to a ``ClusterState`` holding N Pending
  Runs and 50 pods. µs per bind.
* ``workspace``: the Runs a workspace's change wakes (``runner.workspace_wakeups``) when N Pending
  Runs name no workspace and 5 name it. µs per event.

Rounds interleave the sizes (each round times every size, in rotating order) and the figure is
the median over rounds; the target is the largest size over the smallest <= 1.2x per part. It runs
against any tree: ``PYTHONPATH=<worktree>/src .venv/bin/python benchmarks/queue_l0.py``.
Prints one JSON object, then a summary; the exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kruntimes.effects.informer import slim_run  # noqa: E402
from kruntimes.effects.parking import Parking  # noqa: E402
from kruntimes.effects.runner import workspace_wakeups  # noqa: E402
from kruntimes.pure.model.objects import RunKey  # noqa: E402
from kruntimes.pure.queueing import ParkReason  # noqa: E402
from kruntimes.pure.readers.kube import decode_run  # noqa: E402
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply  # noqa: E402
from tests.builders import decoded_pod, decoded_workspace, run_json  # noqa: E402

DEFAULT_SIZES: Final = (1_000, 10_000, 50_000)
TARGET: Final = 1.2
NAMESPACE: Final = "default"
RUNTIME: Final = "python"
PODS: Final = 50
PHASES: Final = ("Scheduled", "Running", "Succeeded")
OPS_PER_ROUND: Final = 2_000
"""Admissions, binds or workspace events timed per size in one round."""


def _name(i: int) -> str:
    return f"r-{i:07d}"


def _order(i: int) -> tuple[int, str, str]:
    return (i, NAMESPACE, _name(i))


class AdmissionWorld:
    def __init__(self, size: int) -> None:
        self.parking = Parking(clock=lambda: 0.0)
        for i in range(size):
            self.parking.park_unplanned(RunKey(NAMESPACE, _name(i)), RUNTIME, _order(i))
        self.next = size

    def run(self, ops: int) -> float:
        parking = self.parking
        reasons: tuple[ParkReason, ...] = ("capacity", "constraints")
        began = time.perf_counter()
        for _ in range(ops):
            head = parking.parked(NAMESPACE, RUNTIME, reasons, 8)
            parking.activate(head[:1], pod="p-00")
            parking.finished(head[0])
            parking.park_unplanned(RunKey(NAMESPACE, _name(self.next)), RUNTIME, _order(self.next))
            self.next += 1
        return time.perf_counter() - began


def _run_line(i: int, phase: str = "", version: int = 1) -> bytes:
    pod = f"p-{i % PODS:02d}" if phase else ""
    body = run_json(_name(i), labels={"app": "backlog"}, requests={"runs": "1"}, phase=phase, assigned_pod=pod,
                    assigned_pod_uid="pod-uid" if pod else "", resource_version=str(version))
    return json.dumps({"type": "MODIFIED", "object": body}).encode()


def _decoded(line: bytes) -> Any:
    return decode_run(slim_run(json.loads(line)["object"])).unwrap()


class EventWorld:
    def __init__(self, size: int) -> None:
        state = EMPTY_STATE
        for p in range(PODS):
            state = apply(state, Event("ADDED", decoded_pod(f"p-{p:02d}")))
        for i in range(size):
            state = apply(state, Event("ADDED", _decoded(_run_line(i))))
        self.state, self.size, self.next, self.version = state, size, 0, 10 * size
        # the lines a bind's events carry, made before timing (the server makes them, not us)
        self.lines: list[tuple[bytes, bytes, bytes]] = []

    def prepare(self, ops: int) -> None:
        self.lines = []
        for k in range(ops):
            i = (self.next + k) % self.size
            self.version += 3
            scheduled, running, succeeded = (_run_line(i, phase, self.version + n) for n, phase in enumerate(PHASES))
            self.lines.append((scheduled, running, succeeded))

    def run(self, ops: int) -> float:
        state = self.state
        began = time.perf_counter()
        for lines in self.lines:
            for line in lines:
                state = apply(state, Event("MODIFIED", _decoded(line)))
        spent = time.perf_counter() - began
        # the Runs back to Pending, untimed, so every round binds from the same backlog
        for k in range(ops):
            i = (self.next + k) % self.size
            self.version += 1
            state = apply(state, Event("MODIFIED", _decoded(_run_line(i, "", self.version))))
        self.state, self.next = state, (self.next + ops) % self.size
        return spent


class WorkspaceWorld:
    def __init__(self, size: int) -> None:
        state = EMPTY_STATE
        for i in range(size):
            state = apply(state, Event("ADDED", _decoded(_run_line(i))))
        for i in range(5):
            run = decode_run(run_json(f"ws-user-{i}", workspace="ws", requests={"runs": "1"})).unwrap()
            state = apply(state, Event("ADDED", run))
        self.old: ClusterState = apply(state, Event("ADDED", decoded_workspace("ws", phase="Lost")))
        self.event = Event("MODIFIED", decoded_workspace("ws", phase="Bound", bound_pod="p-00"))
        self.new = apply(self.old, self.event)

    def run(self, ops: int) -> float:
        old, new, event = self.old, self.new, self.event
        began = time.perf_counter()
        for _ in range(ops):
            woken = workspace_wakeups(old, new, event)
        spent = time.perf_counter() - began
        assert len(woken) == 5, woken
        return spent


def measure(sizes: Sequence[int], rounds: int, ops: int) -> dict[str, dict[int, float]]:
    makers: dict[str, Callable[[int], Any]] = {"admission": AdmissionWorld, "events": EventWorld, "workspace": WorkspaceWorld}
    out: dict[str, dict[int, float]] = {}
    for part, make in makers.items():
        worlds = {size: make(size) for size in sizes}
        gc.collect()
        gc.freeze()  # as the scheduler freezes its synced caches
        samples: dict[int, list[float]] = {size: [] for size in sizes}
        for r in range(rounds + 1):  # round 0 warms up
            order = list(sizes[r % len(sizes):]) + list(sizes[: r % len(sizes)])
            for size in order:
                world = worlds[size]
                if isinstance(world, EventWorld):
                    world.prepare(ops)
                spent = world.run(ops)
                if r:
                    samples[size].append(spent * 1e6 / ops)
        out[part] = {size: round(statistics.median(s), 2) for size, s in samples.items()}
        del worlds
        gc.unfreeze()
        gc.collect()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="backlog sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--ops", type=int, default=OPS_PER_ROUND, help=f"operations per size per round (default {OPS_PER_ROUND})")
    parser.add_argument("--json-out", default="", help="also write the JSON result to this file")
    args = parser.parse_args(argv)
    sizes = tuple(sorted(int(s) for s in args.sizes.split(",") if s))
    figures = measure(sizes, args.rounds, args.ops)
    ratios = {part: round(by[sizes[-1]] / by[sizes[0]], 3) for part, by in figures.items()}
    result = {"benchmark": "queue_l0", "sizes": sizes, "rounds": args.rounds, "ops": args.ops,
              "us": {part: {str(k): v for k, v in by.items()} for part, by in figures.items()},
              f"ratio_{sizes[-1]}_over_{sizes[0]}": ratios, "target": TARGET}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    missed = [part for part, ratio in ratios.items() if ratio > TARGET]
    for part, by in figures.items():
        cells = " / ".join(f"{v:.2f}" for v in by.values())
        print(f"{part:10s} us at {' / '.join(map(str, sizes))}: {cells}; {sizes[-1]} over {sizes[0]}: {ratios[part]}x"
              f" (target <= {TARGET}){'  MISSED' if part in missed else ''}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
