"""``kruntimes dev-cluster``: run the local API server in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Final

from kruntimes.devcluster.auth import AuthFileError, Authorizer, parse_policy_file, parse_token_file
from kruntimes.devcluster.cluster import DevCluster, is_loopback
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.gcpauses import quick_turns, shorten_pauses
from kruntimes.devcluster.kubeconfig import KubeconfigError, remove_temporary, write_private, write_temporary
from kruntimes.devcluster.simulator import SimulatorSettings

_RUNTIME: Final = re.compile(r"^(?:(?P<ns>[a-z0-9-]+)/)?(?P<name>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)=(?P<replicas>\d+)(?:x(?P<runs>\d+))?$")
_DURATION: Final = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m)?$")

EPILOG: Final = """\
examples:
  kruntimes dev-cluster --runtime python=3x2
      3 Runtime Pods python-0..2 in namespace default, each advertising runs: 2
  kruntimes dev-cluster --port 6443 --runtime python=2x4 --execute-runs 5s
      also play the Runs the scheduler binds: Running, then Succeeded 5 s later
  kruntimes dev-cluster --no-simulator --kubeconfig-out ./dev.kubeconfig

then, in another shell:
  export KUBECONFIG=<the printed kubeconfig path>
  kubectl get runs            # PHASE, ASSIGNED POD, RUNTIME, AGE
  kubectl get pods -l runtime=python
  kubectl apply -f run.yaml

Everything is in memory and lost on exit. It is a development tool, not a
cluster: no scheduling of pods, no kubelet, no RBAC, no admission webhooks.
Fault injection for chaos tests: POST /_devcluster/faults (loopback only),
e.g. curl -d '{"action":"conflict","resource":"runs","subresource":"status","count":3}' URL/_devcluster/faults
"""


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    namespace: str
    name: str
    replicas: int
    runs: int


def parse_runtime(text: str) -> RuntimeSpec:
    m = _RUNTIME.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"expected [NAMESPACE/]NAME=REPLICAS[xRUNS] (e.g. python=3x2), got {text!r}")
    return RuntimeSpec(m["ns"] or "default", m["name"], int(m["replicas"]), int(m["runs"] or 2))


def parse_duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"expected a duration like 5, 5s, 500ms or 1m, got {text!r}")
    return float(m["n"]) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m["unit"]]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Start a local, in-memory Kubernetes API server that kubectl and the kubernetes Python client "
        "can use unchanged: core pods/namespaces/events, leases, CRDs, and the kruntimes kinds "
        "(runs/rn, runtimes/rt, persistentworkspaces). A runtime simulator keeps each Runtime's pods "
        "running with fresh heartbeats. For development and tests only; never production."
    )
    parser.epilog = EPILOG
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only; anything else exposes an unauthenticated API unless --token)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 (default) picks a free one")
    parser.add_argument("--kubeconfig-out", type=Path, metavar="FILE",
                        help="where to write the kubeconfig, mode 0600 (default: a new private directory in the temp directory, removed on exit); "
                        "never written through a symlink, and an existing FILE is replaced only if a dev cluster wrote it")
    parser.add_argument("--runtime", dest="runtimes", type=parse_runtime, action="append", default=[], metavar="[NS/]NAME=REPLICASxRUNS",
                        help="create a Runtime at start, e.g. python=3x2: 3 pods with capacity runs: 2 (repeatable)")
    parser.add_argument("--crds", type=Path, action="append", default=[], metavar="PATH",
                        help="install the CustomResourceDefinitions in this YAML file or directory at start, replacing the built-in ones of the same name (those are a copy of deploy/crds; repeatable)")
    parser.add_argument("--no-simulator", action="store_true", help="do not simulate Runtime Pods (no pods, no heartbeats)")
    parser.add_argument("--heartbeat-interval", type=parse_duration, default=5.0, metavar="DURATION", help="how often simulated pods refresh kruntimes.io/RuntimedReady (default 5s)")
    parser.add_argument("--execute-runs", type=parse_duration, metavar="DURATION", help="execute Runs bound to simulated pods: Running at once, Succeeded after DURATION")
    parser.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (written into the kubeconfig)")
    parser.add_argument("--token-auth-file", type=Path, metavar="FILE",
                        help="more users, in kube-apiserver's static token file format: token,user,uid[,\"group1,group2\"] per line; "
                        "their tokens are accepted and answered by TokenReviews (see docs/devcluster.md)")
    parser.add_argument("--authorization-policy-file", type=Path, metavar="FILE",
                        help="what those users may do, as kube-apiserver's ABAC policy file (one Policy JSON per line); answers "
                        "SubjectAccessReviews, e.g. who may GET /metrics of a scheduler run with --metrics-secure")
    parser.add_argument("--event-window", type=int, default=10_000, metavar="N", help="events a watch can resume across before it gets 410 Expired (default 10000)")
    parser.add_argument("--auto-create-namespaces", action="store_true", help="create a missing namespace on first use instead of answering 404 like a real cluster")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request to stderr")


def run(args: argparse.Namespace) -> int:
    simulator = None if args.no_simulator else SimulatorSettings(heartbeat_interval=args.heartbeat_interval, execute_runs=args.execute_runs, yield_after_beat=True)
    try:
        tokens = parse_token_file(args.token_auth_file.read_text(encoding="utf-8")) if args.token_auth_file else {}
        policy = parse_policy_file(args.authorization_policy_file.read_text(encoding="utf-8")) if args.authorization_policy_file else ()
    except (OSError, UnicodeDecodeError, AuthFileError) as exc:
        print(f"kruntimes dev-cluster: {exc}", file=sys.stderr)
        return 2
    cluster = DevCluster(
        host=args.host, port=args.port, token=args.token, authorizer=Authorizer(tokens=tokens, policy=policy), simulator=simulator, event_window=args.event_window,
        auto_create_namespaces=args.auto_create_namespaces, log_requests=args.verbose, crd_paths=args.crds,
    )
    stop = threading.Event()
    shorten_pauses()  # a process of its own: its store's full collections must not stall every request
    quick_turns()  # nor its simulator's heartbeat waves hold every request thread back

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster.run()
        except OSError as exc:
            print(f"kruntimes dev-cluster: cannot start on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        except ApiError as exc:
            print(f"kruntimes dev-cluster: a CRD from --crds was refused: {exc.message}", file=sys.stderr)
            return 1
        text = cluster.kubeconfig_text()
        try:
            path = write_temporary(text) if args.kubeconfig_out is None else write_private(args.kubeconfig_out, text)
        except KubeconfigError as exc:
            print(f"kruntimes dev-cluster: --kubeconfig-out: {exc}", file=sys.stderr)
            return 2
        try:
            for spec in args.runtimes:
                try:
                    cluster.service.ensure_namespace(spec.namespace)
                    cluster.add_runtime(spec.name, replicas=spec.replicas, capacity={"runs": str(spec.runs)}, namespace=spec.namespace)
                except ApiError as exc:
                    print(f"kruntimes dev-cluster: runtime {spec.name}: {exc.message}", file=sys.stderr)
                    return 1
            _banner(args, cluster, path, simulator)
            stop.wait()
            print("kruntimes dev-cluster: stopping", flush=True)
            return 0
        finally:
            if args.kubeconfig_out is None:
                remove_temporary(path)
    finally:
        cluster.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _banner(args: argparse.Namespace, cluster: DevCluster, path: Path, simulator: SimulatorSettings | None) -> None:
    lines = [
        "kruntimes dev-cluster: a LOCAL, IN-MEMORY Kubernetes API server for development and tests.",
        "  It is not a production cluster: no persistence, no kubelet, no RBAC. Data is lost on exit.",
        f"listening on {cluster.url}" + (" (loopback only)" if is_loopback(args.host) else ""),
    ]
    if not is_loopback(args.host):
        lines.append(f"WARNING: bound to {args.host}, reachable from other machines" + ("" if args.token else " WITHOUT authentication (use --token)"))
    lines += [
        f"kubeconfig: {path}" + (" (private to you, removed on exit)" if args.kubeconfig_out is None else ""),
        "",
        f"  export KUBECONFIG={path}",
        "  kubectl get runs",
        "  kubectl get runtimes,pods",
        "",
    ]
    if simulator is None:
        lines.append("runtime simulator: off")
    else:
        runs = f"Runs bound to its pods finish after {simulator.execute_runs:g}s" if simulator.execute_runs is not None else "Runs are not executed"
        lines.append(f"runtime simulator: on (heartbeat every {simulator.heartbeat_interval:g}s; {runs})")
    for spec in args.runtimes:
        lines.append(f"runtime {spec.namespace}/{spec.name}: {spec.replicas} pod(s), capacity runs: {spec.runs}")
    lines.append("Ctrl-C to stop.")
    print("\n".join(lines), flush=True)
