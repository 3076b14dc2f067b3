"""``make`` keeps its private virtualenv right: one made from another interpreter, or left
half-made by an install that failed, is made again with one line saying why.

Each test runs the project's Makefile in a directory of its own with ``INSTALL`` stubbed (no
network): the venv itself is real, made by ``PYTHON -m venv``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STAMP = ".venv/.installed-stamp"


def _identity(python: str) -> str | None:
    done = subprocess.run(
        [python, "-c", "import os, sys; print(sys.version.split()[0], os.path.realpath(sys._base_executable))"],
        capture_output=True, text=True, check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


THIS = os.path.realpath(str(getattr(sys, "_base_executable")))
"""The interpreter under the tests' own venv (what the Makefile identifies a venv by)."""


def _another() -> str:
    """An interpreter other than the one running the tests (skip when the machine has none)."""
    mine = _identity(THIS)
    for name in ("python3.13", "python3.12", "python3.11", "/usr/bin/python3", "/usr/bin/python3.11"):
        found = shutil.which(name)
        if found is not None and _identity(found) not in (None, mine):
            return found
    pytest.skip("no second Python interpreter on this machine")


def make(directory: Path, python: str, install: str = "true") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(REPO / "Makefile"), STAMP, f"PYTHON={python}", f"INSTALL={install}"],
        cwd=directory, capture_output=True, text=True, timeout=300, check=False,
    )


def explanations(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if "making it again" in line]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def venv_python(project: Path) -> str | None:
    return _identity(str(project / ".venv" / "bin" / "python"))


def test_a_venv_made_from_another_interpreter_is_made_again_saying_so(project: Path) -> None:
    other = _another()
    assert make(project, other).returncode == 0
    done = make(project, THIS)
    assert done.returncode == 0, done.stderr
    (line,) = explanations(done)
    version, path = str(_identity(other)).split(" ", 1)
    assert line == f".venv was made by Python {version} ({path}), not by {THIS} (Python {sys.version.split()[0]}): making it again"
    assert venv_python(project) == _identity(THIS)


def test_a_venv_left_by_a_failed_install_is_made_again_on_the_next_run_saying_so(project: Path) -> None:
    assert make(project, THIS, install="false").returncode != 0
    assert (project / ".venv").is_dir() and not (project / STAMP).exists()
    done = make(project, THIS)
    assert done.returncode == 0, done.stderr
    assert explanations(done) == [".venv was left half-made by an install that failed: making it again"]
    assert (project / STAMP).exists()


def test_a_failed_install_with_one_interpreter_does_not_stop_a_retry_with_another(project: Path) -> None:
    other = _another()
    assert make(project, other, install="false").returncode != 0
    done = make(project, THIS)
    assert done.returncode == 0, done.stderr
    assert len(explanations(done)) == 1
    assert venv_python(project) == _identity(THIS)


def test_a_good_venv_is_left_alone(project: Path) -> None:
    assert make(project, THIS).returncode == 0
    done = make(project, THIS)
    assert done.returncode == 0
    assert "is up to date" in done.stdout and explanations(done) == []


def test_an_interpreter_that_does_not_run_is_named_in_one_line(project: Path) -> None:
    done = make(project, "/nonexistent/python3")
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == "/nonexistent/python3 does not run: set PYTHON to a Python 3.11, 3.12 or 3.13"
