"""The plugin registry: an immutable, ordered set of plugins, and why one cannot be built.

A registry maps names to plugin values (built once, at registration, from a
factory), keeps filters in registration order (the order they judge a pod in)
and gives every score plugin a positive integer weight. It refuses duplicate
names, weights that are not positive integers, and a plugin whose own ``name``
differs from the one it is registered under: each is a ``RegistryError``, a
configuration mistake the scheduler refuses to start with.

The default plugin set is not here: ``kruntimes.pure.plugins.registry`` holds
it, so the framework never imports a plugin. This is a purely computational
module with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final, Literal, TypeAlias, TypeVar, final

from returns.pipeline import is_successful
from returns.result import Failure, Result, Success

from kruntimes.pure.framework.interface import FilterPlugin, ScorePlugin

__all__ = [
    "EMPTY_REGISTRY",
    "FilterEntry",
    "Registry",
    "RegistryError",
    "RegistryErrorReason",
    "ScoreEntry",
    "must",
]

RegistryErrorReason: TypeAlias = Literal["DuplicatePlugin", "InvalidWeight", "UnknownPlugin", "NameMismatch"]


@final
@dataclass(frozen=True, slots=True)
class RegistryError:
    """A registry that cannot be built: the scheduler must not start with it."""

    reason: RegistryErrorReason
    message: str

    def __str__(self) -> str:
        return self.message


@final
@dataclass(frozen=True, slots=True)
class FilterEntry:
    name: str
    factory: Callable[[], FilterPlugin]
    plugin: FilterPlugin
    """``factory()``, built once at registration: plugins are values, a cycle never builds one."""


@final
@dataclass(frozen=True, slots=True)
class ScoreEntry:
    name: str
    weight: int
    factory: Callable[[], ScorePlugin]
    plugin: ScorePlugin


@final
@dataclass(frozen=True, slots=True)
class Registry:
    """An immutable, ordered plugin set. Filters run in registration order.

    Build one with ``EMPTY_REGISTRY.register_filter(...)`` / ``register_score(...)``;
    every method returns a new registry (or a ``RegistryError``) and leaves this one as is.
    """

    filters: tuple[FilterEntry, ...] = ()
    scores: tuple[ScoreEntry, ...] = ()
    filter_by_name: Mapping[str, FilterEntry] = field(init=False, compare=False, repr=False)
    """The filters by name (derived; a cycle that ends in Wait looks its rejecting plugins up)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "filter_by_name", MappingProxyType({e.name: e for e in self.filters}))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.filters) + tuple(e.name for e in self.scores)

    @property
    def weights(self) -> tuple[tuple[str, int], ...]:
        """``(score plugin, weight)`` in registration order (what a cycle record logs)."""
        return tuple((e.name, e.weight) for e in self.scores)

    def register_filter(self, name: str, factory: Callable[[], FilterPlugin]) -> Result[Registry, RegistryError]:
        """Append a filter (it runs after every filter registered before it)."""
        refused = self._refuse_name(name)
        if refused is not None:
            return Failure(refused)
        plugin = factory()
        if plugin.name != name:
            return Failure(_name_mismatch(name, plugin.name))
        return Success(replace(self, filters=self.filters + (FilterEntry(name, factory, plugin),)))

    def register_score(
        self, name: str, weight: int, factory: Callable[[], ScorePlugin]
    ) -> Result[Registry, RegistryError]:
        refused = self._refuse_name(name) or _refuse_weight(name, weight)
        if refused is not None:
            return Failure(refused)
        plugin = factory()
        if plugin.name != name:
            return Failure(_name_mismatch(name, plugin.name))
        return Success(replace(self, scores=self.scores + (ScoreEntry(name, weight, factory, plugin),)))

    def with_weight(self, name: str, weight: int) -> Result[Registry, RegistryError]:
        """The same registry with score plugin ``name`` weighted ``weight`` (> 0)."""
        refused = _refuse_weight(name, weight)
        if refused is not None:
            return Failure(refused)
        if name not in {e.name for e in self.scores}:
            return Failure(RegistryError("UnknownPlugin", f'no score plugin "{name}" is registered'))
        scores = tuple(replace(e, weight=weight) if e.name == name else e for e in self.scores)
        return Success(replace(self, scores=scores))

    def with_weights(self, weights: Iterable[tuple[str, int]]) -> Result[Registry, RegistryError]:
        """Apply several overrides (e.g. the weights a cycle record logged)."""
        registry = self
        for name, weight in weights:
            result = registry.with_weight(name, weight)
            if not is_successful(result):
                return result
            registry = result.unwrap()
        return Success(registry)

    def without(self, name: str) -> Result[Registry, RegistryError]:
        """The same registry without plugin ``name`` (a filter or a score); the others keep their order."""
        if name not in self.names:
            return Failure(RegistryError("UnknownPlugin", f'no plugin "{name}" is registered'))
        return Success(
            replace(
                self,
                filters=tuple(e for e in self.filters if e.name != name),
                scores=tuple(e for e in self.scores if e.name != name),
            )
        )

    def _refuse_name(self, name: str) -> RegistryError | None:
        if name in self.names:
            return RegistryError("DuplicatePlugin", f'plugin "{name}" is already registered')
        return None


def _refuse_weight(name: str, weight: int) -> RegistryError | None:
    if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
        return RegistryError("InvalidWeight", f'score plugin "{name}" weight must be a positive integer, got {weight!r}')
    return None


def _name_mismatch(name: str, actual: str) -> RegistryError:
    return RegistryError("NameMismatch", f'plugin registered as "{name}" calls itself "{actual}"')


EMPTY_REGISTRY: Final = Registry()

_T = TypeVar("_T")


def must(result: Result[_T, RegistryError]) -> _T:
    """Unwrap a registry built from constants: a failure here is a bug, caught at import."""
    if not is_successful(result):
        raise AssertionError(str(result.failure()))
    return result.unwrap()
