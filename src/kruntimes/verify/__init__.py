"""Invariant checking over a dev cluster's write history (docs/reliability.md).

    report = check_history(cluster.history(), CheckOptions(race_window=2.0))
    assert report.ok, report.summary()

Pure: it imports :mod:`kruntimes.pure` and nothing of the effect layer.
"""

from kruntimes.verify.checker import (
    INVARIANTS,
    LEASE_NAME,
    SCHEDULER_AGENT,
    SHARD_GROUP_LABEL,
    SHARD_NAMESPACE_LABEL,
    SHARD_ROLE_LABEL,
    TERMINAL_REASONS,
    CheckOptions,
    Invariant,
    Report,
    Violation,
    check_history,
    pending_violations,
)
from kruntimes.verify.history import HistoryRecord, Resource, Write, records_from_json

__all__ = [
    "INVARIANTS",
    "LEASE_NAME",
    "SCHEDULER_AGENT",
    "SHARD_GROUP_LABEL",
    "SHARD_NAMESPACE_LABEL",
    "SHARD_ROLE_LABEL",
    "TERMINAL_REASONS",
    "CheckOptions",
    "HistoryRecord",
    "Invariant",
    "Report",
    "Resource",
    "Violation",
    "Write",
    "check_history",
    "pending_violations",
    "records_from_json",
]
