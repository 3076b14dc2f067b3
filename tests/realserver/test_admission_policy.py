"""deploy/components/admission-policy on the real API server: every invalid example of
tests/run_examples.py refused at creation with the scheduler's own message, every valid one created.

The policy is cluster-scoped; its binding is narrowed here to this module's namespace, so the
Runs other tests create (some invalid on purpose, for the scheduler to fail) are not refused.
"""

from __future__ import annotations

import json
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane.server import ControlPlane
from tests.deploy.manifests import DEPLOY, by_kind, overlay, render
from tests.polling import wait_until
from tests.run_examples import INVALID, VALID, Example

from .support import dumps, kubectl, run_manifest

POLICY = "kruntimes-runs"


def _create(plane: ControlPlane, namespace: str, example: Example) -> tuple[int, str]:
    """POST the example as a new Run: the HTTP status and the server's message."""
    body = run_manifest(namespace, f"r-{uuid.uuid4().hex[:10]}", "python", **example.spec)
    try:
        plane.request("POST", f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", body)
    except urllib.error.HTTPError as refused:
        return refused.code, str(json.loads(refused.read())["message"])
    return 201, ""


@pytest.fixture(scope="module")
def guarded(deployed: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, str]]:
    """The component applied, its binding narrowed to a namespace of this module's own."""
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    deployed.create_namespace(namespace)
    objects = render(overlay(tmp_path_factory.mktemp("admission"), components=[DEPLOY / "components" / "admission-policy"]))
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    (binding,) = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}  # as shipped: every namespace
    binding["metadata"]["name"] = f"{POLICY}-{namespace}"
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    kubectl(deployed, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    # the API server loads policies and bindings from its own watch: refused once it has them
    wait_until(lambda: _create(deployed, namespace, INVALID[0])[0] == 422, timeout=60, interval=0.5, what="the policy in force")
    yield deployed, namespace
    kubectl(deployed, "delete", "validatingadmissionpolicybinding", binding["metadata"]["name"])


@pytest.mark.parametrize("example", INVALID, ids=lambda e: e.name)
def test_the_policy_refuses_each_invalid_run_with_the_schedulers_message(guarded: tuple[ControlPlane, str], example: Example) -> None:
    plane, namespace = guarded
    code, message = _create(plane, namespace, example)
    assert code == 422, message
    assert message.endswith(f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}-{namespace}' denied request: {example.message}"), message


@pytest.mark.parametrize("example", VALID, ids=lambda e: e.name)
def test_the_policy_lets_every_valid_run_in(guarded: tuple[ControlPlane, str], example: Example) -> None:
    plane, namespace = guarded
    assert _create(plane, namespace, example) == (201, "")


def test_the_policy_refuses_nothing_outside_its_binding(guarded: tuple[ControlPlane, str], namespace: str) -> None:
    plane, _ = guarded
    assert _create(plane, namespace, INVALID[0]) == (201, "")  # the scheduler fails it there, as before
