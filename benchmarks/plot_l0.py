"""Plots of the L0 planning benchmark for docs/performance.md.

    .venv/bin/pip install -e '.[benchmarks]'      # matplotlib
    .venv/bin/python benchmarks/plot_l0.py --after l0_after.json [--before l0_before.json] \
        [--sweep l0_sweep.json] --out docs/img

Reads the JSON that ``planning_l0.py --json-out`` writes and draws, as PNG:
``l0_cycle_vs_pods.png`` (median cycle time per variant against candidate pods,
log–log, before dashed) and ``l0_cycle_vs_active_runs.png`` (median cycle time
against active Runs at a fixed pod count, from ``--sweep``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VARIANTS = ("plain", "anti", "cohort", "preferred", "full")


def _load(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return loaded


def _by_pods(result: dict[str, Any], variant: str) -> tuple[list[int], list[float]]:
    """(pods, median µs) for the worlds whose active Runs are the most for their pod count."""
    most: dict[int, int] = {}
    for row in result["cycles"]:
        most[row["pods"]] = max(most.get(row["pods"], 0), row["active_runs"])
    rows = sorted(
        (r for r in result["cycles"] if r["variant"] == variant and r["active_runs"] == most[r["pods"]]),
        key=lambda r: r["pods"],
    )
    return [r["pods"] for r in rows], [r["median_us"] for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--after", required=True)
    parser.add_argument("--before", default="")
    parser.add_argument("--sweep", default="")
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args(argv)

    import matplotlib  # type: ignore[import-not-found,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    after = _load(args.after)
    before = _load(args.before) if args.before else None

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, variant in enumerate(VARIANTS):
        color = f"C{i}"
        pods, medians = _by_pods(after, variant)
        ax.plot(pods, [m / 1000 for m in medians], "o-", color=color, label=f"{variant}")
        if before is not None:
            pods_b, medians_b = _by_pods(before, variant)
            ax.plot(pods_b, [m / 1000 for m in medians_b], "x--", color=color, alpha=0.5)
    for target_pods, limit_ms in ((100, 0.2), (1000, 1.0), (5000, 5.0)):
        ax.plot([target_pods], [limit_ms], "k_", markersize=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("candidate Runtime Pods (10 active Runs per pod, none at 2 pods; 100 reservations)")
    ax.set_ylabel("median ms per cycle (snapshot + plan)")
    ax.set_title("L0 cycle time vs pods (solid: after, dashed: before, bars: targets)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "l0_cycle_vs_pods.png", dpi=110)
    plt.close(fig)

    if args.sweep:
        sweep = _load(args.sweep)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        pods_seen = sorted({r["pods"] for r in sweep["cycles"]})
        for i, variant in enumerate(VARIANTS):
            for pods in pods_seen:
                rows = sorted(
                    (r for r in sweep["cycles"] if r["variant"] == variant and r["pods"] == pods),
                    key=lambda r: r["active_runs"],
                )
                ax.plot(
                    [r["active_runs"] for r in rows],
                    [r["median_us"] / 1000 for r in rows],
                    "o-",
                    color=f"C{i}",
                    label=f"{variant} ({pods} pods)",
                )
        ax.set_xlabel("active Runs on the candidate pods")
        ax.set_ylabel("median ms per cycle (snapshot + plan)")
        ax.set_title("L0 cycle time vs active Runs")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "l0_cycle_vs_active_runs.png", dpi=110)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
