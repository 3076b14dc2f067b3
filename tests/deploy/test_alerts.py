"""The alerting rules: promtool's unit tests pass, each alert has a firing and a quiet case, and the
PrometheusRule the alerts component renders carries exactly the rules of the plain rule file."""

from __future__ import annotations

import json
import os
import re
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


RUNBOOKS = "https://github.com/kruntimes/kruntimes/blob/main/docs/operations.md#"
"""Where every alert's ``runbook_url`` points: its entry in docs/operations.md, "Metrics and alerts"."""


def test_every_alert_says_what_happened_what_it_means_and_links_its_runbook() -> None:
    for rule in alert_rules():
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(annotations), rule["alert"]
        assert annotations["runbook_url"].startswith(RUNBOOKS), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
    anchors = {rule["annotations"]["runbook_url"].removeprefix(RUNBOOKS) for rule in alert_rules()}
    operations = (DEPLOY.parent / "docs" / "operations.md").read_text()
    for anchor in anchors:
        assert f'<a id="{anchor}"></a>' in operations, f"docs/operations.md has no runbook anchor {anchor}"


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without)\s*\([^)]*\)|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_:][A-Za-z0-9_:]*|.', re.S)
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "inf", "nan"})


def selectors(expr: str) -> list[tuple[str, str]]:
    """Each series selector of a PromQL expression: (metric name, its ``{...}`` matchers or "")."""
    tokens = [match.group() for match in _TOKENS.finditer(expr)]
    found: list[tuple[str, str]] = []
    for i, token in enumerate(tokens):
        if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token) or token.lower() in _KEYWORDS:
            continue
        rest = "".join(tokens[i + 1 :]).lstrip()
        if rest.startswith("(") or re.match(r"(?:by|without)\s*\(", rest):
            continue  # a function or an aggregation
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        found.append((token, after if after.startswith("{") else ""))
    return found


def test_the_selector_reader_finds_every_series_and_its_matchers() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(a_bucket{name="runs"}[5m]))) / max(b) > 1e3 or c'
    assert selectors(expr) == [("a_bucket", '{name="runs"}'), ("b", ""), ("c", "")]


def test_every_dashboard_query_reads_only_the_chosen_jobs_series() -> None:
    """process_* and python_* are every scraped Python process's: a query without the job
    matcher would sum the scheduler's memory with Prometheus' other targets'."""
    dashboard = json.loads((ALERTS / "dashboard.json").read_text())
    (job,) = [v for v in dashboard["templating"]["list"] if v["name"] == "job"]
    assert "kruntimes_build_info" in job["query"]
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs and all(selectors(expr) for expr in exprs)
    unscoped = [(expr, name) for expr in exprs for name, matchers in selectors(expr) if 'job=~"$job"' not in matchers]
    assert unscoped == []


def test_the_alerts_component_renders_the_rule_file_as_a_prometheus_rule(tmp_path: Path) -> None:
    objects = render(overlay(tmp_path, resources=[DEPLOY], components=[ALERTS]))
    rule = only(objects, "PrometheusRule", "kruntimes-scheduler")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "kruntimes-system"
    assert rule["spec"]["groups"] == _load(RULES)["groups"]
    assert not [o for o in render(DEPLOY) if o["kind"] == "PrometheusRule"], "the base needs no Prometheus Operator"
