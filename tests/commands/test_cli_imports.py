"""A subcommand starts with its own modules only: the scheduler's start-up CPU and ``simulate``'s
freedom from the Kubernetes client depend on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after ``kruntimes ARGV...`` returned."""
    code = (
        "import contextlib, io, json, sys\n"
        "from kruntimes.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({list(argv)!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_simulate_runs_without_importing_the_kubernetes_client() -> None:
    loaded = modules_after("simulate", "examples/weighted-scoring.yaml")
    assert "kruntimes.commands.simulate" in loaded
    assert not {name for name in loaded if name == "kubernetes" or name.startswith("kubernetes.")}


def test_the_scheduler_command_imports_no_other_command() -> None:
    loaded = modules_after("scheduler", "--print-default-config")
    assert "kruntimes.commands.scheduler" in loaded
    others = {"kruntimes.commands.demo", "kruntimes.commands.explain", "kruntimes.commands.simulate",
              "kruntimes.commands.replay", "kruntimes.commands.runtimesim", "kruntimes.devcluster.command"}
    assert not loaded & others
