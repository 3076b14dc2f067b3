"""Run specs the CRD admits and the scheduler fails, and valid ones near them: one table for two tests.

``tests/pure/test_run_examples.py`` checks that the scheduler fails each invalid example with
exactly its reason and message and fails no valid one; ``tests/realserver/test_admission_policy.py``
checks that deploy/components/admission-policy refuses each invalid example with that same message
on the real API server and lets every valid one in. The policy and the scheduler cannot drift
apart without one of the two failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

Json = dict[str, Any]

LABEL_KEY_RULE: Final = (
    "an optional DNS subdomain prefix and /, then at most 63 characters: "
    "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)
LABEL_VALUE_RULE: Final = (
    "empty or at most 63 characters: alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)
BOUNDS: Final = "a quantity is read when it has at most 128 characters, 64 digits and an exponent within ±64"
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
TOPOLOGY: Final = "kruntimes.io/runtime-pod"


@dataclass(frozen=True, slots=True)
class Example:
    name: str
    """What the example shows (the test's id)."""
    spec: Json
    """``spec`` beside ``runtime`` and ``mode``."""
    reason: str | None = None
    """The scheduler's ``Failed`` reason; ``None``: valid, the scheduler does not fail it."""
    message: str = ""
    """The scheduler's status message, which the admission policy answers too."""


def term(*expressions: Json, labels: dict[str, str] | None = None) -> Json:
    selector: Json = {}
    if labels is not None:
        selector["matchLabels"] = labels
    if expressions:
        selector["matchExpressions"] = list(expressions)
    return {"labelSelector": selector, "topologyKey": TOPOLOGY}


def expression(key: str, operator: str, *values: str) -> Json:
    found: Json = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def near(*terms: Json) -> Json:
    return {"affinity": {"runAffinity": {REQUIRED: list(terms)}}}


def requests(**entries: str | int) -> Json:
    return named_requests(entries)


def named_requests(entries: dict[str, str | int]) -> Json:
    return {"resources": {"requests": entries}}


def affinity_message(detail: str) -> str:
    return f"invalid run affinity: {detail}"


def bad_request(name: str) -> str:
    return f'resource request "{name}" must be a non-negative integer'


FIRST: Final = f"runAffinity.{REQUIRED}[0].labelSelector"
GOOD: Final = expression("app", "In", "web")

INVALID: Final[tuple[Example, ...]] = (
    # --- requests: not a non-negative integer (InvalidResources) ---
    Example("negative request", requests(runs="-1"), "InvalidResources", bad_request("runs")),
    Example("negative request written as a number", requests(cpu=-2), "InvalidResources", bad_request("cpu")),
    Example("milli request", requests(cpu="500m"), "InvalidResources", bad_request("cpu")),
    Example("fractional request", requests(cpu="1.5"), "InvalidResources", bad_request("cpu")),
    Example("fraction left after a decimal suffix", requests(cpu="1.2345k"), "InvalidResources", bad_request("cpu")),
    Example("negative exponent", requests(cpu="1e-3"), "InvalidResources", bad_request("cpu")),
    Example("fraction left after a binary suffix", requests(memory="0.3Ki"), "InvalidResources", bad_request("memory")),
    Example("half a unit after a binary suffix", requests(memory="0.00048828125Ki"), "InvalidResources", bad_request("memory")),
    Example("exponent with a fraction (the CRD's pattern admits it)", requests(cpu="1e1.5"), "InvalidResources", bad_request("cpu")),
    Example(
        "the first bad request by name is named",
        requests(zeta="-1", alpha="500m", beta="2"),
        "InvalidResources",
        bad_request("alpha"),
    ),
    Example(
        "a request name longer than any resource name is told by its length",
        named_requests({"r" * 320: "-1"}),
        "InvalidResources",
        "a resource request (named with 320 characters) must be a non-negative integer",
    ),
    # --- requests past the bounds, backoff past its length (InvalidSpec) ---
    Example(
        "request with more than 64 digits",
        requests(cpu="1" * 65),
        "InvalidSpec",
        f'spec.resources.requests "cpu" has more than 64 digits ({BOUNDS})',
    ),
    Example(
        "request with an exponent past 64",
        requests(cpu="1e65"),
        "InvalidSpec",
        f'spec.resources.requests "cpu" has an exponent beyond ±64 ({BOUNDS})',
    ),
    Example(
        "request with a long exponent past 64",
        requests(cpu="1e-0000000000000000000000000000000000000000065"),
        "InvalidSpec",
        f'spec.resources.requests "cpu" has an exponent beyond ±64 ({BOUNDS})',
    ),
    Example(
        "request longer than 128 characters",
        requests(cpu="0" * 128 + "1"),
        "InvalidSpec",
        f'spec.resources.requests "cpu" is longer than 128 characters ({BOUNDS})',
    ),
    Example(
        "a request past the bounds comes before one that is merely bad",
        requests(alpha="-1", zeta="1e65"),
        "InvalidSpec",
        f'spec.resources.requests "zeta" has an exponent beyond ±64 ({BOUNDS})',
    ),
    Example(
        "backoff longer than 128 characters",
        {"retryPolicy": {"backoff": "0" * 127 + "1s"}},
        "InvalidSpec",
        "spec.retryPolicy.backoff is longer than 128 characters (a Go duration such as 500ms, 15s or 1m30s)",
    ),
    Example(
        "a request past the bounds comes before a long backoff",
        {**requests(cpu="1e65"), "retryPolicy": {"backoff": "0" * 127 + "1s"}},
        "InvalidSpec",
        f'spec.resources.requests "cpu" has an exponent beyond ±64 ({BOUNDS})',
    ),
    # --- affinity (InvalidAffinity) ---
    Example(
        "unknown operator",
        near(term(expression("app", "Foo", "web"))),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchExpressions[0].operator must be one of In, NotIn, Exists, DoesNotExist"),
    ),
    Example(
        "In without values",
        near(term(expression("app", "In"))),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchExpressions[0].values must be non-empty for operator In"),
    ),
    Example(
        "NotIn with an empty list of values",
        near(term({"key": "app", "operator": "NotIn", "values": []})),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchExpressions[0].values must be non-empty for operator NotIn"),
    ),
    Example(
        "Exists with values",
        near(term(expression("app", "Exists", "web"))),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchExpressions[0].values must be empty for operator Exists"),
    ),
    Example(
        "empty expression key",
        near(term(expression("", "Exists"))),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchExpressions[0].key must be a non-empty string"),
    ),
    Example(
        "expression key with a space",
        near(term(GOOD, expression("a b", "Exists"))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[1].key "a b" is not a valid label key ({LABEL_KEY_RULE})'),
    ),
    Example(
        "expression key with an upper-case prefix",
        near(term(expression("Example.com/app", "Exists"))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[0].key "Example.com/app" is not a valid label key ({LABEL_KEY_RULE})'),
    ),
    Example(
        "expression key with a 64-character name",
        near(term(expression("a" * 64, "Exists"))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[0].key "{"a" * 64}" is not a valid label key ({LABEL_KEY_RULE})'),
    ),
    Example(
        "expression key with a 254-character prefix",
        near(term(expression("a" * 254 + "/app", "Exists"))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[0].key "{"a" * 254}/app" is not a valid label key ({LABEL_KEY_RULE})'),
    ),
    Example(
        "expression key longer than any valid key is told by its length",
        near(term(expression("k" * 400, "Exists"))),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchExpressions[0].key of 400 characters is not a valid label key ({LABEL_KEY_RULE})"),
    ),
    Example(
        "a key is quoted with JSON's escapes",
        near(term(expression('a"b\\c\nd\x01e\x07', "Exists"))),
        "InvalidAffinity",
        affinity_message(
            f'{FIRST}.matchExpressions[0].key "a\\"b\\\\c\\nd\\u0001e\\u0007" is not a valid label key ({LABEL_KEY_RULE})'
        ),
    ),
    Example(
        "expression value with a slash",
        near(term(expression("app", "In", "web", "a/b"))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[0].values[1] of key "app" is not a valid label value ({LABEL_VALUE_RULE})'),
    ),
    Example(
        "expression value of 64 characters",
        near(term(expression("app", "NotIn", "v" * 64))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[0].values[0] of key "app" is not a valid label value ({LABEL_VALUE_RULE})'),
    ),
    Example(
        "matchLabels key starting with a dash",
        near(term(labels={"-app": "web"})),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchLabels key "-app" is not a valid label key ({LABEL_KEY_RULE})'),
    ),
    Example(
        "matchLabels value ending with a dot",
        near(term(labels={"app": "web."})),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchLabels value of key "app" is not a valid label value ({LABEL_VALUE_RULE})'),
    ),
    Example(
        "matchLabels with an empty key",
        near(term(labels={"": "web"})),
        "InvalidAffinity",
        affinity_message(f"{FIRST}.matchLabels must be a map of strings"),
    ),
    Example(
        "matchLabels are read before matchExpressions",
        near(term(expression("app", "Foo"), labels={"app": "web."})),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchLabels value of key "app" is not a valid label value ({LABEL_VALUE_RULE})'),
    ),
    Example(
        "the first problem in reading order is named, whatever its kind",
        near(term(expression("app", "In", "a/b"), expression("tier", "Foo"))),
        "InvalidAffinity",
        affinity_message(f'{FIRST}.matchExpressions[0].values[0] of key "app" is not a valid label value ({LABEL_VALUE_RULE})'),
    ),
    Example(
        "a repeated bad term is named where it first appears",
        near(term(GOOD), term(expression("app", "Foo")), term(expression("app", "Foo"))),
        "InvalidAffinity",
        affinity_message(f"runAffinity.{REQUIRED}[1].labelSelector.matchExpressions[0].operator must be one of In, NotIn, Exists, DoesNotExist"),
    ),
    Example(
        "a preferred anti-affinity term is read last, through its runAffinityTerm",
        {
            "affinity": {
                "runAffinity": {REQUIRED: [term(GOOD)], PREFERRED: [{"weight": 5, "runAffinityTerm": term(GOOD)}]},
                "runAntiAffinity": {
                    REQUIRED: [term(GOOD)],
                    PREFERRED: [
                        {"weight": 1, "runAffinityTerm": term(GOOD)},
                        {"weight": 1, "runAffinityTerm": term(GOOD, GOOD, expression("app", "DoesNotExist", "x"))},
                    ],
                },
            }
        },
        "InvalidAffinity",
        affinity_message(
            f"runAntiAffinity.{PREFERRED}[1].runAffinityTerm.labelSelector.matchExpressions[2].values"
            " must be empty for operator DoesNotExist"
        ),
    ),
    Example(
        "bad requests come before bad affinity",
        {**requests(cpu="500m"), **near(term(expression("app", "Foo")))},
        "InvalidResources",
        bad_request("cpu"),
    ),
)

VALID: Final[tuple[Example, ...]] = (
    Example("whole requests in every notation", requests(runs="2", cpu="1.5k", a=".5k", b="5.", c="+3", d="1E", e="7", f=3)),
    Example("zero, however signed", requests(cpu="-0", memory="-0.0k", disk="0e-5")),
    Example("whole values after a binary suffix", requests(memory="1.5Mi", small="0.0009765625Ki", big="0.0009765625Mi")),
    Example("huge requests within the bounds (they never fit)", requests(cpu="1e64", memory="9" * 64, disk="1" + "0" * 63 + "Ei")),
    Example("a 128-character quantity (its exponent written with leading zeros)", requests(cpu="1e+" + "0" * 124 + "1")),
    Example("a 128-character backoff", {"retryPolicy": {"backoff": "0" * 126 + "1s"}}),
    Example("a backoff Go cannot read counts as absent", {"retryPolicy": {"backoff": "soon"}}),
    Example(
        "every operator, prefixed keys and empty values",
        near(
            term(
                expression("example.com/app", "In", "web", ""),
                expression("tier", "NotIn", "db"),
                expression("a" * 253 + "/" + "b" * 63, "Exists"),
                expression("gone", "DoesNotExist"),
                labels={"app.kubernetes.io/name": "", "x": "v" * 63},
            )
        ),
    ),
    Example("a cancelled Run is cancelled, not failed", {"cancelRequested": True, **near(term(expression("app", "Foo")))}),
)
