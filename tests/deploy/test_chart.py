"""The Helm chart renders what kustomize renders from deploy/ for the same settings, object by object;
``helm lint`` passes; the chart's CRDs and alerts are deploy/'s own files."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kruntimes import __version__
from kruntimes.commands import scheduler as scheduler_command

from . import helm
from .manifests import CRDS, DEPLOY, Obj, by_kind, documents, load_all, only, overlay, render, walk

COMPONENTS = DEPLOY / "components"
Key = tuple[str, str, str]


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"])


def show(k: Key) -> str:
    kind, namespace, name = k
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def flat(value: object) -> dict[str, object]:
    """Every leaf of a JSON-like value by its path (empty mappings and lists are leaves too)."""
    return {p: v for p, v in walk(value) if not (isinstance(v, (dict, list)) and v)}


def differences(kustomize: Sequence[Obj], chart: Sequence[Obj]) -> list[str]:
    """Each difference between two renders, named: an object only one has, or a field that differs."""
    left = {key(o): o for o in kustomize}
    right = {key(o): o for o in chart}
    assert len(left) == len(kustomize) and len(right) == len(chart), "two objects share kind, namespace and name"
    out = [f"only kustomize renders {show(k)}" for k in sorted(left.keys() - right.keys())]
    out += [f"only the chart renders {show(k)}" for k in sorted(right.keys() - left.keys())]
    for k in sorted(left.keys() & right.keys()):
        a, b = flat(left[k]), flat(right[k])
        for path in sorted(a.keys() | b.keys()):
            if a.get(path, "<absent>") != b.get(path, "<absent>"):
                out.append(f"{show(k)} {path}: kustomize {a.get(path, '<absent>')!r}, chart {b.get(path, '<absent>')!r}")
    return out


NAMESPACE_ONLY_IN_KUSTOMIZE = [f"only kustomize renders Namespace {helm.NAMESPACE}"]
"""Helm makes the release's namespace (``--create-namespace``); a chart cannot own the namespace its
own release record lives in. docs/deploy.md says how to label it for the restricted Pod Security
Standard, as deploy/scheduler/namespace.yaml does."""


@dataclass(frozen=True)
class Case:
    name: str
    kustomize: Callable[[Path], Path]
    values: Mapping[str, Any]
    include_crds: bool = False
    expected: Sequence[str] = field(default_factory=list)


def scheduler_with(*components: str) -> Callable[[Path], Path]:
    return lambda tmp: overlay(tmp, resources=[DEPLOY / "scheduler"], components=[COMPONENTS / c for c in components])


def fixed(directory: Path) -> Callable[[Path], Path]:
    return lambda tmp: directory


SECURE = {"scheduler": {"metricsBindAddress": ":8443"}, "metrics": {"secure": True}}
MONITOR = {"metrics": {"serviceMonitor": {"enabled": True}}}
ALERTS = {"metrics": {"prometheusRule": {"enabled": True}}}
POLICY = {"networkPolicy": {"enabled": True}}
ADMISSION = {"admissionPolicy": {"enabled": True}}
SHARDED = {"scheduler": {"replicas": 4, "shardByNamespace": True}}


def merged(*parts: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = merged(out.get(k, {}), v) if isinstance(v, Mapping) else v
    return out


CASES = [
    Case("base with CRDs", fixed(DEPLOY), {}, include_crds=True, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case("scheduler only", fixed(DEPLOY / "scheduler"), {}, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case("sharded", fixed(DEPLOY / "overlays" / "sharded"), SHARDED, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case(
        "namespaced",
        fixed(DEPLOY / "overlays" / "namespaced-example"),
        {"scheduler": {"namespaces": ["team-a", "team-b"]}},
        expected=NAMESPACE_ONLY_IN_KUSTOMIZE,
    ),
    Case("metrics-secure", scheduler_with("metrics-secure"), SECURE, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case("network-policy", scheduler_with("network-policy"), POLICY, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case("alerts", scheduler_with("alerts"), ALERTS, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case("servicemonitor", scheduler_with("servicemonitor"), MONITOR, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case("admission-policy", scheduler_with("admission-policy"), ADMISSION, expected=NAMESPACE_ONLY_IN_KUSTOMIZE),
    Case(
        "servicemonitor, alerts and metrics-secure",
        scheduler_with("servicemonitor", "alerts", "metrics-secure"),
        merged(MONITOR, ALERTS, SECURE),
        expected=NAMESPACE_ONLY_IN_KUSTOMIZE,
    ),
    Case(
        "sharded with every component",
        lambda tmp: overlay(
            tmp,
            resources=[DEPLOY / "overlays" / "sharded"],
            components=[
                COMPONENTS / c for c in ("servicemonitor", "alerts", "network-policy", "metrics-secure", "admission-policy")
            ],
        ),
        merged(SHARDED, MONITOR, ALERTS, POLICY, SECURE, ADMISSION),
        expected=NAMESPACE_ONLY_IN_KUSTOMIZE,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_chart_renders_the_same_objects_as_kustomize_for_the_same_settings(case: Case, tmp_path: Path) -> None:
    (tmp_path / "overlay").mkdir()
    (tmp_path / "helm").mkdir()
    kustomize = render(case.kustomize(tmp_path / "overlay"))
    chart = helm.template(tmp_path / "helm", case.values, include_crds=case.include_crds)
    assert differences(kustomize, chart) == list(case.expected)


def test_the_comparison_names_a_field_that_differs() -> None:
    a = [{"kind": "Service", "metadata": {"name": "s", "namespace": "n"}, "spec": {"ports": [{"port": 8080}]}}]
    b = [{"kind": "Service", "metadata": {"name": "s", "namespace": "n"}, "spec": {"ports": [{"port": 8443}]}}]
    assert differences(a, b) == ["Service n/s spec.ports[0].port: kustomize 8080, chart 8443"]
    assert differences(a, []) == ["only kustomize renders Service n/s"]


def test_helm_lint_passes_strictly_on_the_defaults_and_on_every_mode(tmp_path: Path) -> None:
    for case in CASES:
        out = helm.ok(["lint", "--strict", str(helm.CHART), "--values", str(helm.values_file(tmp_path, case.values))], tmp_path)
        assert "1 chart(s) linted, 0 chart(s) failed" in out, f"{case.name}: {out}"


def test_the_charts_crds_are_deploys_crds(tmp_path: Path) -> None:
    """crds/ is a link to deploy/crds: the chart installs exactly what `kubectl apply -f deploy/crds/` does."""
    assert (helm.CHART / "crds").resolve() == CRDS.resolve()
    rendered = by_kind(helm.template(tmp_path, {}, include_crds=True), "CustomResourceDefinition")
    expected = [doc for path in sorted(CRDS.glob("*.yaml")) for doc in load_all(path)]
    assert sorted(rendered, key=lambda o: str(o["metadata"]["name"])) == sorted(expected, key=lambda o: str(o["metadata"]["name"]))


def test_a_packaged_chart_carries_the_crds_and_the_alerts_themselves(tmp_path: Path) -> None:
    """The links are followed when the chart is packaged, so a .tgz installs without this repository."""
    helm.ok(["package", str(helm.CHART), "--destination", str(tmp_path)], tmp_path)
    (package,) = tmp_path.glob("kruntimes-scheduler-*.tgz")
    (tmp_path / "home").mkdir()
    objects = helm.template(tmp_path / "home", ALERTS, include_crds=True, chart=package)
    assert len(by_kind(objects, "CustomResourceDefinition")) == 3
    assert only(objects, "PrometheusRule")["spec"]["groups"]


def container(objects: Sequence[Obj]) -> dict[str, Any]:
    (c,) = only(objects, "Deployment", "kruntimes-scheduler")["spec"]["template"]["spec"]["containers"]
    assert isinstance(c, dict)
    return c


@pytest.mark.parametrize(
    ("values", "image"),
    [
        ({}, "kruntimes-scheduler:{version}"),
        ({"imageRegistry": "registry.example.com/team"}, "registry.example.com/team/kruntimes-scheduler:{version}"),
        ({"imageRegistry": "registry.example.com/", "imageTag": "0.0.9"}, "registry.example.com/kruntimes-scheduler:0.0.9"),
        ({"image": "ghcr.io/us/scheduler:1.2.3", "imageTag": "ignored"}, "ghcr.io/us/scheduler:1.2.3"),
        ({"image": "localhost:5000/scheduler"}, "localhost:5000/scheduler:{version}"),
        ({"image": "scheduler@sha256:" + "a" * 64}, "scheduler@sha256:" + "a" * 64),
    ],
)
def test_the_image_is_registry_name_and_tag_with_the_charts_version_by_default(
    values: dict[str, str], image: str, tmp_path: Path
) -> None:
    assert container(helm.template(tmp_path, {"scheduler": values}))["image"] == image.format(version=__version__)


def test_a_config_file_is_mounted_and_passed_and_the_scheduler_accepts_it(tmp_path: Path) -> None:
    config = {"workers": 8, "queueOrder": "namespace-fair", "leaderElection": {"leaseDuration": "20s"}}
    objects = helm.template(tmp_path, {"scheduler": {"config": config}})
    c = container(objects)
    assert "--config=/etc/kruntimes/scheduler.yaml" in c["args"]
    assert {"name": "config", "mountPath": "/etc/kruntimes", "readOnly": True} in c["volumeMounts"]
    pod = only(objects, "Deployment")["spec"]["template"]
    assert {"name": "config", "configMap": {"name": "kruntimes-scheduler-config"}} in pod["spec"]["volumes"]
    assert pod["metadata"]["annotations"]["checksum/config"]
    text = only(objects, "ConfigMap", "kruntimes-scheduler-config")["data"]["scheduler.yaml"]
    assert yaml.safe_load(text) == {"apiVersion": "kruntimes.io/v1alpha1", "kind": "SchedulerConfiguration", **config}
    (tmp_path / "scheduler.yaml").write_text(text)
    loaded = scheduler_command.load_configuration_file(str(tmp_path / "scheduler.yaml"))
    assert (loaded.workers, loaded.queue_order) == (8, "namespace-fair")


def test_a_changed_config_file_changes_the_pod_template_so_the_pods_roll(tmp_path: Path) -> None:
    def annotation(workers: int) -> str:
        objects = helm.template(tmp_path, {"scheduler": {"config": {"workers": workers}}})
        return str(only(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert annotation(4) != annotation(8)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"scheduler": {"shardByNamespace": True, "leaderElect": False}}, "scheduler.shardByNamespace needs scheduler.leaderElect"),
        ({"scheduler": {"probeBindAddress": "0"}}, "scheduler.probeBindAddress must name a port"),
        ({"scheduler": {"metricsBindAddress": "0"}, **MONITOR}, "metrics.serviceMonitor.enabled needs scheduler.metricsBindAddress"),
    ],
)
def test_settings_the_scheduler_would_refuse_fail_the_render_with_a_reason(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    done = helm.run(["template", helm.RELEASE, str(helm.CHART), "--values", str(helm.values_file(tmp_path, values))], tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_the_admission_policy_needs_kubernetes_1_30_and_says_so(tmp_path: Path) -> None:
    args = ["template", helm.RELEASE, str(helm.CHART), "--values", str(helm.values_file(tmp_path, ADMISSION))]
    older = helm.run([*args, "--kube-version", "1.29.4"], tmp_path)
    assert older.returncode != 0, older.stdout
    assert "admissionPolicy.enabled needs Kubernetes 1.30 or later" in older.stderr and "v1.29.4" in older.stderr
    kinds = {o["kind"] for o in documents(helm.ok([*args, "--kube-version", "1.30.0"], tmp_path))}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds


def test_the_client_rate_reaches_the_scheduler_as_flags_it_accepts(tmp_path: Path) -> None:
    assert not [a for a in container(helm.template(tmp_path, {}))["args"] if a.startswith("--kube-api-")]
    args = container(helm.template(tmp_path, {"scheduler": {"kubeAPIQPS": 250.5, "kubeAPIBurst": 400}}))["args"]
    assert {"--kube-api-qps=250.5", "--kube-api-burst=400"} <= set(args)
    parser = argparse.ArgumentParser()
    scheduler_command.configure(parser)
    parsed = parser.parse_args([a for a in args if a.startswith("--kube-api-")])
    assert (parsed.kube_api_qps, parsed.kube_api_burst) == (250.5, 400)


def test_the_runbook_links_follow_the_base_url_an_operator_sets(tmp_path: Path) -> None:
    values = merged(ALERTS, {"metrics": {"prometheusRule": {"runbookBaseURL": "https://docs.example.com/kruntimes/operations/"}}})
    rules = [r for g in only(helm.template(tmp_path, values), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    links = {r["alert"]: r["annotations"]["runbook_url"] for r in rules if "alert" in r}
    assert links and links["KruntimesSchedulerNoLeader"] == "https://docs.example.com/kruntimes/operations/#no-leader"
    assert all(url.startswith("https://docs.example.com/kruntimes/operations/#") for url in links.values()), links


def test_metrics_off_renders_no_metrics_port_and_no_service(tmp_path: Path) -> None:
    objects = helm.template(tmp_path, {"scheduler": {"metricsBindAddress": "0"}})
    assert [p["name"] for p in container(objects)["ports"]] == ["health"]
    assert "--metrics-bind-address=0" in container(objects)["args"]
    assert not by_kind(objects, "Service")


def test_upstream_scheduling_settings_reach_the_pod(tmp_path: Path) -> None:
    values: dict[str, Any] = {
        "imagePullSecrets": [{"name": "regcred"}],
        "scheduler": {
            "nodeSelector": {"pool": "system"},
            "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}],
            "priorityClassName": "system-cluster-critical",
            "podAnnotations": {"team": "platform"},
            "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
            "extraArgs": ["--workers=8"],
        },
        "metrics": {"service": {"port": 9090, "annotations": {"scrape": "yes"}}},
    }
    objects = helm.template(tmp_path, values)
    pod = only(objects, "Deployment")["spec"]["template"]
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    for name in ("nodeSelector", "tolerations", "topologySpreadConstraints", "priorityClassName"):
        assert spec[name] == values["scheduler"][name], name
    assert pod["metadata"]["annotations"] == {"team": "platform"}
    # Helm merges maps with the defaults: new requests keep the default limits.
    assert container(objects)["resources"] == {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
    assert container(objects)["args"][-1] == "--workers=8"
    service = only(objects, "Service")
    assert service["spec"]["ports"][0]["port"] == 9090 and service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["metadata"]["annotations"] == {"scrape": "yes"}


def test_the_release_namespace_is_used_throughout(tmp_path: Path) -> None:
    done = helm.ok(["template", helm.RELEASE, str(helm.CHART), "--namespace", "platform"], tmp_path)
    objects = documents(done)
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "platform", obj["metadata"]["name"]
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "platform"
