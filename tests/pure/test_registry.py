"""The plugin registry as a library caller builds and changes one: what each method returns,
and the error, word for word, for each registry that cannot be built."""

from __future__ import annotations

import pytest
from returns.result import Failure, Success

from kruntimes.pure.framework.registry import EMPTY_REGISTRY, RegistryError, must
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.plugins.preferred import PreferredRunAffinity
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY


def test_each_entry_keeps_the_factory_it_was_registered_with_and_the_plugin_it_built() -> None:
    registry = must(must(EMPTY_REGISTRY.register_filter("RunAffinity", RunAffinity)).register_score("LeastLoaded", 2, LeastLoaded))
    (filter_entry,) = registry.filters
    (score_entry,) = registry.scores
    assert filter_entry.factory is RunAffinity and filter_entry.plugin == RunAffinity()
    assert score_entry.factory is LeastLoaded and score_entry.plugin == LeastLoaded()
    assert (score_entry.name, score_entry.weight) == ("LeastLoaded", 2)
    assert registry.filter_by_name == {"RunAffinity": filter_entry}


def test_a_factory_whose_plugin_has_another_name_is_refused_naming_both() -> None:
    assert EMPTY_REGISTRY.register_filter("Affinity", RunAffinity) == Failure(
        RegistryError("NameMismatch", 'plugin registered as "Affinity" calls itself "RunAffinity"')
    )
    assert EMPTY_REGISTRY.register_score("Least", 1, LeastLoaded) == Failure(
        RegistryError("NameMismatch", 'plugin registered as "Least" calls itself "LeastLoaded"')
    )


def test_a_score_plugin_under_a_name_already_registered_is_refused() -> None:
    assert DEFAULT_REGISTRY.register_score("LeastLoaded", 1, LeastLoaded) == Failure(
        RegistryError("DuplicatePlugin", 'plugin "LeastLoaded" is already registered')
    )
    assert DEFAULT_REGISTRY.register_score("RunAffinity", 1, LeastLoaded).failure().reason == "DuplicatePlugin"


@pytest.mark.parametrize("weight", [True, False, 0])
def test_a_weight_that_is_not_a_positive_integer_is_refused_naming_the_plugin(weight: int) -> None:
    expected = RegistryError(
        "InvalidWeight", f'score plugin "LeastLoaded" weight must be a positive integer, got {weight!r}'
    )
    assert EMPTY_REGISTRY.register_score("LeastLoaded", weight, LeastLoaded) == Failure(expected)
    assert DEFAULT_REGISTRY.with_weight("LeastLoaded", weight) == Failure(expected)


def test_with_weight_on_a_plugin_that_is_no_score_plugin_names_it() -> None:
    assert DEFAULT_REGISTRY.with_weight("RunAffinity", 2) == Failure(
        RegistryError("UnknownPlugin", 'no score plugin "RunAffinity" is registered')
    )


def test_without_drops_one_filter_or_score_plugin_and_keeps_the_others_in_order() -> None:
    no_affinity = DEFAULT_REGISTRY.without("RunAffinity").unwrap()
    assert no_affinity.names == ("RuntimePodAvailability", "WorkspacePlacement", "PreferredRunAffinity", "LeastLoaded")
    assert no_affinity.scores == DEFAULT_REGISTRY.scores
    assert "RunAffinity" not in no_affinity.filter_by_name
    no_least = DEFAULT_REGISTRY.without("LeastLoaded").unwrap()
    assert no_least.filters == DEFAULT_REGISTRY.filters
    assert no_least.weights == (("PreferredRunAffinity", 1),)
    assert no_least.scores == tuple(e for e in DEFAULT_REGISTRY.scores if e.name == "PreferredRunAffinity")
    assert DEFAULT_REGISTRY.names == (
        "RuntimePodAvailability",
        "RunAffinity",
        "WorkspacePlacement",
        "PreferredRunAffinity",
        "LeastLoaded",
    ), "the registry it came from is unchanged"


def test_without_an_unregistered_plugin_is_refused_naming_it() -> None:
    assert DEFAULT_REGISTRY.without("Nope") == Failure(RegistryError("UnknownPlugin", 'no plugin "Nope" is registered'))
    assert EMPTY_REGISTRY.without("LeastLoaded").failure().reason == "UnknownPlugin"


def test_must_returns_a_built_registry_and_raises_with_the_error_text_otherwise() -> None:
    built = DEFAULT_REGISTRY.with_weight("LeastLoaded", 3)
    assert isinstance(built, Success) and must(built) is built.unwrap()
    with pytest.raises(AssertionError) as raised:
        must(EMPTY_REGISTRY.register_score("Least", 1, PreferredRunAffinity))
    assert raised.value.args == ('plugin registered as "Least" calls itself "PreferredRunAffinity"',)
