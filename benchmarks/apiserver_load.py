"""Load the dev-cluster API server: concurrent Run status writes and several watchers.

    .venv/bin/python benchmarks/apiserver_load.py            # full size, server in a subprocess
    .venv/bin/python benchmarks/apiserver_load.py --quick    # a few seconds
    .venv/bin/python benchmarks/apiserver_load.py --url http://127.0.0.1:PORT   # an already running dev cluster

Prints one JSON object (the measurements) and then a one-line summary. The
server runs in its own process by default so the load generator does not
share its GIL. Latency is from a write's send time to each watcher's receipt.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from kruntimes.devcluster.loadtest import LoadSpec, run_load


def _spawn_server(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kruntimes.devcluster", "--port", "0", "--no-simulator", "--event-window", "100000", "--kubeconfig-out", str(tmp / "kubeconfig")],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.match(r"listening on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise RuntimeError("the dev cluster did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="target an existing dev cluster instead of starting one")
    parser.add_argument("--token", help="bearer token of the target cluster")
    parser.add_argument("--writers", type=int, default=4, help="writer threads (default 4)")
    parser.add_argument("--writes", type=int, default=1000, help="writes per writer (default 1000)")
    parser.add_argument("--watchers", type=int, default=4, help="concurrent watches (default 4)")
    parser.add_argument("--runs", type=int, default=50, help="Runs the writes spread over (default 50)")
    parser.add_argument("--quick", action="store_true", help="small sizes: 2 writers x 200 writes, 2 watchers")
    args = parser.parse_args(argv)
    spec = LoadSpec(writers=2, writes_per_writer=200, watchers=2, runs=10) if args.quick else LoadSpec(args.writers, args.writes, args.watchers, args.runs)
    proc = None
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url
        if url is None:
            proc, url = _spawn_server(Path(tmp))
        try:
            result = run_load(url.rstrip("/"), spec, token=args.token)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)
    print(json.dumps(result.to_json(), indent=2))
    print(result.summary())
    return 0 if result.lost == result.duplicates == result.reordered == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
