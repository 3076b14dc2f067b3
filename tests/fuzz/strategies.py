"""Hypothesis strategies for hostile Kubernetes JSON: Runs, Pods and PersistentWorkspaces.

Every generated string that could end up in a message (label values, selector
values, names) carries :data:`MARK`, so a test can tell "the input leaked into
the output" from a coincidence with the message's own words.

Any field may also hold a :class:`Hostile` value: one at or past a documented
limit (docs/spec.md, "Limits") or Python's own (4,300 digits, a double's range,
its recursion), tagged with its class. The strategies build Python values;
:func:`to_json` writes them as the JSON text an API server would send (with
literals ``json.dumps`` cannot write) and names the classes it holds, so a
test decodes them with the scheduler's own ``loads`` and reports each class
with ``hypothesis.event``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from hypothesis import strategies as st

MARK = "ZQ\u2603"
"""In every hostile label value, selector value and name: it never occurs in a message of ours."""

HOSTILE_CHARS = st.sampled_from(list('"\'{}[]\\$`<>%\n\r\t\x00 \u202e\u200b\ufeff\U0001f4a3é\u65e5/=,:;'))
ABSURD_QUANTITIES = st.sampled_from(
    [
        "1e99999", "99999999999999999999Ei", "-1", "500m", "abc", "", " 1", "1 ", "0x10", "1e-99999", "NaN", "Infinity",
        "1.5.5", "++1", "1Ki", "1e3", "1.5k", "0", "00", "9" * 400, "1" + "0" * 100 + "Ei", "\u0661", "1\x00",
    ]
)


@dataclass(frozen=True)
class RawJson:
    """A JSON literal ``json.dumps`` cannot write: an integer past Python's digits, a number
    past a double's range (``1e999``), nesting past Python's recursion."""

    text: str


@dataclass(frozen=True)
class Hostile:
    """A value at or past a limit, with its class (a key of :data:`HOSTILE`)."""

    kind: str
    value: object


def _nested(depth: int) -> RawJson:
    return RawJson('{"k":[' * depth + "0" + "]}" * depth)


HOSTILE: Final[dict[str, list[object]]] = {
    "quantity at the bounds": ["9" * 64, "1e64", "1e-64", "1e" + "0" * 124 + "64", "99999999999999999999Ei"],
    "quantity past the bounds": [
        "9" * 65, "1e65", "1e-65", "1e" + "0" * 125 + "64", "9" * 5000, "1e" + "0" * 5000 + "1", "1" * 4301,
    ],
    "duration at the bound": ["0" * 126 + "1s", "1." + "0" * 125 + "s", "2562047h47m16.854775807s", "-2562047h47m16.854775808s"],
    "duration past the bound": ["0" * 127 + "1s", "9" * 5000 + "s", "1." + "0" * 5000 + "s", "2562048h"],
    "time at the bound": ["2026-12-05T10:00:00." + "1" * 43 + "Z", "2026-12-05T10:00:00.123456789+23:59", "9999-12-31T23:59:59Z"],
    "time not RFC 3339 as Go reads it": [
        "2026-W49-6T10:00:00Z", "2026-339T10:00:00Z", "20261205T100000Z", "2026-12-05t10:00:00z", "2026-12-05T10:00Z",
        "2026-12-05T10:00:00+0100", "2026-12-05T10:00:00,5Z", "2026-12-05T10:00:00." + "1" * 44 + "Z",
    ],
    "time past Python's calendar": ["0000-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+00:01"],
    "integer past Python's digits": [RawJson("9" * 5000), RawJson("-" + "1" * 4301), RawJson("1" + "0" * 100_000)],
    "integer within Python's digits": [10**4299, -(10**4299), 2**63, -(2**63) - 1, 2**31],
    "number past a double": [float("nan"), float("inf"), float("-inf"), RawJson("1e999"), RawJson("-1e999"), 1e308, 5e-324],
    "nesting within Python's recursion": [_nested(100), _nested(300)],
    "nesting past Python's recursion": [_nested(2_000), RawJson("[" * 100_000 + "]" * 100_000)],
    "wrong type": [5, -1, True, None, [], {}, 1.5, ["x"], {"a": "b"}, [[["x"]]]],
    "long string": ["x" * 10_000, "\u00e9" * 100_000, "\u202e" * 5_000, "a-" * 2_000 + "a"],
}
"""Each class of hostile value, and the values of that class."""

_QUANTITY_KINDS: Final = ("quantity at the bounds", "quantity past the bounds", "integer past Python's digits",
                          "integer within Python's digits", "number past a double", "wrong type")
_DURATION_KINDS: Final = ("duration at the bound", "duration past the bound", "integer past Python's digits", "wrong type")
_TIME_KINDS: Final = ("time at the bound", "time not RFC 3339 as Go reads it", "time past Python's calendar",
                      "integer past Python's digits", "wrong type")


def hostile(kinds: tuple[str, ...] | None = None) -> st.SearchStrategy[Hostile]:
    """A value of one of ``kinds`` (every class when ``None``), tagged."""
    chosen = kinds if kinds is not None else tuple(HOSTILE)
    return st.sampled_from([Hostile(kind, value) for kind in chosen for value in HOSTILE[kind]])


def to_json(value: object) -> tuple[str, frozenset[str]]:
    """``value`` as JSON text, with every :class:`RawJson` written as its literal; and the
    classes of the :class:`Hostile` values it holds."""
    raws: list[str] = []
    kinds: set[str] = set()

    def ready(item: object) -> object:
        if isinstance(item, Hostile):
            kinds.add(item.kind)
            return ready(item.value)
        if isinstance(item, RawJson):
            raws.append(item.text)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(item, dict):
            return {key: ready(child) for key, child in item.items()}
        if isinstance(item, list):
            return [ready(child) for child in item]
        return item

    text = json.dumps(ready(value))
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{index}\x00"), raw, 1)
    return text, frozenset(kinds)


def marked(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: a + MARK + b, st.text(HOSTILE_CHARS, max_size=max_size // 2), st.text(max_size=max_size // 2))


def json_scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True), marked(), ABSURD_QUANTITIES,
    )


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    return st.recursive(
        json_scalars(),
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
        max_leaves=max_leaves,
    )


def deep(depth: int) -> Any:
    value: Any = MARK
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _maybe(strategy: st.SearchStrategy[Any], kinds: tuple[str, ...] | None = None) -> st.SearchStrategy[Any]:
    """A field that is usually well-formed, sometimes absent, sometimes anything at all, sometimes
    a hostile value (of ``kinds``, the classes that matter in that field; any class when ``None``)."""
    if kinds == ():
        return st.one_of(strategy, strategy, strategy, st.just(_ABSENT), json_values(6))
    return st.one_of(strategy, strategy, strategy, st.just(_ABSENT), json_values(6), hostile(kinds))


_NAME_KINDS: Final = ("long string", "wrong type")


def _identity(strategy: st.SearchStrategy[Any], identified: bool) -> st.SearchStrategy[Any]:
    """A field naming the object (name, namespace, uid): always well-formed when ``identified``."""
    return strategy if identified else _maybe(strategy, _NAME_KINDS)


class _Absent:
    pass


_ABSENT = _Absent()


def _obj(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not _ABSENT}


label_maps = st.one_of(
    st.dictionaries(st.text(max_size=20), marked(max_size=20), max_size=6),
    st.integers(200, 2000).map(lambda n: {f"k{i}/\u65e5{i}": f"{MARK}{i}" for i in range(n)}),  # huge, built cheaply
)


@st.composite
def selectors(draw: st.DrawFn) -> Any:
    match_labels = draw(_maybe(st.dictionaries(st.sampled_from(["app", "team", "zone", MARK]), marked(max_size=10), max_size=3)))
    expression = st.builds(
        lambda key, op, values: _obj(key=key, operator=op, values=values),
        _maybe(st.sampled_from(["app", "team", MARK])),
        _maybe(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "in", "Gt", MARK])),
        _maybe(st.lists(marked(max_size=10), max_size=3)),
    )
    return _obj(matchLabels=match_labels, matchExpressions=draw(_maybe(st.lists(expression, max_size=3))))


@st.composite
def terms(draw: st.DrawFn) -> Any:
    return _obj(
        labelSelector=draw(_maybe(selectors())),
        topologyKey=draw(_maybe(st.sampled_from(["kruntimes.io/runtime-pod", "zone", "", MARK]))),
    )


@st.composite
def affinities(draw: st.DrawFn) -> Any:
    def part() -> Any:
        return _obj(
            requiredDuringSchedulingIgnoredDuringExecution=draw(_maybe(st.lists(terms(), max_size=3))),
            preferredDuringSchedulingIgnoredDuringExecution=draw(
                _maybe(st.lists(st.builds(lambda w, t: _obj(weight=w, runAffinityTerm=t), _maybe(st.integers(-5, 200)), terms()), max_size=3))
            ),
        )

    return _obj(runAffinity=draw(_maybe(st.just(None).map(lambda _: part()))), runAntiAffinity=draw(_maybe(st.just(None).map(lambda _: part()))))


RUNTIMES = st.sampled_from(["python", "node", "", MARK])


@st.composite
def runs(draw: st.DrawFn, identified: bool = False) -> Any:
    """A Run as a hostile client could write it (the dev server's schema is not applied here);
    ``identified``: always a Run with a usable name, namespace and uid (its spec and status anything)."""
    name = draw(_identity(st.one_of(st.sampled_from(["r1", "r2", "r3"]), marked(max_size=30)), identified))
    requests = draw(_maybe(st.dictionaries(
        st.sampled_from(["runs", "gpu", "memory", "", "a/b", MARK]), st.one_of(ABSURD_QUANTITIES, json_scalars(), hostile(_QUANTITY_KINDS)), max_size=4,
    )))
    spec = _obj(
        runtime=draw(_maybe(RUNTIMES)),
        resources=draw(_maybe(st.just(_obj(requests=requests)))),
        affinity=draw(_maybe(affinities())),
        workspace=draw(_maybe(st.builds(lambda n, k, g: _obj(name=n, kind=k, apiGroup=g), _maybe(st.sampled_from(["ws", MARK])), _maybe(st.just("PersistentWorkspace")), _maybe(st.just("kruntimes.io"))))),
        cancelRequested=draw(_maybe(st.booleans())),
        retryPolicy=draw(_maybe(st.builds(lambda b: _obj(backoff=b), _maybe(st.sampled_from(["1s", "-1s", "99999999h", "x", "1e9s"]), _DURATION_KINDS)))),
    )
    status = _obj(
        phase=draw(_maybe(st.sampled_from(["", "Pending", "Scheduled", "Running", "Failed", MARK]))),
        assignedPod=draw(_maybe(st.sampled_from(["", "p0", "p1", MARK]))),
        attempt=draw(_maybe(st.integers(-3, 2**70), _QUANTITY_KINDS)),
        conditions=draw(_maybe(st.lists(json_values(4), max_size=3))),
        message=draw(_maybe(marked())),
    )
    meta = _obj(
        name=name,
        namespace=draw(_identity(st.just("default"), identified)),
        uid=draw(_identity(st.sampled_from(["u1", "u2", MARK]), identified)),
        labels=draw(_maybe(label_maps)),
        resourceVersion=draw(_maybe(st.sampled_from(["1", "42", MARK]))),
        creationTimestamp=draw(_maybe(st.sampled_from(["2025-01-01T00:00:00Z", "not a time", "9999-99-99T99:99:99Z"]), _TIME_KINDS)),
    )
    whole = _obj(apiVersion="kruntimes.io/v1alpha1", kind="Run", metadata=meta, spec=spec, status=status)
    nested = _obj(apiVersion="kruntimes.io/v1alpha1", kind="Run", metadata=meta, spec=deep(draw(st.integers(50, 400))))
    if identified:
        return draw(st.sampled_from([whole, whole, whole, nested]))
    return draw(st.one_of(st.just(whole), st.just(nested), json_values()))


@st.composite
def plain_runs(draw: st.DrawFn) -> Any:
    """A well-formed Pending Run of runtime ``python`` whose request, backoff, creation time,
    attempt and labels may hold a hostile value: a cycle must bind it, keep it waiting or fail
    it, whichever the value calls for."""
    requests = draw(st.one_of(st.just(_ABSENT), st.dictionaries(
        st.sampled_from(["runs", "gpu"]),
        st.one_of(st.sampled_from(["1", "0", "2", "500m"]), hostile(("quantity at the bounds", "quantity past the bounds", "integer past Python's digits"))),
        max_size=2,
    )))
    spec = _obj(
        runtime="python",
        resources=_ABSENT if requests is _ABSENT else {"requests": requests},
        retryPolicy=draw(st.one_of(st.just(_ABSENT), hostile(_DURATION_KINDS).map(lambda backoff: {"backoff": backoff}))),
    )
    meta = _obj(
        name=draw(st.sampled_from(["a1", "a2", "a3"])),
        namespace="default",
        uid=draw(st.sampled_from(["ua1", "ua2", "ua3"])),
        creationTimestamp=draw(st.one_of(st.just("2024-12-31T23:00:00Z"), hostile(_TIME_KINDS))),
        labels=draw(st.one_of(st.just({"app": "a"}), hostile(("long string", "wrong type")).map(lambda value: {"app": value}))),
    )
    status = _obj(attempt=draw(st.one_of(st.just(_ABSENT), hostile(("integer past Python's digits", "integer within Python's digits", "number past a double")))))
    return _obj(apiVersion="kruntimes.io/v1alpha1", kind="Run", metadata=meta, spec=spec, status=status)


@st.composite
def healthy_pods(draw: st.DrawFn) -> Any:
    """A Running, Ready Runtime Pod of ``python`` whose heartbeat time and capacity annotations
    may hold a hostile value: stale when the time is not RFC 3339, the default capacity for an
    annotation past the bounds."""
    name = draw(st.sampled_from(["h0", "h1"]))
    probe = draw(st.one_of(st.just("2025-01-01T00:00:00Z"), hostile(_TIME_KINDS)))
    capacity = draw(st.one_of(st.sampled_from(["4", "1"]), hostile(_QUANTITY_KINDS)))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}", "labels": {"runtime": "python"},
                     "annotations": {"kruntimes.io/capacity.runs": capacity, "kruntimes.io/capacity.gpu": capacity}},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": probe},
        ]},
    }


@st.composite
def pods(draw: st.DrawFn, identified: bool = False) -> Any:
    """A Pod as a hostile client could write it; ``identified``: always a Pod with a usable name,
    namespace and uid."""
    annotations = draw(
        _maybe(
            st.dictionaries(
                st.sampled_from(["kruntimes.io/capacity.runs", "kruntimes.io/capacity.gpu", "kruntimes.io/capacity.", "kruntimes.io/capacity.a/b", "x"]),
                st.one_of(ABSURD_QUANTITIES, json_scalars(), hostile(_QUANTITY_KINDS)),
                max_size=4,
            )
        )
    )
    conditions = draw(
        _maybe(
            st.lists(
                st.one_of(
                    st.builds(lambda t, s, p: _obj(type=t, status=s, lastProbeTime=p),
                              st.sampled_from(["Ready", "kruntimes.io/RuntimedReady"]), _maybe(st.sampled_from(["True", "False", True])),
                              _maybe(st.sampled_from(["2025-01-01T00:00:00Z", "2999-01-01T00:00:00Z", "yesterday", 5]), _TIME_KINDS)),
                    json_values(4),
                ),
                max_size=4,
            )
        )
    )
    meta = _obj(
        name=draw(_identity(st.sampled_from(["p0", "p1", MARK]), identified)),
        namespace=draw(_identity(st.just("default"), identified)),
        uid=draw(_identity(st.sampled_from(["pu0", "pu1"]), identified)),
        labels=draw(_maybe(st.one_of(st.just({"runtime": "python"}), label_maps))),
        annotations=annotations,
        deletionTimestamp=draw(_maybe(st.just("2025-01-01T00:00:00Z"))),
    )
    pod = _obj(apiVersion="v1", kind="Pod", metadata=meta, status=_obj(phase=draw(_maybe(st.sampled_from(["Running", "Running", "Pending"]))), conditions=conditions))
    return pod if identified else draw(st.one_of(st.just(pod), json_values()))


@st.composite
def workspaces(draw: st.DrawFn, identified: bool = False) -> Any:
    """A PersistentWorkspace as a hostile client could write it; ``identified``: always one with a
    usable name, namespace and uid."""
    meta = _obj(
        name=draw(_identity(st.just("ws"), identified)),
        namespace=draw(_identity(st.just("default"), identified)),
        uid=draw(_identity(st.just("wu"), identified)),
    )
    workspace = _obj(
        apiVersion="kruntimes.io/v1alpha1", kind="PersistentWorkspace", metadata=meta,
        spec=draw(_maybe(st.builds(lambda r, m: _obj(runtime=r, mode=m), _maybe(RUNTIMES), _maybe(st.sampled_from(["RuntimePodLocal", "", MARK]))))),
        status=draw(_maybe(st.builds(lambda p, b: _obj(phase=p, boundPod=b), _maybe(st.sampled_from(["Bound", "Lost", "Pending", MARK])), _maybe(st.sampled_from(["p0", "", MARK]))))),
    )
    return workspace if identified else draw(st.one_of(st.just(workspace), json_values()))
