"""`kubectl kruntimes explain`: the real kubectl runs the installed plugin against the dev cluster.

The plugin is the console script ``kubectl-kruntimes`` in this environment's
``bin`` directory, put first on ``PATH`` the way an operator's install puts it
there. The namespace comes from ``-n``, ``NAMESPACE/RUN`` or the kubeconfig
context, as kubectl's own commands take it; the candidate table groups
rejected pods by verdict and shows the top ranked candidates; a request that
no pod could hold even empty is called that, not "full".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from kruntimes.cli import main
from kruntimes.commands.explain import default_namespace
from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.kube import JSONObject, Kube, load_configuration
from tests.builders import make_pod, make_run
from tests.kubectl import Kubectl

TEAM = "team-a"
BIN = Path(sys.executable).parent
"""The environment's ``bin`` directory: where ``pip install`` put ``kubectl-kruntimes``."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start(simulator=None) as running:
        yield running


@pytest.fixture(scope="module")
def kube(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The fleets the tests explain, in namespace ``team-a`` (the kubeconfigs default to ``default``)."""
    path = cluster.kubeconfig_path(tmp_path_factory.mktemp("writer"))
    client = Kube(load_configuration(str(path)).unwrap().configuration, request_timeout=10)
    namespace: JSONObject = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}}
    client.create("/api/v1/namespaces", namespace).unwrap()
    now = datetime.now(timezone.utc)
    # runtime "python": 12 pods with room, 4 full ones, 2 with a stale heartbeat
    for i in range(12):
        make_pod(client, f"python-free-{i:02}", "python", namespace=TEAM, capacity={"runs": "2"}, probed=now)
    for i in range(4):
        make_pod(client, f"python-full-{i}", "python", namespace=TEAM, capacity={"runs": "2"}, probed=now)
        for j in range(2):
            make_run(client, f"on-full-{i}-{j}", "python", namespace=TEAM, status={"phase": "Running", "assignedPod": f"python-full-{i}"})
    for i in range(2):
        make_pod(client, f"python-stale-{i}", "python", namespace=TEAM, capacity={"runs": "2"}, probed=now - timedelta(hours=2 + i))
    make_run(client, "plain", "python", namespace=TEAM)
    make_run(client, "huge", "python", namespace=TEAM, requests={"runs": "4"})
    # runtime "node": only full pods, so the Run waits
    for i in range(3):
        make_pod(client, f"node-{i}", "node", namespace=TEAM, capacity={"runs": "1"}, probed=now)
        make_run(client, f"node-busy-{i}", "node", namespace=TEAM, status={"phase": "Running", "assignedPod": f"node-{i}"})
    make_run(client, "waiting", "node", namespace=TEAM)
    yield client
    client.close()


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl ARGS`` with this environment's ``bin`` first on PATH and ``KUBECONFIG`` set, as an operator runs it."""
    assert (BIN / "kubectl-kruntimes").exists(), "kubectl-kruntimes is not installed in this environment"
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    operator = Kubectl(kubeconfig, env={"PATH": path, "HOME": str(kubeconfig.parent), "COLUMNS": "200"}, timeout=60)
    return operator(*args, check=False)


FRESH = ("--heartbeat-stale-after", "1h")
"""The pods' heartbeats are written once, when the module starts: keep them fresh for its whole run."""


def explain(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return kubectl(kubeconfig, "kruntimes", "explain", *FRESH, *args)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_kubectl_kruntimes_explain_takes_a_namespace_flag_and_a_bare_run_name(
    cluster: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    kubeconfig = cluster.kubeconfig_path(tmp_path)  # its context's namespace is "default"
    done = explain(kubeconfig, "-n", TEAM, "plain")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Run {TEAM}/plain  (runtime python")
    assert "The scheduler would now: Bind to python-free-" in flat(done.stdout)
    listed = kubectl(kubeconfig, "plugin", "list")
    assert str(BIN / "kubectl-kruntimes") in listed.stdout
    qualified = explain(kubeconfig, f"{TEAM}/plain")
    assert qualified.returncode == 0 and qualified.stdout.startswith(f"Run {TEAM}/plain ")
    missing = explain(kubeconfig, "plain")  # in "default", where there is no such Run
    assert missing.returncode == 1
    assert missing.stderr.strip() == 'kruntimes explain: run "default/plain" not found'


def test_the_namespace_defaults_from_the_kubeconfig_context(cluster: DevCluster, kube: Kube, tmp_path: Path) -> None:
    kubeconfig = cluster.kubeconfig_path(tmp_path, namespace=TEAM)
    done = explain(kubeconfig, "waiting")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Run {TEAM}/waiting ")
    overridden = explain(kubeconfig, "-n", "default", "waiting")
    assert overridden.returncode == 1 and '"default/waiting" not found' in overridden.stderr


def test_the_namespace_is_the_chosen_contexts_else_default_and_in_a_pod_the_pods_own(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    second = tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump({"current-context": "lab", "contexts": [{"name": "bare", "context": {}}]}))
    second.write_text(
        yaml.safe_dump(
            {
                "current-context": "ignored",
                "contexts": [
                    {"name": "lab", "context": {"namespace": "science"}},
                    {"name": "prod", "context": {"namespace": "shop"}},
                ],
            }
        )
    )
    merged = {"KUBECONFIG": f"{first}{os.pathsep}{second}"}
    assert default_namespace(None, None, environ=merged) == "science"  # the first file's current-context wins
    assert default_namespace(None, "prod", environ=merged) == "shop"
    assert default_namespace(None, "bare", environ=merged) == "default"  # a context without a namespace
    assert default_namespace(str(second), "lab", environ=merged) == "science"  # --kubeconfig wins over $KUBECONFIG
    assert default_namespace(str(first), None, environ={}) == "default"  # the context is defined nowhere
    served = tmp_path / "namespace"
    served.write_text("kruntimes-system\n")
    nothing = tmp_path / "no-home"
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert default_namespace(None, None, environ=in_pod, home=nothing, service_account_namespace=served) == (
        "kruntimes-system"
    )
    assert default_namespace(None, None, environ={}, home=nothing, service_account_namespace=served) == "default"


def test_pods_with_the_same_verdict_share_a_line_and_only_the_top_ranked_are_listed(
    cluster: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    kubeconfig = cluster.kubeconfig_path(tmp_path, namespace=TEAM)
    done = explain(kubeconfig, "plain")
    assert done.returncode == 0, done.stderr
    out = flat(done.stdout)
    ranked = re.findall(r"(\d+) (python-free-\d+) runs 0/2 - total", out)
    assert ranked == [(str(i), f"python-free-{i - 1:02}") for i in range(1, 11)]
    assert "… 2 more feasible (--all-pods lists them)" in out
    assert "- 4 pods runs 2/2 RuntimePodAvailability RuntimePodUnavailable: full: runs 2/2 in use, needs 1" in out
    # the two stale pods' last probes differ (2h and 3h ago): one line, with the range
    stale = re.search(r"- 2 pods runs 0/2 RuntimePodAvailability RuntimePodUnavailable: runtimed heartbeat is stale: "
                      r"last probe (\S+) ago to (\S+) ago \(stale after 3600s\)", out)
    assert stale is not None and stale.groups() == ("2h", "3h"), out
    assert "python-full-" not in out and "python-stale-" not in out
    assert "--all-pods prints one per pod" in out

    every = explain(kubeconfig, "plain", "--all-pods")
    assert every.returncode == 0, every.stderr
    out = flat(every.stdout)
    assert len(re.findall(r"\d+ python-free-\d+ runs 0/2 - total", out)) == 12
    for i in range(4):
        assert f"- python-full-{i} runs 2/2 RuntimePodAvailability RuntimePodUnavailable: full: runs 2/2 in use" in out
    assert len(re.findall(r"- python-stale-\d runs 0/2 RuntimePodAvailability", out)) == 2
    assert "more feasible" not in out and not re.search(r"- \d+ pods ", out)


def test_a_waiting_run_groups_its_full_pods(cluster: DevCluster, kube: Kube, tmp_path: Path) -> None:
    kubeconfig = cluster.kubeconfig_path(tmp_path, namespace=TEAM)
    done = explain(kubeconfig, "waiting")
    out = flat(done.stdout)
    assert "- 3 pods runs 1/1 RuntimePodAvailability RuntimePodUnavailable: full: runs 1/1 in use, needs 1" in out
    assert "The scheduler would now: Wait:" in out
    assert "Never fits" not in out and "can ever hold" not in out


def test_a_request_larger_than_every_pod_is_called_never_fitting_not_full(
    cluster: DevCluster, kube: Kube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = cluster.kubeconfig_path(tmp_path, namespace=TEAM)
    done = explain(kubeconfig, "huge")
    assert done.returncode == 0, done.stderr
    out = flat(done.stdout)
    assert (
        'Never fits: no Runtime Pod of runtime "python" can ever hold this Run: it requests runs 4, '
        "the largest pod has 2." in out
    )
    assert "- 16 pods various RuntimePodAvailability RuntimePodUnavailable: too small: runs capacity 2, needs 4" in out
    assert "full:" not in out
    code = main(["explain", *FRESH, "--kubeconfig", str(kubeconfig), "huge", "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["neverFits"] == [{"resource": "runs", "requested": "4", "largest": "2"}]
    assert {p["detail"] for p in doc["pods"] if p["pod"].startswith("python-free-")} == {
        "too small: runs capacity 2, needs 4"
    }
    code = main(["explain", *FRESH, "--kubeconfig", str(kubeconfig), "plain", "-o", "json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["neverFits"] == []
