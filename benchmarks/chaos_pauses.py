"""Two larger chaos epochs than CI's: leader SIGSTOPs past the Lease, and status writes whose response is lost.

    .venv/bin/python benchmarks/chaos_pauses.py      # ~5 min; one JSON summary per epoch

The specs are the test suite's (tests/chaos/test_chaos.py) at 600 Runs instead of 120-150, with every
fault of the harness on. Each summary's ``check.violations`` must be all zero.
"""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.chaos.harness import ChaosSpec, run_epoch, FAULTS, LOSE_RESPONSE
from tests.chaos import test_chaos as t
specs = {
    "pause": ChaosSpec(runs=600, create_rate=30.0, fault_interval=0.25, leader_kills=1, sigkill_restarts=0, sigterm_restarts=0,
                       leader_pauses=4, pause_seconds=t.PAUSE_SECONDS, lease=t.PAUSE_LEASE, faults=FAULTS, seed=23),
    "lost_response": ChaosSpec(runs=600, create_rate=30.0, fault_interval=0.2, leader_kills=2, sigkill_restarts=0, sigterm_restarts=0,
                               leader_pauses=2, pause_seconds=t.PAUSE_SECONDS, lease=t.PAUSE_LEASE, faults=FAULTS + (LOSE_RESPONSE,), seed=31),
}
for name, spec in specs.items():
    with tempfile.TemporaryDirectory() as tmp:
        result = run_epoch(spec, Path(tmp))
        print(name, json.dumps(result.summary()), flush=True)
