"""One mutable cell holding one immutable value, replaced by compare-and-swap.

The effect layer keeps exactly two of these (the ``ClusterState`` and the
assumed-reservation ledger; docs/architecture.md, "Cluster state and the ledger"). Readers take the value
with ``get()`` without any lock: the reference is read atomically under the GIL
and the value it points to never changes.

Writers pass a *pure* function of the current value. It runs outside the lock;
the lock is held only to check that the value is still the one the function
saw and to store the result (the compare-and-swap). When another writer got in
between, the function runs again on the newer value. So the function may run
more than once and must not perform I/O or other effects; it must not call
``swap`` on the same atom either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, final


T = TypeVar("T")
R = TypeVar("R")


@final
class Atom(Generic[T]):
    """A reference to an immutable value of type ``T``, updated only by compare-and-swap."""

    __slots__ = ("_lock", "_value")

    def __init__(self, value: T) -> None:
        self._value = value
        self._lock = threading.Lock()

    def get(self) -> T:
        """The current value (no lock: reading one reference is atomic)."""
        return self._value

    def compare_and_set(self, expected: T, new: T) -> bool:
        """Store ``new`` only if the current value *is* ``expected`` (identity, not equality)."""
        with self._lock:
            if self._value is not expected:
                return False
            self._value = new
            return True

    def reset(self, value: T) -> T:
        """Replace the value unconditionally and return the previous one (e.g. a new leader's empty ledger)."""
        with self._lock:
            old = self._value
            self._value = value
            return old

    def swap_pair(self, fn: Callable[[T], T]) -> tuple[T, T]:
        """Apply ``fn`` atomically; return ``(old, new)``: the value ``fn`` was applied to and its result."""
        while True:
            old = self._value
            new = fn(old)
            if self.compare_and_set(old, new):
                return old, new

    def swap(self, fn: Callable[[T], T]) -> T:
        """Apply ``fn`` atomically and return the new value."""
        return self.swap_pair(fn)[1]

    def swap_with(self, fn: Callable[[T], tuple[T, R]]) -> R:
        """Apply ``fn`` atomically, storing the first element of its answer; return the second.

        For a transition that also says what it decided (a scheduling step: the next
        ledger and the step itself); like ``swap``, ``fn`` may run more than once."""
        while True:
            old = self._value
            new, answer = fn(old)
            if self.compare_and_set(old, new):
                return answer
