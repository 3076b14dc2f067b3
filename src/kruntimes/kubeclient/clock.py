"""The wall clock, in one place: every effect that needs "now" takes it as an injectable callable
defaulting to :func:`utcnow`, so tests drive simulated time and the pure core never reads a clock."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (what Kubernetes timestamps are)."""
    return datetime.now(timezone.utc)
