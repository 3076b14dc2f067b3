"""``components/network-policy``: only the scrape reaches the scheduler's pods from other pods.

The rendered NetworkPolicy is validated against the Kubernetes API's own model of the kind (the
client's generated ``V1NetworkPolicy``, unknown fields refused), then read with NetworkPolicy's
rules to say who may connect to which of the scheduler's ports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.models import V1NetworkPolicy

from .manifests import DEPLOY, Obj, by_kind, only, overlay, render

NAMESPACE = "kruntimes-system"
COMPONENT = DEPLOY / "components" / "network-policy"


@dataclass(frozen=True)
class Peer:
    """A pod that opens a connection: its namespace's labels and its own."""

    namespace: str
    namespace_labels: dict[str, str]
    pod_labels: dict[str, str]


PROMETHEUS = Peer("monitoring", {"kubernetes.io/metadata.name": "monitoring", "metrics": "enabled"}, {"app": "prometheus"})
TENANT = Peer("team-a", {"kubernetes.io/metadata.name": "team-a"}, {"app": "anything"})
NEIGHBOUR = Peer(NAMESPACE, {"kubernetes.io/metadata.name": NAMESPACE}, {"app": "sidecar"})


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "the reader below knows matchLabels only"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(rule_peer: dict[str, Any], policy_namespace: str, peer: Peer) -> bool:
    assert "ipBlock" not in rule_peer, "no rule admits addresses"
    namespaces, pods = rule_peer.get("namespaceSelector"), rule_peer.get("podSelector")
    in_namespace = _matches(namespaces, peer.namespace_labels) if namespaces is not None else peer.namespace == policy_namespace
    return in_namespace and (pods is None or _matches(pods, peer.pod_labels))


def admitted(policies: list[Obj], pod: Obj, port_name: str, peer: Peer) -> bool:
    """Whether ``peer`` may connect to ``pod``'s container port ``port_name``, by NetworkPolicy's
    rules: a pod no Ingress policy selects admits everything; otherwise a connection needs a rule
    whose peers and ports both match (a missing list matches all)."""
    labels, namespace = pod["metadata"]["labels"], pod["metadata"]["namespace"]
    (container,) = pod["spec"]["containers"]
    number = {p["name"]: p["containerPort"] for p in container["ports"]}[port_name]
    selecting = [
        p for p in policies
        if p["metadata"]["namespace"] == namespace and _matches(p["spec"]["podSelector"], labels)
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            ports = rule.get("ports")
            if peers is not None and not any(_peer_matches(p, namespace, peer) for p in peers):
                continue
            if ports is None or any(p.get("protocol", "TCP") == "TCP" and p.get("port") in (None, port_name, number) for p in ports):
                return True
    return False


def scheduler_pod(objects: list[Obj]) -> Obj:
    template = only(objects, "Deployment", "kruntimes-scheduler")["spec"]["template"]
    return {"metadata": {**template["metadata"], "namespace": NAMESPACE}, "spec": template["spec"]}


def with_policy(tmp_path: Path, *components: Path, base: Path = DEPLOY) -> list[Obj]:
    return render(overlay(tmp_path, resources=[base], components=[*components, COMPONENT]))


@pytest.mark.parametrize("base", ["deploy", "namespaced-example", "sharded"])
def test_the_component_renders_a_valid_network_policy_for_the_scheduler_pods(tmp_path: Path, base: str) -> None:
    where = DEPLOY if base == "deploy" else DEPLOY / "overlays" / base
    objects = with_policy(tmp_path, base=where)
    policy = only(objects, "NetworkPolicy", "kruntimes-scheduler")
    V1NetworkPolicy.model_validate(policy)  # the API's own schema; an unknown field is an error
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kruntimes"
    pod = scheduler_pod(objects)
    assert _matches(policy["spec"]["podSelector"], pod["metadata"]["labels"]), "it selects the scheduler's pods"
    assert set(policy["spec"]["policyTypes"]) <= {"Ingress", "Egress"}
    (container,) = pod["spec"]["containers"]
    named = {p["name"] for p in container["ports"]}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert isinstance(port["port"], int) or port["port"] in named, f"port {port['port']} names no container port"


def test_only_a_scraper_namespace_reaches_the_metrics_port_and_no_pod_the_probe_port(tmp_path: Path) -> None:
    objects = with_policy(tmp_path)
    policies, pod = by_kind(objects, "NetworkPolicy"), scheduler_pod(objects)
    assert admitted(policies, pod, "metrics", PROMETHEUS)
    for peer in (TENANT, NEIGHBOUR):
        assert not admitted(policies, pod, "metrics", peer), peer.namespace
    for peer in (PROMETHEUS, TENANT, NEIGHBOUR):
        assert not admitted(policies, pod, "health", peer), f"{peer.namespace}: probes come from the node, not from pods"


def test_the_policy_restricts_ingress_only_and_is_opt_in(tmp_path: Path) -> None:
    assert not by_kind(render(DEPLOY), "NetworkPolicy"), "a policy needs a plugin that enforces it: the base ships none"
    policy = only(with_policy(tmp_path), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"], "the API server's address is the cluster's: egress stays open"


def test_with_metrics_secure_the_scrape_follows_the_metrics_port_to_8443(tmp_path: Path) -> None:
    objects = with_policy(tmp_path, DEPLOY / "components" / "metrics-secure")
    policies, pod = by_kind(objects, "NetworkPolicy"), scheduler_pod(objects)
    (container,) = pod["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == 8443
    assert admitted(policies, pod, "metrics", PROMETHEUS)
    assert not admitted(policies, pod, "metrics", TENANT)
