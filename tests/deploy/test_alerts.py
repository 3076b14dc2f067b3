"""The alerting rules: promtool's unit tests pass, each alert has a firing and a quiet case, and the
PrometheusRule the alerts component renders carries exactly the rules of the plain rule file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .manifests import DEPLOY, only, overlay, render

ALERTS = DEPLOY / "components" / "alerts"
RULES = ALERTS / "rules.yaml"
RULES_TEST = ALERTS / "rules_test.yaml"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in _load(RULES)["groups"] for rule in group["rules"] if "alert" in rule]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not installed; CI must install it (.ci/run: apt-get install prometheus)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); CI runs this test")
    return found


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    tool = promtool()
    checked = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", RULES_TEST.name], cwd=ALERTS, capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_both_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in _load(RULES_TEST)["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert firing == names and quiet == names


def test_every_alert_says_what_happened_what_it_means_and_where_the_runbook_is() -> None:
    for rule in alert_rules():
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(annotations), rule["alert"]
        assert annotations["runbook"].startswith("docs/operations.md#"), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
    anchors = {rule["annotations"]["runbook"].split(":", 1)[0].split("#", 1)[1] for rule in alert_rules()}
    operations = (DEPLOY.parent / "docs" / "operations.md").read_text()
    for anchor in anchors:
        assert f'<a id="{anchor}"></a>' in operations, f"docs/operations.md has no runbook anchor {anchor}"


def test_the_alerts_component_renders_the_rule_file_as_a_prometheus_rule(tmp_path: Path) -> None:
    objects = render(overlay(tmp_path, resources=[DEPLOY], components=[ALERTS]))
    rule = only(objects, "PrometheusRule", "kruntimes-scheduler")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "kruntimes-system"
    assert rule["spec"]["groups"] == _load(RULES)["groups"]
    assert not [o for o in render(DEPLOY) if o["kind"] == "PrometheusRule"], "the base needs no Prometheus Operator"
