"""The order in which activated Run keys are handed to workers.

Rule: ordering is a pure sort key over a small, immutable queue entry, so a
policy (priority, per-namespace fairness) is a new key function and nothing
else; the default is FIFO by activation (SPEC §8). A fresh start activates the
Pending Runs oldest first (creationTimestamp, then namespace, then name), which
is also ``kruntimes simulate``'s default cycle order (SPEC §12). This is a
purely computational module; the work queue itself lives in ``effects/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Protocol, TypeAlias, final

from kruntimes.pure.model.objects import Run, RunKey

SortKey: TypeAlias = tuple[int, ...]
"""Lower sorts first. Integers only, so every policy's keys compare without surprises."""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """What an ordering policy may look at for one queued key."""

    key: RunKey
    activated_seq: int
    """Monotonic per queue: the n-th activation (a re-add keeps the first while queued)."""
    creation_timestamp: datetime | None = None


class QueueOrder(Protocol):
    """An ordering policy: a pure, total sort key over queue entries."""

    @property
    def name(self) -> str: ...

    def sort_key(self, entry: QueueEntry) -> SortKey: ...


@final
@dataclass(frozen=True, slots=True)
class Fifo:
    """First activated, first served: fair without knowing anything about Runs."""

    name: str = "fifo"

    def sort_key(self, entry: QueueEntry) -> SortKey:
        return (entry.activated_seq,)


fifo: Final = Fifo()
"""The default order (the contract's name for it)."""
_: QueueOrder = fifo


def initial_order(runs: Iterable[Run]) -> tuple[RunKey, ...]:
    """The Pending Runs' keys, oldest first: creationTimestamp (missing last), namespace, name.

    Names compare by code point, which is UTF-8 byte order.
    """
    pending = [run for run in runs if run.status.pending]
    pending.sort(key=_age_key)
    return tuple(run.key for run in pending)


_NO_TIME: Final = datetime.min.replace(tzinfo=timezone.utc)


def _age_key(run: Run) -> tuple[bool, datetime, str, str]:
    created = run.creation_timestamp
    return (created is None, created or _NO_TIME, run.namespace, run.name)
