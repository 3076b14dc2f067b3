"""The scheduler's queue order (SPEC §8: oldest first, or namespaces taking turns) in the
shape the generic ``kubeclient.workqueue.WorkQueue`` takes."""

from __future__ import annotations

from collections.abc import Callable

from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.queueing import QueueEntry, QueueOrder, SortKey


def by_policy(
    policy: QueueOrder, entry: Callable[[RunKey], QueueEntry]
) -> tuple[Callable[[RunKey, int], SortKey], Callable[[RunKey], str]]:
    """``(order, lane)`` for a ``WorkQueue`` from a pure ``QueueOrder`` policy.

    ``entry`` describes a key's Run (``queueing.entry_of`` of the state's Run); it is
    called once per activation, under the queue's lock, so it must be a cheap read of an
    immutable value.
    """

    def order(key: RunKey, activation: int) -> SortKey:
        return policy.sort_key(entry(key))

    def lane(key: RunKey) -> str:
        return policy.lane(entry(key))

    return order, lane
