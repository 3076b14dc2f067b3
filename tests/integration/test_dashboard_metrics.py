"""Every metric the Grafana dashboard and the alert rules query is one a running scheduler exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from kruntimes.kubeclient.kube import Kube
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import assigned, http_get, ready_pods, wait_until

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "components" / "alerts"
PROMQL_WORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "inf", "nan"})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values and strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # grouping labels
    text = re.sub(r"\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b", "", text)  # numbers (1e3 is not a name)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = match.group(), text[match.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function call or a keyword
        names.add(word)
    return names


def test_the_name_extractor_finds_metrics_not_functions_labels_or_keywords() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(a_bucket{name="runs"}[5m]))) / (max(b) or vector(0)) > 1e3'
    assert metric_names(expr) == {"a_bucket", "b"}


def dashboard_exprs() -> list[str]:
    dashboard: dict[str, Any] = json.loads((ALERTS / "dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def alert_exprs() -> list[str]:
    rules: dict[str, Any] = yaml.safe_load((ALERTS / "rules.yaml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_every_dashboard_and_alert_query_names_a_metric_the_scheduler_exports(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: ready_pods(server_kube) == 1, what="pod")
    sched = server_scheduler()
    make_run(server_kube, "dash-1")
    wait_until(lambda: assigned(server_kube, "dash-1"), what="bind")
    assert sched.metrics_url is not None
    status, text = http_get(f"{sched.metrics_url}/metrics")
    assert status == 200
    exported = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    queried = {name for expr in dashboard_exprs() + alert_exprs() for name in metric_names(expr)}
    assert len(queried) >= 20, sorted(queried)
    assert not queried - exported, f"queried but not exported: {sorted(queried - exported)}"
    new = {"kruntimes_scheduler_leader", "workqueue_depth", "kruntimes_scheduler_event_writes_total", "kruntimes_scheduler_cycle_outcomes_total"}
    assert new <= queried, "the dashboard shows the operator metrics"
