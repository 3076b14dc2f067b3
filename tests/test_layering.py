"""The layer rule: ``kruntimes.pure`` decides placements without touching the world.

These tests read the source of every module under ``src/kruntimes/pure`` and
fail when one imports the effect layer, the Kubernetes client, or any module
that performs I/O, reads a clock, draws random numbers or starts threads, or
when one calls a clock directly (``datetime.now()``), however it was imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PURE = Path(__file__).resolve().parents[1] / "src" / "kruntimes" / "pure"

# Modules whose mere import gives a pure function a way to observe or change the world.
FORBIDDEN_MODULES = frozenset(
    {
        "kubernetes",
        "prometheus_client",
        "urllib3",
        "requests",
        "http",
        "socket",
        "ssl",
        "asyncio",
        "threading",
        "multiprocessing",
        "concurrent",
        "subprocess",
        "os",
        "sys",
        "io",
        "pathlib",
        "shutil",
        "tempfile",
        "time",
        "random",
        "secrets",
        "uuid",
        "logging",
        "signal",
        "yaml",
    }
)
# Clock reads reachable through otherwise harmless modules.
FORBIDDEN_CALLS = frozenset({"now", "utcnow", "today", "monotonic", "perf_counter", "time_ns"})


# Leaf modules outside ``pure`` that both ``pure`` and the Kubernetes client import (so the client
# imports nothing of the scheduler); held to the same rules, so importing one keeps a module pure.
SHARED_LEAVES = frozenset({"kruntimes.jsontext"})


def pure_modules() -> Iterator[Path]:
    yield from sorted(PURE.rglob("*.py"))
    for leaf in sorted(SHARED_LEAVES):
        yield PURE.parent.joinpath(*leaf.split(".")[1:]).with_suffix(".py")


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield node.lineno, "." * node.level + (node.module or "")
            else:
                yield node.lineno, node.module or ""


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[str] = []
    for line, module in imported_modules(tree):
        top = module.lstrip(".").split(".")[0]
        if module.startswith("kruntimes.") and not module.startswith("kruntimes.pure") and module not in SHARED_LEAVES:
            found.append(f"{path.name}:{line} imports {module}, outside the pure layer")
        elif module.startswith(".") and "effects" in module.split("."):
            found.append(f"{path.name}:{line} imports the effect layer ({module})")
        elif not module.startswith(".") and top in FORBIDDEN_MODULES:
            found.append(f"{path.name}:{line} imports {module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in FORBIDDEN_CALLS:
                found.append(f"{path.name}:{node.lineno} calls .{node.func.attr}()")
    return found


@pytest.mark.parametrize("path", list(pure_modules()), ids=lambda p: str(p.relative_to(PURE.parent)))
def test_pure_module_performs_no_io_reads_no_clock_and_draws_no_randomness(path: Path) -> None:
    assert violations(path) == []


def test_the_runtime_simulators_decisions_perform_no_io_read_no_clock_and_draw_no_randomness() -> None:
    assert violations(PURE.parent / "runtimesim" / "decide.py") == []


def test_the_checker_catches_each_kind_of_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import time\n"
        "from kubernetes import client\n"
        "from kruntimes.effects import informer\n"
        "from ..effects.binder import bind\n"
        "from datetime import datetime\n"
        "stamp = datetime.now()\n",
        encoding="utf-8",
    )
    found = violations(bad)
    assert any("imports time" in v for v in found)
    assert any("imports kubernetes" in v for v in found)
    assert any("kruntimes.effects.informer" in v or "kruntimes.effects" in v for v in found)
    assert any("effect layer" in v for v in found)
    assert any(".now()" in v for v in found)


def test_pure_package_is_not_empty() -> None:
    names = {p.relative_to(PURE).as_posix() for p in pure_modules() if p.is_relative_to(PURE)}
    assert {"model/objects.py", "readers/kube.py", "model/quantity.py", "step.py"} <= names
