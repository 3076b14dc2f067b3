"""Building blocks of the planning benchmarks' worlds (``planning.py``, ``planning_l0.py``)."""

from __future__ import annotations

from datetime import datetime

from kruntimes.pure.readers.kube import decode_pod
from kruntimes.pure.model.objects import HEARTBEAT_CONDITION, RuntimePod
from kruntimes.pure.model.times import format_time


def runtime_pod(name: str, *, namespace: str, runtime: str, capacity: int, now: datetime) -> RuntimePod:
    """A Running, Ready Runtime Pod with a heartbeat at ``now`` and ``capacity`` runs, as decoded."""
    return decode_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-pod-{name}",
                "resourceVersion": "1",
                "labels": {"runtime": runtime},
                "annotations": {"kruntimes.io/capacity.runs": str(capacity)},
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": HEARTBEAT_CONDITION, "status": "True", "lastProbeTime": format_time(now)},
                ],
            },
        }
    ).unwrap()
