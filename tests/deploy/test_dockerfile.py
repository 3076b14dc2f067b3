"""The Dockerfile, read (no Docker engine here): non-root numeric user, the entry point, only
locked runtime dependencies; and the lock itself against pyproject.toml and the installed metadata."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .manifests import DEPLOY, REPO, load_all, only

DOCKERFILE = REPO / "Dockerfile"
LOCK = DEPLOY / "requirements.lock"
BUILD_LOCK = DEPLOY / "build-requirements.lock"
DEV_ONLY = {"pytest", "pytest-xdist", "hypothesis", "mypy", "jsonschema", "types-pyyaml", "returns[compatible-mypy]"}


@dataclass(frozen=True, slots=True)
class Instruction:
    stage: int
    keyword: str
    args: str


def instructions() -> list[Instruction]:
    """Dockerfile instructions with line continuations joined and comments dropped."""
    out: list[Instruction] = []
    stage, pending = -1, ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full, pending = pending + line, ""
        keyword, _, args = full.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword, args.strip()))
    assert not pending, "dangling line continuation"
    return out


def final_stage() -> list[Instruction]:
    every = instructions()
    last = max(i.stage for i in every)
    return [i for i in every if i.stage == last]


def pins(path: str) -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in (DEPLOY / path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{line}: pin exact versions"
            out[canonicalize_name(req.name)] = Version(spec.version)
    return out


def test_base_images_are_slim_python_311() -> None:
    args = [i.args for i in instructions() if i.keyword == "ARG" and i.args.startswith("PYTHON_IMAGE=")]
    assert len(args) == 1
    image = args[0].split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", image), image
    froms = [i.args for i in instructions() if i.keyword == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_final_stage_runs_as_a_numeric_non_root_user_matching_the_deployment() -> None:
    users = [i.args for i in final_stage() if i.keyword == "USER"]
    assert len(users) == 1
    match = re.fullmatch(r"(\d+)(?::(\d+))?", users[0])
    assert match is not None, f"USER must be numeric so runAsNonRoot can be verified: {users[0]}"
    uid = int(match.group(1))
    assert uid != 0 and (match.group(2) is None or int(match.group(2)) != 0)
    pod = only(load_all(DEPLOY / "scheduler" / "deployment.yaml"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid
    last = final_stage()
    assert [i.keyword for i in last].index("USER") > max(n for n, i in enumerate(last) if i.keyword in ("RUN", "COPY"))


def test_entrypoint_is_kruntimes_scheduler_in_exec_form() -> None:
    entry = [i.args for i in final_stage() if i.keyword == "ENTRYPOINT"]
    assert len(entry) == 1
    assert json.loads(entry[0]) == ["kruntimes", "scheduler"]
    assert not [i for i in final_stage() if i.keyword == "CMD"]
    env = " ".join(i.args for i in final_stage() if i.keyword == "ENV")
    assert "PATH=/opt/kruntimes/bin:" in env


def test_only_locked_runtime_dependencies_are_installed() -> None:
    runs = [i.args for i in instructions() if i.keyword == "RUN"]
    installs = [part for run in runs for part in run.split("&&") if " install " in part]
    assert installs, "the Dockerfile installs something"
    for cmd in installs:
        assert "--no-deps" in cmd, f"every install is pinned and resolves nothing: {cmd}"
        assert "[dev]" not in cmd and ".[" not in cmd, cmd
        for dev in DEV_ONLY:
            assert dev not in cmd.lower(), cmd
    joined = " ".join(runs)
    assert "-r deploy/requirements.lock" in joined and "-r deploy/build-requirements.lock" in joined
    assert "pip --python /opt/kruntimes/bin/python check" in joined, "the locked set must be complete"
    copied = [i.args for i in final_stage() if i.keyword == "COPY"]
    assert copied == ["--from=build /opt/kruntimes /opt/kruntimes"], "the runtime stage takes only the venv"


def test_dockerignore_is_an_allow_list() -> None:
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == {"Dockerfile", "pyproject.toml", "README.md", "LICENSE", "src", "deploy/requirements.lock", "deploy/build-requirements.lock"}
    for i in instructions():
        if i.keyword == "COPY" and not i.args.startswith("--from"):
            for source in i.args.split()[:-1]:
                assert source.rstrip("/") in allowed, f"COPY {source} is excluded by .dockerignore"


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_lock_pins_satisfy_pyproject() -> None:
    locked = pins("requirements.lock")
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is a runtime dependency but not locked"
        assert locked[name] in req.specifier, f"{req.name}=={locked[name]} does not satisfy {req.specifier}"
    for dev in ("pytest", "pytest-xdist", "hypothesis", "mypy", "jsonschema", "types-pyyaml", "setuptools", "wheel", "pip"):
        assert dev not in locked, f"{dev} must not be in the runtime lock"
    build = pins("build-requirements.lock")
    assert set(build) == {"setuptools", "wheel"} and build["setuptools"] >= Version("68")


def test_lock_is_the_closure_of_the_runtime_dependencies() -> None:
    """Every locked package is needed (reachable from pyproject's dependencies) and every
    dependency of a locked package is locked, by the installed packages' metadata."""
    locked = pins("requirements.lock")
    reachable: set[str] = set()
    stack = [r.name for r in runtime_requirements()]
    while stack:
        name = canonicalize_name(stack.pop())
        if name in reachable:
            continue
        reachable.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            raise AssertionError(f"{name} is needed but not installed in this environment") from None
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)
    assert reachable == set(locked), f"regenerate deploy/requirements.lock: missing {reachable - set(locked)}, extra {set(locked) - reachable}"
