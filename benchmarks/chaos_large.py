"""The large chaos run: 50,000+ Runs through churning pods, every fault type, 20+ leader kills and SIGKILL restarts.

    nohup .venv/bin/python benchmarks/chaos_large.py > /tmp/chaos_large.log 2>&1 &
    .venv/bin/python benchmarks/chaos_large.py --runs 2000 --epochs 2      # a small rehearsal

It chains *epochs* of ``tests/chaos/harness.py``: each epoch is a fresh dev cluster
(simulator executing Runs so capacity churns), two ``kruntimes scheduler``
replicas with 2 s leases, a Run creator, the chaos monkey (every fault type in
rotation) and a killer (leader SIGKILLs, SIGKILL restarts, SIGTERM restarts);
then the cluster settles and ``kruntimes.verify`` checks the epoch's whole write
history. Epochs keep the dev server's history and each scheduler's relists
bounded, which is what lets 50,000 Runs fit in ~40 minutes on two cores.

Resumable: every finished epoch is appended to ``--state`` (JSON lines); a rerun
with the same state file skips them. Time-bounded: no epoch starts when the
average epoch would not finish before ``--time-limit``. Prints one line per
epoch and, at the end, the totals as JSON (faults injected by type, Runs
processed, kills, violations per invariant). Exit 0 when every invariant held.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kruntimes.verify import INVARIANTS  # noqa: E402
from tests.chaos.harness import ChaosSpec, run_epoch  # noqa: E402


def _spread(total: int, parts: int, index: int) -> int:
    """``total`` split over ``parts`` as evenly as possible: the share of part ``index``."""
    return total // parts + (1 if index < total % parts else 0)


def _load(state: Path) -> list[dict[str, Any]]:
    if not state.exists():
        return []
    return [json.loads(line) for line in state.read_text().splitlines() if line.strip()]


def totals(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    kills: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    violations: Counter[str] = Counter({name: 0 for name in INVARIANTS})
    checked: Counter[str] = Counter()
    out: dict[str, Any] = {"epochs": len(epochs), "runs_created": 0, "binds": 0, "raced_binds": 0, "scheduler_writes": 0, "records": 0, "seconds": 0.0}
    unsettled = 0
    bad_exits = 0
    for epoch in epochs:
        faults.update(epoch["faults"])
        kills.update(epoch["kills"])
        phases.update(epoch["phases"])
        check = epoch["check"]
        violations.update(check["violations"])
        checked.update(check["checked"])
        out["runs_created"] += epoch["runs_created"]
        out["binds"] += check["binds"]
        out["raced_binds"] += check["raced_binds"]
        out["scheduler_writes"] += check["scheduler_writes"]
        out["records"] += check["records"]
        out["seconds"] += epoch["seconds"]
        unsettled += 0 if epoch["settled"] else 1
        bad_exits += sum(1 for code in epoch.get("graceful_exit_codes", []) if code != 0)
    out.update(
        faults_by_type=dict(sorted(faults.items())),
        faults_total=sum(faults.values()),
        kills=dict(kills),
        final_phases=dict(phases),
        checks_made=dict(checked),
        violations=dict(violations),
        unsettled_epochs=unsettled,
        sigterm_nonzero_exits=bad_exits,
    )
    out["seconds"] = round(out["seconds"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50_000, help="Runs in total (default 50000)")
    parser.add_argument("--epochs", type=int, default=10, help="epochs the Runs are split over (default 10)")
    parser.add_argument("--leader-kills", type=int, default=22, help="leader SIGKILLs in total (default 22)")
    parser.add_argument("--sigkill-restarts", type=int, default=22, help="SIGKILL + restart of a random replica, in total (default 22)")
    parser.add_argument("--sigterm-restarts", type=int, default=10, help="SIGTERM + restart, in total (default 10)")
    parser.add_argument("--create-rate", type=float, default=45.0, help="Runs created per second (default 45)")
    parser.add_argument("--fault-interval", type=float, default=0.2, help="seconds between monkey actions (default 0.2)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--time-limit", type=float, default=45 * 60, help="seconds; no epoch starts that would end later (default 2700)")
    parser.add_argument("--state", type=Path, default=Path("/tmp/chaos_large.state.jsonl"), help="finished epochs (JSON lines); resume from it")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/chaos_large"), help="scheduler logs per epoch")
    parser.add_argument("--fresh", action="store_true", help="ignore (delete) an existing state file")
    args = parser.parse_args(argv)

    if args.fresh and args.state.exists():
        args.state.unlink()
    done = _load(args.state)
    started = time.monotonic()
    print(f"chaos_large: {args.runs} Runs over {args.epochs} epochs; {len(done)} epoch(s) already done (state {args.state})", flush=True)
    for epoch in range(len(done), args.epochs):
        elapsed = time.monotonic() - started
        average = (sum(d["seconds"] for d in done) / len(done)) if done else 0.0
        if average and elapsed + average > args.time_limit:
            print(f"chaos_large: time limit: epoch {epoch} would end after {args.time_limit:.0f}s; stopping", flush=True)
            break
        spec = ChaosSpec(
            runs=_spread(args.runs, args.epochs, epoch),
            leader_kills=_spread(args.leader_kills, args.epochs, epoch),
            sigkill_restarts=_spread(args.sigkill_restarts, args.epochs, epoch),
            sigterm_restarts=_spread(args.sigterm_restarts, args.epochs, epoch),
            create_rate=args.create_rate,
            fault_interval=args.fault_interval,
            workers=args.workers,
            settle_timeout=180.0,
            seed=args.seed + epoch,
        )
        def progress(message: str, epoch: int = epoch) -> None:
            print(f"  epoch {epoch}: {message}", flush=True)

        result = run_epoch(spec, args.workdir / f"epoch-{epoch:02d}", log=progress)
        summary = {"epoch": epoch, **result.summary()}
        with args.state.open("a") as state:
            state.write(json.dumps(summary) + "\n")
        done.append(summary)
        check = summary["check"]
        print(
            f"epoch {epoch}: {summary['runs_created']} runs, {check['binds']} binds, {sum(summary['faults'].values())} faults, "
            f"kills {summary['kills']}, settled={summary['settled']}, violations {check['violations']}, {summary['seconds']}s",
            flush=True,
        )
        for line in check["first_violations"][:5]:
            print(f"    {line}", flush=True)
    result_totals = totals(done)
    print(json.dumps(result_totals, indent=2), flush=True)
    ok = (
        all(n == 0 for n in result_totals["violations"].values())
        and result_totals["unsettled_epochs"] == 0
        and result_totals["sigterm_nonzero_exits"] == 0
    )
    print(f"chaos_large: {'OK' if ok else 'VIOLATIONS'}: {result_totals['runs_created']} Runs, {result_totals['faults_total']} faults, "
          f"kills {result_totals['kills']}, violations {result_totals['violations']}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
