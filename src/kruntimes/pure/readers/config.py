"""``kruntimes scheduler --config FILE``: a ``SchedulerConfiguration`` decoded into a value, or an error naming the field.

The file is modelled on kube-scheduler's ``KubeSchedulerConfiguration``: a
versioned kind, ``profiles`` whose ``plugins`` enable and disable the registered
filter and score plugins (a score plugin with a weight), and a
``leaderElection`` block with kube-scheduler's field names. Decoding starts
from the default plugin set (``DEFAULT_REGISTRY``): ``disabled`` removes
plugins (``"*"``: all of that extension point that may be removed),
``enabled`` keeps or re-enables registered plugins and sets score weights.
Filters always run in registration order, whatever order a file lists them in:
that order is observable (a pod is counted under the first filter that rejects it).

:func:`decode_configuration` takes the already-parsed document (the command
reads the YAML); :func:`format_configuration` writes a configuration back as
YAML text that decodes to an equal value. This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final, TypeVar

from returns.pipeline import is_successful
from returns.result import Result

from kruntimes.pure.framework.registry import Registry, RegistryError
from kruntimes.pure.model.objects import API_VERSION, DEFAULT_CONFIG
from kruntimes.pure.model.times import format_duration, parse_duration
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.queueing import FIFO, POLICIES
from kruntimes.pure.readers.json import (
    Invalid,
    JsonError,
    at,
    expect_bool,
    expect_int,
    expect_list,
    expect_map,
    expect_string,
    join,
    only_keys,
    reading,
)

__all__ = [
    "CONFIGURATION_KIND",
    "DEFAULT_CONFIGURATION",
    "DEFAULT_LEASE_NAME",
    "DEFAULT_PROFILE_NAME",
    "REQUIRED_PLUGINS",
    "LeaderElection",
    "Profile",
    "SchedulerConfiguration",
    "decode_configuration",
    "format_configuration",
]

CONFIGURATION_KIND: Final = "SchedulerConfiguration"
DEFAULT_PROFILE_NAME: Final = "default-scheduler"
DEFAULT_LEASE_NAME: Final = "kruntimes-scheduler"
DEFAULT_WORKERS: Final = 4
ALL: Final = "*"
_T = TypeVar("_T")
REQUIRED_PLUGINS: Final = frozenset({"RuntimePodAvailability"})
"""Plugins a file may not disable: without the availability filter Runs would be bound to pods that
are not ready, whose runtimed heartbeat is stale, or that are draining (SPEC §4)."""

TOP_KEYS: Final = (
    "apiVersion",
    "kind",
    "profiles",
    "queueOrder",
    "workers",
    "heartbeatStaleAfter",
    "leaderElection",
)
PROFILE_KEYS: Final = ("schedulerName", "plugins")
PLUGINS_KEYS: Final = ("filter", "score")
PLUGIN_SET_KEYS: Final = ("enabled", "disabled")
LEADER_ELECTION_KEYS: Final = (
    "leaderElect",
    "resourceName",
    "resourceNamespace",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
)


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """kube-scheduler's ``LeaderElectionConfiguration``, minus ``resourceLock`` (always a Lease)."""

    leader_elect: bool = True
    resource_name: str = DEFAULT_LEASE_NAME
    resource_namespace: str | None = None
    """``None``: the pod's own namespace in a cluster; outside one the command insists on a value."""
    lease_duration: timedelta = timedelta(seconds=15)
    renew_deadline: timedelta = timedelta(seconds=10)
    retry_period: timedelta = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class Profile:
    scheduler_name: str = DEFAULT_PROFILE_NAME
    registry: Registry = DEFAULT_REGISTRY
    """The enabled plugins: filters in registration order, scores with their weights."""


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    profiles: tuple[Profile, ...] = (Profile(),)
    """Exactly one for now: Runs carry no scheduler name to choose among several."""
    queue_order: str = FIFO.name
    """A key of ``queueing.POLICIES``."""
    workers: int = DEFAULT_WORKERS
    heartbeat_stale_after: timedelta = DEFAULT_CONFIG.heartbeat_stale_after
    leader_election: LeaderElection = field(default_factory=LeaderElection)

    @property
    def registry(self) -> Registry:
        return self.profiles[0].registry


DEFAULT_CONFIGURATION: Final = SchedulerConfiguration()


# --- decoding -------------------------------------------------------------------------------


def decode_configuration(document: object) -> Result[SchedulerConfiguration, JsonError]:
    """The configuration a parsed file describes; every field is optional except apiVersion and kind."""
    return reading(lambda: _configuration(document))


def _configuration(document: object) -> SchedulerConfiguration:
    top = expect_map(document, "", noun="a map (a SchedulerConfiguration)")
    only_keys(top, TOP_KEYS, "")
    api_version = top.get("apiVersion")
    kind = top.get("kind")
    if api_version is None:
        raise Invalid("apiVersion", f"is missing (expected {API_VERSION})", "MissingField")
    if kind is None:
        raise Invalid("kind", f"is missing (expected {CONFIGURATION_KIND})", "MissingField")
    if expect_string(api_version, "apiVersion") != API_VERSION:
        raise Invalid("apiVersion", f"must be {API_VERSION}, not {str(api_version)[:64]!r}", "UnknownKind")
    if expect_string(kind, "kind") != CONFIGURATION_KIND:
        raise Invalid("kind", f"must be {CONFIGURATION_KIND}, not {str(kind)[:64]!r}", "UnknownKind")
    default = DEFAULT_CONFIGURATION
    return SchedulerConfiguration(
        profiles=_optional(top, "profiles", "", _profiles, default.profiles),
        queue_order=_optional(top, "queueOrder", "", _queue_order, default.queue_order),
        workers=_optional(top, "workers", "", _workers, default.workers),
        heartbeat_stale_after=_optional(top, "heartbeatStaleAfter", "", _stale_after, default.heartbeat_stale_after),
        leader_election=_optional(top, "leaderElection", "", _leader_election, default.leader_election),
    )


def _optional(obj: Mapping[str, object], key: str, path: str, read: Callable[[object, str], _T], default: _T) -> _T:
    """``read`` the field when present (null is not absent: it is refused by ``read``)."""
    return read(obj[key], join(path, key)) if key in obj else default


def _queue_order(value: object, path: str) -> str:
    name = expect_string(value, path)
    if name not in POLICIES:
        raise Invalid(path, f"must be one of {', '.join(sorted(POLICIES))}, not {name[:64]!r}")
    return name


def _workers(value: object, path: str) -> int:
    workers = expect_int(value, path)
    if workers < 1:
        raise Invalid(path, f"must be at least 1, not {workers}")
    return workers


def _duration(value: object, path: str) -> timedelta:
    text = expect_string(value, path, expected="a duration string such as 15s")
    parsed = parse_duration(text)
    if parsed is None:
        raise Invalid(path, f"must be a Go duration such as 500ms, 15s or 1m30s, not {text[:64]!r}")
    return parsed


def _positive_duration(value: object, path: str) -> timedelta:
    parsed = _duration(value, path)
    if parsed <= timedelta(0):
        raise Invalid(path, f"must be positive, not {format_duration(parsed)}")
    return parsed


def _stale_after(value: object, path: str) -> timedelta:
    """As ``--heartbeat-stale-after``: 0 means the default (SPEC §1), stored as the default itself."""
    parsed = _duration(value, path)
    if parsed < timedelta(0):
        raise Invalid(path, "must not be negative (0 means the default, 15s)")
    return parsed if parsed > timedelta(0) else DEFAULT_CONFIG.heartbeat_stale_after


def _name(value: object, path: str) -> str:
    return expect_string(value, path, nonempty=True)


def _leader_election(value: object, path: str) -> LeaderElection:
    obj = expect_map(value, path)
    only_keys(obj, LEADER_ELECTION_KEYS, path)
    default = LeaderElection()
    election = LeaderElection(
        leader_elect=_optional(obj, "leaderElect", path, expect_bool, default.leader_elect),
        resource_name=_optional(obj, "resourceName", path, _name, default.resource_name),
        resource_namespace=_optional(obj, "resourceNamespace", path, _name, default.resource_namespace),
        lease_duration=_optional(obj, "leaseDuration", path, _positive_duration, default.lease_duration),
        renew_deadline=_optional(obj, "renewDeadline", path, _positive_duration, default.renew_deadline),
        retry_period=_optional(obj, "retryPeriod", path, _positive_duration, default.retry_period),
    )
    # The same rules as the flags' (client-go's): each stage must fit inside the next.
    if election.renew_deadline <= election.retry_period:
        raise Invalid(
            join(path, "renewDeadline"),
            f"must be longer than retryPeriod ({format_duration(election.retry_period)})",
        )
    if election.lease_duration <= election.renew_deadline:
        raise Invalid(
            join(path, "leaseDuration"),
            f"must be longer than renewDeadline ({format_duration(election.renew_deadline)})",
        )
    if election.lease_duration < timedelta(seconds=1):
        raise Invalid(join(path, "leaseDuration"), "must be at least 1s")
    return election


def _profiles(value: object, path: str) -> tuple[Profile, ...]:
    entries = expect_list(value, path)
    if len(entries) != 1:
        raise Invalid(path, f"must list exactly one profile, not {len(entries)} (Runs name no scheduler to choose by)")
    return (_profile(entries[0], at(path, 0)),)


def _profile(value: object, path: str) -> Profile:
    obj = expect_map(value, path)
    only_keys(obj, PROFILE_KEYS, path)
    name = _optional(obj, "schedulerName", path, _name, DEFAULT_PROFILE_NAME)
    registry = _optional(obj, "plugins", path, _plugins, DEFAULT_REGISTRY)
    return Profile(scheduler_name=name, registry=registry)


def _plugins(value: object, path: str) -> Registry:
    obj = expect_map(value, path)
    only_keys(obj, PLUGINS_KEYS, path)
    registry = DEFAULT_REGISTRY
    filters = tuple(e.name for e in DEFAULT_REGISTRY.filters)
    scores = dict(DEFAULT_REGISTRY.weights)
    if "filter" in obj:
        chosen = _plugin_set(obj["filter"], join(path, "filter"), "filter", filters, weighted=False)
        for name in filters:
            if name not in chosen:
                registry = _registry(registry.without(name), join(path, "filter"))
    if "score" in obj:
        chosen = _plugin_set(obj["score"], join(path, "score"), "score", tuple(scores), weighted=True)
        for name in scores:
            if name not in chosen:
                registry = _registry(registry.without(name), join(path, "score"))
        weights = tuple((name, weight) for name, weight in chosen.items() if weight is not None)
        registry = _registry(registry.with_weights(weights), join(path, "score"))
    return registry


def _plugin_set(
    value: object, path: str, point: str, registered: Sequence[str], *, weighted: bool
) -> dict[str, int | None]:
    """The plugins of one extension point left enabled, each with its weight override (``None``: as registered)."""
    obj = expect_map(value, path)
    only_keys(obj, PLUGIN_SET_KEYS, path)
    enabled: dict[str, int | None] = {name: None for name in registered}
    if "disabled" in obj:
        here = join(path, "disabled")
        for index, item in enumerate(expect_list(obj["disabled"], here)):
            name = _plugin_name(item, at(here, index), point, registered, allow_all=True, weighted=False)[0]
            for gone in registered if name == ALL else (name,):
                if gone in REQUIRED_PLUGINS and name != ALL:
                    raise Invalid(
                        join(at(here, index), "name"),
                        f'"{gone}" cannot be disabled: it keeps Runs off pods that are not ready, '
                        "whose heartbeat is stale or that are draining",
                    )
                if gone not in REQUIRED_PLUGINS:
                    enabled.pop(gone, None)
    if "enabled" in obj:
        here = join(path, "enabled")
        seen: set[str] = set()
        for index, item in enumerate(expect_list(obj["enabled"], here)):
            name, weight = _plugin_name(item, at(here, index), point, registered, allow_all=False, weighted=weighted)
            if name in seen:
                raise Invalid(join(at(here, index), "name"), f'"{name}" is listed twice')
            seen.add(name)
            enabled[name] = weight
    return enabled


def _plugin_name(
    value: object, path: str, point: str, registered: Sequence[str], *, allow_all: bool, weighted: bool
) -> tuple[str, int | None]:
    obj = expect_map(value, path)
    only_keys(obj, ("name", "weight") if weighted else ("name",), path)
    if "name" not in obj:
        raise Invalid(join(path, "name"), "is missing", "MissingField")
    name = expect_string(obj["name"], join(path, "name"), nonempty=True)
    if name not in registered and not (allow_all and name == ALL):
        known = ", ".join(registered) + (f', or "{ALL}" for all' if allow_all else "")
        raise Invalid(join(path, "name"), f'no {point} plugin "{name[:64]}" is registered (expected one of: {known})')
    weight = None
    if "weight" in obj:
        weight = expect_int(obj["weight"], join(path, "weight"))
        if weight < 1:
            raise Invalid(join(path, "weight"), f"must be a positive integer, not {weight} (omit it for the registered weight)")
    return name, weight


def _registry(result: Result[Registry, RegistryError], path: str) -> Registry:
    """A registry change the reader has already validated; a refusal still names the field."""
    if not is_successful(result):
        raise Invalid(path, str(result.failure()))
    return result.unwrap()


# --- writing --------------------------------------------------------------------------------


def _text(value: str) -> str:
    """A YAML scalar that reads back as this exact string."""
    # A letter first and then only [A-Za-z0-9.-]: never a number, a date, a list item or an anchor.
    plain = value[:1].isalpha() and value.isascii() and value.replace("-", "").replace(".", "").isalnum()
    reserved = value.lower() in ("true", "false", "yes", "no", "on", "off", "null", "y", "n", "~")
    return value if plain and not reserved else _quoted(value)


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar: printable ASCII as is, everything else escaped (YAML's ``\\U``
    takes a whole code point, where JSON's surrogate pairs would read back as two)."""

    def escaped(char: str) -> str:
        code = ord(char)
        if 0x20 <= code < 0x7F and char not in '"\\':
            return char
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"

    return '"' + "".join(escaped(char) for char in value) + '"'



def format_configuration(config: SchedulerConfiguration) -> str:
    """YAML text that :func:`decode_configuration` reads back as ``config``, commented for a reader."""
    election = config.leader_election
    if election.resource_namespace is None:
        namespace = "  # resourceNamespace: kruntimes-system   # default: the pod's own namespace; required outside a cluster"
    else:
        namespace = f"  resourceNamespace: {_text(election.resource_namespace)}"
    lines = [
        "# kruntimes scheduler --config FILE. Every field but apiVersion and kind is optional;",
        "# a flag given on the command line overrides the field it names.",
        f"apiVersion: {API_VERSION}",
        f"kind: {CONFIGURATION_KIND}",
        f"workers: {config.workers}                     # --workers",
        f"queueOrder: {_text(config.queue_order)}                # --queue-order: {' | '.join(sorted(POLICIES))}",
        f"heartbeatStaleAfter: {format_duration(config.heartbeat_stale_after)}       # --heartbeat-stale-after (0 means 15s)",
        "leaderElection:                # --leader-elect, --leader-elect-*",
        f"  leaderElect: {'true' if election.leader_elect else 'false'}",
        f"  resourceName: {_text(election.resource_name)}",
        namespace,
        f"  leaseDuration: {format_duration(election.lease_duration)}",
        f"  renewDeadline: {format_duration(election.renew_deadline)}",
        f"  retryPeriod: {format_duration(election.retry_period)}",
        "profiles:",
    ]
    for profile in config.profiles:
        registry = profile.registry
        lines += [
            f"  - schedulerName: {_text(profile.scheduler_name)}",
            "    plugins:",
            "      filter:                  # run in this order whatever a file says; disabled: [{name: ...}] removes one",
            "        enabled:" if registry.filters else "        enabled: []",
            *(f"          - name: {_text(e.name)}" for e in registry.filters),
            *_disabled(tuple(e.name for e in DEFAULT_REGISTRY.filters), registry),
            "      score:                   # a pod's total is the sum of score x weight",
            "        enabled:" if registry.scores else "        enabled: []",
        ]
        for entry in registry.scores:
            lines += [f"          - name: {_text(entry.name)}", f"            weight: {entry.weight}"]
        lines += _disabled(tuple(e.name for e in DEFAULT_REGISTRY.scores), registry)
    return "\n".join(lines) + "\n"


def _disabled(registered: tuple[str, ...], registry: Registry) -> list[str]:
    gone = [name for name in registered if name not in registry.names]
    return ["        disabled:", *(f"          - name: {_text(name)}" for name in gone)] if gone else []
