"""``LazyTuple``: a read-only sequence whose items are computed on first use (private).

For values a cycle produces but seldom reads (a ranking, a snapshot's ordered
targets): the subclass says how to build the tuple; reading, comparing and
hashing behave as that tuple's, and it compares equal to it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

_T = TypeVar("_T")


class LazyTuple(Sequence[_T]):
    """Subclasses define :meth:`_items` (the tuple it stands for; may cache it)."""

    __slots__ = ()

    def _items(self) -> tuple[_T, ...]:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> _T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[_T, ...]: ...
    def __getitem__(self, index: int | slice) -> _T | tuple[_T, ...]:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[_T]:
        return iter(self._items())

    def __contains__(self, value: object) -> bool:
        return value in self._items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyTuple):
            return self._items() == other._items()
        if isinstance(other, tuple):
            return self._items() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items())

    def __repr__(self) -> str:
        return repr(self._items())
