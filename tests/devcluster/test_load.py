"""The benchmark's load at a small size: every watcher sees every concurrent write exactly once, in order."""

from __future__ import annotations

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.loadtest import LoadSpec, run_load


def test_concurrent_status_writers_lose_and_reorder_nothing_for_any_watcher() -> None:
    with DevCluster.start(simulator=None, event_window=100_000) as cluster:
        result = run_load(cluster.url, LoadSpec(writers=4, writes_per_writer=60, watchers=4, runs=8, timeout=30))
    assert result.writes == 240 and result.conflicts_or_errors == 0
    assert result.events_received == 4 * 240
    assert (result.lost, result.duplicates, result.reordered) == (0, 0, 0)


def test_the_load_also_holds_against_a_token_protected_cluster() -> None:
    with DevCluster.start(simulator=None, event_window=100_000, token="t") as cluster:
        result = run_load(cluster.url, LoadSpec(writers=2, writes_per_writer=50, watchers=3, runs=3, timeout=30), token="t")
    assert (result.lost, result.duplicates, result.reordered) == (0, 0, 0)
