"""What a cycle decides: one ``Plan`` per dequeued Run, or a ``CycleError``.

Each plan variant says what the effect layer does next:

- ``Bind``   reserve ``pod`` in the ledger (compare-and-swap), then write the
             ``Scheduled`` status; a reserve conflict requeues at once.
- ``Wait``   write the Pending status (only if it changed); requeue after
             ``requeue_after`` seconds unless an event wakes the Run first.
- ``Fail``   write the terminal ``Failed`` status; never requeue.
- ``Cancel`` write the terminal ``Cancelled`` status; never requeue.
- ``Delay``  write nothing; requeue after ``seconds`` (retry back-off, SPEC §3.6).
- ``Skip``   write nothing; ``why`` says which rule ended the cycle.
- ``CycleError`` (a ``Failure``) write nothing, reserve nothing; retry the key
             with per-key exponential back-off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, NamedTuple, TypeAlias

WAIT_REQUEUE_SECONDS: Final = 30.0

Rejections: TypeAlias = tuple[tuple[str, str, int], ...]
"""``(plugin, reason, count)`` sorted by plugin registration order, then reason."""


class PodScore(NamedTuple):
    """One feasible pod's normalized score per plugin (registration order) and weighted total.

    A ``NamedTuple`` (immutable, same fields and keyword constructor as before)
    because a cycle builds one per feasible pod: thousands per cycle at scale,
    and a tuple is several times cheaper to build than a frozen dataclass.
    """

    pod: str
    by_plugin: tuple[tuple[str, int], ...]
    total: int


@dataclass(frozen=True, slots=True)
class Bind:
    pod: str
    pod_uid: str
    ranking: tuple[str, ...]
    """Feasible pods, best first (total descending, then name ascending)."""
    scores: tuple[PodScore, ...]
    """In ranking order."""
    rejections: Rejections


@dataclass(frozen=True, slots=True)
class Wait:
    message: str
    rejections: Rejections
    reason: str = "Unschedulable"
    requeue_after: float = WAIT_REQUEUE_SECONDS


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str = "Cancelled"
    message: str = "cancelled by user"


@dataclass(frozen=True, slots=True)
class Delay:
    seconds: float


SkipWhy: TypeAlias = Literal[
    "not found",
    "not pending",
    "no runtime",
    "awaiting bind observation",
]


@dataclass(frozen=True, slots=True)
class Skip:
    why: SkipWhy


Plan: TypeAlias = Bind | Wait | Fail | Cancel | Delay | Skip

FailReason: TypeAlias = Literal["InvalidResources", "InvalidAffinity", "InvalidSpec"]

CycleErrorReason: TypeAlias = Literal["ScoreError", "PluginError"]


@dataclass(frozen=True, slots=True)
class CycleError:
    """A cycle that could not decide (a plugin misbehaved); retried with back-off."""

    reason: CycleErrorReason
    message: str

    def __str__(self) -> str:
        return self.message
