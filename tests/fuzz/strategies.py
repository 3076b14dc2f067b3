"""Hypothesis strategies for hostile Kubernetes JSON: Runs, Pods and PersistentWorkspaces.

Every generated string that could end up in a message (label values, selector
values, names) carries :data:`MARK`, so a test can tell "the input leaked into
the output" from a coincidence with the message's own words.
"""

from __future__ import annotations

from typing import Any

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


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that is usually well-formed, sometimes absent, sometimes anything at all."""
    return st.one_of(strategy, strategy, strategy, st.just(_ABSENT), json_values(6))


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
def runs(draw: st.DrawFn) -> Any:
    """A Run as a hostile client could write it (the dev server's schema is not applied here)."""
    name = draw(_maybe(st.one_of(st.sampled_from(["r1", "r2"]), marked(max_size=30))))
    requests = draw(_maybe(st.dictionaries(st.sampled_from(["runs", "gpu", "memory", "", "a/b", MARK]), st.one_of(ABSURD_QUANTITIES, json_scalars()), max_size=4)))
    spec = _obj(
        runtime=draw(_maybe(RUNTIMES)),
        resources=draw(_maybe(st.just(_obj(requests=requests)))),
        affinity=draw(_maybe(affinities())),
        workspace=draw(_maybe(st.builds(lambda n, k, g: _obj(name=n, kind=k, apiGroup=g), _maybe(st.sampled_from(["ws", MARK])), _maybe(st.just("PersistentWorkspace")), _maybe(st.just("kruntimes.io"))))),
        cancelRequested=draw(_maybe(st.booleans())),
        retryPolicy=draw(_maybe(st.builds(lambda b: _obj(backoff=b), _maybe(st.sampled_from(["1s", "-1s", "99999999h", "x", "1e9s"]))))),
    )
    status = _obj(
        phase=draw(_maybe(st.sampled_from(["", "Pending", "Scheduled", "Running", "Failed", MARK]))),
        assignedPod=draw(_maybe(st.sampled_from(["", "p0", "p1", MARK]))),
        attempt=draw(_maybe(st.integers(-3, 2**70))),
        conditions=draw(_maybe(st.lists(json_values(4), max_size=3))),
        message=draw(_maybe(marked())),
    )
    meta = _obj(
        name=name,
        namespace=draw(_maybe(st.just("default"))),
        uid=draw(_maybe(st.sampled_from(["u1", "u2", MARK]))),
        labels=draw(_maybe(label_maps)),
        resourceVersion=draw(_maybe(st.sampled_from(["1", "42", MARK]))),
        creationTimestamp=draw(_maybe(st.sampled_from(["2025-01-01T00:00:00Z", "not a time", "9999-99-99T99:99:99Z"]))),
    )
    return draw(
        st.one_of(
            st.just(_obj(apiVersion="kruntimes.io/v1alpha1", kind="Run", metadata=meta, spec=spec, status=status)),
            st.just(_obj(apiVersion="kruntimes.io/v1alpha1", kind="Run", metadata=meta, spec=deep(draw(st.integers(50, 400))))),
            json_values(),
        )
    )


@st.composite
def pods(draw: st.DrawFn) -> Any:
    annotations = draw(
        _maybe(
            st.dictionaries(
                st.sampled_from(["kruntimes.io/capacity.runs", "kruntimes.io/capacity.gpu", "kruntimes.io/capacity.", "kruntimes.io/capacity.a/b", "x"]),
                st.one_of(ABSURD_QUANTITIES, json_scalars()),
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
                              _maybe(st.sampled_from(["2025-01-01T00:00:00Z", "2999-01-01T00:00:00Z", "yesterday", 5]))),
                    json_values(4),
                ),
                max_size=4,
            )
        )
    )
    meta = _obj(
        name=draw(_maybe(st.sampled_from(["p0", "p1", MARK]))),
        namespace=draw(_maybe(st.just("default"))),
        uid=draw(_maybe(st.sampled_from(["pu0", "pu1"]))),
        labels=draw(_maybe(st.one_of(st.just({"runtime": "python"}), label_maps))),
        annotations=annotations,
        deletionTimestamp=draw(_maybe(st.just("2025-01-01T00:00:00Z"))),
    )
    return draw(
        st.one_of(
            st.just(_obj(apiVersion="v1", kind="Pod", metadata=meta, status=_obj(phase=draw(_maybe(st.sampled_from(["Running", "Pending"]))), conditions=conditions))),
            json_values(),
        )
    )


@st.composite
def workspaces(draw: st.DrawFn) -> Any:
    meta = _obj(name=draw(_maybe(st.just("ws"))), namespace=draw(_maybe(st.just("default"))), uid=draw(_maybe(st.just("wu"))))
    return draw(
        st.one_of(
            st.just(
                _obj(
                    apiVersion="kruntimes.io/v1alpha1", kind="PersistentWorkspace", metadata=meta,
                    spec=draw(_maybe(st.builds(lambda r, m: _obj(runtime=r, mode=m), _maybe(RUNTIMES), _maybe(st.sampled_from(["RuntimePodLocal", "", MARK]))))),
                    status=draw(_maybe(st.builds(lambda p, b: _obj(phase=p, boundPod=b), _maybe(st.sampled_from(["Bound", "Lost", "Pending", MARK])), _maybe(st.sampled_from(["p0", "", MARK]))))),
                )
            ),
            json_values(),
        )
    )
