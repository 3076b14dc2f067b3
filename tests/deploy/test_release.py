"""One version everywhere (docs/release.md): ``kruntimes --version``, the build-info metric, the
wheel, the chart's version and appVersion, the kustomize image tag, `make image` and the docs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from kruntimes import __version__
from kruntimes.effects.metrics import SchedulerMetrics

from . import helm
from .manifests import DEPLOY, REPO, only, render

KRUNTIMES = Path(sys.executable).with_name("kruntimes")
IMAGE_MENTION = re.compile(r"kruntimes-scheduler[:-](\d+\.\d+\.\d+)")


def test_the_version_is_a_semantic_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_kruntimes_version_prints_the_one_version() -> None:
    done = subprocess.run([str(KRUNTIMES), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == f"kruntimes {__version__}"


def test_the_build_info_metric_carries_the_one_version() -> None:
    assert SchedulerMetrics().value("kruntimes_build_info", {"version": __version__}) == 1


def test_the_wheel_takes_its_version_from_the_package() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kruntimes.__version__"}
    assert pyproject["project"]["license"] == "Apache-2.0"


def test_the_chart_is_versioned_with_the_app() -> None:
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__), (
        f"set version and appVersion in {helm.CHART / 'Chart.yaml'} to {__version__}"
    )


def test_kustomize_tags_the_image_with_the_one_version() -> None:
    (container,) = only(render(DEPLOY / "scheduler"), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"kruntimes-scheduler:{__version__}", (
        f"set newTag of the images: entry in {DEPLOY / 'scheduler' / 'kustomization.yaml'} to {__version__}"
    )


def test_make_image_tags_the_image_with_the_one_version_under_the_given_registry() -> None:
    done = subprocess.run(["make", "-s", "-n", "image", "REGISTRY=registry.example.com/team"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == f"docker build -t registry.example.com/team/kruntimes-scheduler:{__version__} ."


def test_every_image_tag_the_docs_show_is_the_one_version() -> None:
    stale = [
        f"{path.relative_to(REPO)}: kruntimes-scheduler:{found}"
        for path in [REPO / "README.md", REPO / "Dockerfile", *sorted((REPO / "docs").glob("*.md"))]
        for found in IMAGE_MENTION.findall(path.read_text())
        if found != __version__
    ]
    assert stale == []


def test_the_changelog_has_the_one_version_as_its_newest_release() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)
    assert headings[:2] == ["Unreleased", __version__], f"CHANGELOG.md needs '## [Unreleased]', then '## [{__version__}]'"
    assert "Keep a Changelog" in text


def test_the_license_is_the_apache_license_2() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
