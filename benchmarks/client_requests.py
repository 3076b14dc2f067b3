"""The client's cost per request: CPU and wall time of ``Kube.patch_status`` and ``Kube.create``,
and per watch event received.

    .venv/bin/python benchmarks/client_requests.py                   # ~20 s
    .venv/bin/python benchmarks/client_requests.py --server real     # TLS, the ServiceAccount's token
    .venv/bin/python benchmarks/client_requests.py --requests 5000 --rounds 3
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/client_requests.py   # another tree's client

A server (``--server``: a dev cluster in its own process by default, ``real`` for the test suite's
kube-apiserver with deploy/ applied, or a kubeconfig; ``benchmarks/_servers.py``), one Run, and this process
sending the requests one after the other from one thread, on the scheduler's credentials (its
ServiceAccount token on ``real``), as a scheduler's worker does: a status
merge-patch of the Run (the size of a bind's) and an Event's POST (the size of a Scheduled Event).
Reported per request: this process's CPU (``time.process_time``: what a request costs the client)
and the wall time (the server's share included). Every round of every kind alternates with the
others, so a change in the machine's speed touches them alike.

Watch events: a thread watches the Run (``Kube.watch``) while this thread sends the status
patches; reported is that thread's CPU (``time.thread_time``) per event it took from the stream
(reading, framing and the JSON of each event: what an informer pays before it decodes a Run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, run_body  # noqa: E402
from _servers import SERVER_HELP, start_server  # noqa: E402

from kruntimes.kubeclient.kube import RUNS, connect  # noqa: E402

NAMESPACE = "bench"
RUN = "r1"


def event_body(i: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "r1.", "namespace": NAMESPACE},
        "involvedObject": {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "name": RUN, "namespace": NAMESPACE},
        "reason": "Scheduled",
        "message": f"Successfully assigned Run to a Runtime Pod ({i})",
        "type": "Normal",
        "source": {"component": "kruntimes-scheduler"},
        "reportingComponent": "kruntimes-scheduler",
        "reportingInstance": "bench",
        "action": "Binding",
        "eventTime": "2026-01-01T00:00:00.000000Z",
    }


def measure(send: Callable[[int], None], count: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per request over ``count`` requests."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(count):
        send(i)
    return (time.process_time() - cpu) * 1e6 / count, (time.perf_counter() - wall) * 1e6 / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per kind and round (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each kind once per round (default 3)")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    parser.add_argument("--server", default="dev", help=SERVER_HELP)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(args.server, Path(tmp))
        try:
            admin = server.admin()
            admin.create(RUNS.path(server.namespace(NAMESPACE)), json.loads(run_body(NAMESPACE, RUN))).unwrap()
            admin.close()
            kube = connect(str(server.scheduler_kubeconfig)).unwrap()
            status_path = RUNS.path(NAMESPACE, RUN)
            events_path = f"/api/v1/namespaces/{NAMESPACE}/events"

            def patch(i: int) -> None:
                body = json.dumps({"status": {"message": f"waiting ({i})"}}, separators=(",", ":"))
                kube.patch_status(status_path, body).unwrap()

            def post(i: int) -> None:
                kube.create(events_path, event_body(i)).unwrap()

            def watched(count: int) -> tuple[float, float]:
                """(watch thread CPU µs, wall µs) per event over ``count`` events made by patches."""
                version = str(kube.get(status_path).unwrap()["metadata"]["resourceVersion"])  # type: ignore[index]
                stream = kube.watch(RUNS.path(NAMESPACE), version, timeout_seconds=600, bookmarks=False)
                took: list[float] = []
                opened = threading.Event()

                def read() -> None:
                    events = iter(stream)
                    opened.set()
                    cpu, seen = 0.0, 0
                    for _ in events:
                        if seen == 0:
                            cpu = time.thread_time()  # from the first event: the open is not an event's cost
                        seen += 1
                        if seen == count:
                            break
                    took.append(time.thread_time() - cpu)
                    stream.interrupt()

                reader = threading.Thread(target=read)
                reader.start()
                opened.wait()
                wall = time.perf_counter()
                for i in range(count):
                    patch(i)
                reader.join()
                return took[0] * 1e6 / (count - 1), (time.perf_counter() - wall) * 1e6 / count

            kinds: dict[str, Callable[[int], None]] = {"status_patch": patch, "event_post": post}
            for send in kinds.values():
                measure(send, 100)  # connections made, code warm
            watched(100)
            samples: dict[str, list[tuple[float, float]]] = {kind: [] for kind in [*kinds, "watch_event"]}
            for _ in range(args.rounds):
                for kind, send in kinds.items():
                    samples[kind].append(measure(send, args.requests))
                samples["watch_event"].append(watched(args.requests))
            kube.close()
        finally:
            server.stop()
    medians = {
        kind: (statistics.median(c for c, _ in rows), statistics.median(w for _, w in rows)) for kind, rows in samples.items()
    }
    result = {
        "benchmark": "client_requests",
        "machine": machine(),
        "server": args.server,
        "requests": args.requests,
        "rounds": args.rounds,
        "kinds": {
            kind: {
                "cpu_us": [round(c, 1) for c, _ in rows],
                "wall_us": [round(w, 1) for _, w in rows],
                "cpu_us_median": round(medians[kind][0], 1),
                "wall_us_median": round(medians[kind][1], 1),
            }
            for kind, rows in samples.items()
        },
    }
    print(json.dumps(result, indent=1))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1))
    for kind, (cpu, wall) in medians.items():
        what = "event (watch thread)" if kind == "watch_event" else "request"
        print(f"{kind:>12}: client CPU {cpu:.0f} us/{what}, wall {wall:.0f} us/request (median of {args.rounds})")


if __name__ == "__main__":
    main()
