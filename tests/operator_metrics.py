"""The operator metrics' closed label sets, as the scrape must show them (shared by the scrape tests)."""

from __future__ import annotations

from typing import Final

from kruntimes.effects.metrics import package_version

OUTCOMES: Final = frozenset({
    "scheduled", "waiting", "terminal", "delayed", "skipped", "reserve_conflict", "bind_conflict",
    "bind_uncertain", "released", "gone", "write_failed", "cycle_error", "not_leader",
})
VERBS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "other"})
KINDS: Final = frozenset({"runs", "pods", "workspaces"})
ERROR_KINDS: Final = frozenset({
    "not_found", "conflict", "already_exists", "gone", "invalid", "unauthorized", "forbidden", "throttled",
    "timeout", "server", "unreachable", "transport", "bad_response",
})

OPERATOR_LABELS: Final[dict[str, dict[str, frozenset[str]]]] = {
    "workqueue_adds_total": {"name": frozenset({"runs"})},
    "workqueue_retries_total": {"name": frozenset({"runs"})},
    "workqueue_depth": {"name": frozenset({"runs"})},
    "workqueue_queue_duration_seconds": {"name": frozenset({"runs"})},
    "workqueue_work_duration_seconds": {"name": frozenset({"runs"})},
    "kruntimes_scheduler_waiting_runs": {"reason": frozenset({"capacity", "constraints", "unfit"})},
    "kruntimes_scheduler_oldest_waiting_run_seconds": {"reason": frozenset({"capacity", "constraints", "unfit", "queued"})},
    "kruntimes_scheduler_leader": {},
    "kruntimes_scheduler_cycle_outcomes_total": {"outcome": OUTCOMES},
    "kruntimes_scheduler_api_requests_total": {"verb": VERBS, "code": frozenset({"2xx", "3xx", "4xx", "5xx", "none", "other"})},
    "kruntimes_scheduler_api_request_duration_seconds": {"verb": VERBS},
    "kruntimes_scheduler_bind_confirm_failures_total": {"kind": ERROR_KINDS},
    "kruntimes_scheduler_event_writes_total": {"result": frozenset({"written", "failed", "dropped", "fenced"})},
    "kruntimes_scheduler_informer_relists_total": {"kind": KINDS},
    "kruntimes_scheduler_informer_watch_restarts_total": {"kind": KINDS},
    "kruntimes_scheduler_shard_members": {},
    "kruntimes_scheduler_shard_namespaces": {"state": frozenset({"owned", "desired"})},
    "kruntimes_scheduler_shard_handoffs_total": {"kind": frozenset({"acquired", "released", "fenced", "lost"})},
    "kruntimes_scheduler_skipped_objects_total": {
        "thread": frozenset({"informer-runs", "informer-pods", "informer-workspaces", "worker", "event-recorder", "control"}),
        "stage": frozenset({"decode", "apply", "notify", "cycle", "write", "round"}),
    },
    "kruntimes_scheduler_server_resets_total": {
        "reason": frozenset({"too_large_resource_version", "resource_version_went_back", "lease_recreated", "lease_replaced"})
    },
    "kruntimes_scheduler_http_dropped_connections_total": {"reason": frozenset({"limit", "timeout", "too_large"})},
    "kruntimes_build_info": {"version": frozenset({package_version()})},
}
"""Sample name (a histogram's base name) -> label -> its allowed values."""
RUNTIME_PREFIXES: Final = ("process_", "python_")
"""prometheus-client's process, platform and GC collectors: fixed names, no label from the cluster."""


def base_name(sample: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample
