"""Wall-clock timestamps as the API server writes them (RFC 3339, UTC, whole seconds)."""

from __future__ import annotations

import datetime as dt


def rfc3339(epoch_seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(epoch_seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float | None:
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def human_duration(seconds: float) -> str:
    """Age the way kubectl shows it (apimachinery's HumanDuration thresholds)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        y, d = h // (24 * 365), (h // 24) % 365
        return f"{y}y{d}d" if d else f"{y}y"
    return f"{h // (24 * 365)}y"
