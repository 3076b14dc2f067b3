"""SPEC §1 "Limits on what the API hands us": every value is read within bounded work.

A quantity, a duration or a time the Kubernetes grammar accepts but past the documented
bounds (docs/spec.md, "Limits") is invalid: a Run carrying one ends ``Failed`` with
``InvalidSpec`` naming the field, a pod annotation carrying one is ignored, a heartbeat
time that is not RFC 3339 (as Go reads it) is stale. Python refuses to turn more than
4,300 digits into an ``int``: no value reaches ``int()`` unbounded.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kruntimes.pure.model.objects import DEFAULT_CAPACITY
from kruntimes.pure.model.plan import Fail, Wait
from kruntimes.pure.model.quantity import MAX_LENGTH, parse_quantity
from kruntimes.pure.model.times import MAX_DURATION_LENGTH, MAX_TIME_LENGTH, parse_duration, parse_time
from kruntimes.pure.readers.json import MAX_DEPTH, OverlongNumber, describe, loads
from kruntimes.pure.readers.kube import decode_pod, decode_run
from tests.builders import decoded_pod, decoded_run, pod_json, run_json
from tests.pure.planning_world import plan, slot, snapshot

PAST_PYTHON = 5_000
"""More digits than Python's ``int()`` converts (4,300)."""
UTC = timezone.utc

# --- quantities -------------------------------------------------------------------------------


def test_a_request_with_a_5000_digit_exponent_fails_the_run_as_invalid_spec_naming_the_request() -> None:
    run = decoded_run("r", requests={"cpu": "1e" + "0" * PAST_PYTHON + "1"})
    planned = plan(snapshot(run, (slot("p1", {"runs": "2", "cpu": "8"}),)))
    assert isinstance(planned, Fail) and planned.reason == "InvalidSpec"
    assert planned.message.startswith('spec.resources.requests "cpu" is longer than 128 characters')
    assert len(planned.message) < 300


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("9" * PAST_PYTHON, "is longer than 128 characters"),
        ("1" + "0" * 64, "has more than 64 digits"),
        ("1e65", "has an exponent beyond ±64"),
        ("1e-65", "has an exponent beyond ±64"),
        ("1e" + "9" * 100, "has an exponent beyond ±64"),
    ],
)
def test_a_request_past_the_quantity_bounds_fails_the_run_as_invalid_spec(text: str, why: str) -> None:
    run = decoded_run("r", requests={"runs": "1", "gpu": text})
    planned = plan(snapshot(run, (slot("p1"),)))
    assert planned == Fail(
        "InvalidSpec",
        f'spec.resources.requests "gpu" {why} '
        "(a quantity is read when it has at most 128 characters, 64 digits and an exponent within ±64)",
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e0000000003", 1000), ("9" * 64, int("9" * 64)), ("1e64", 10**64), ("+" + "0" * 62 + "7", 7)],
)
def test_quantities_within_the_bounds_keep_their_value(text: str, value: int) -> None:
    assert len(text) <= MAX_LENGTH
    assert parse_quantity(text) == value


def test_a_huge_request_within_the_bounds_is_valid_and_simply_never_fits() -> None:
    run = decoded_run("r", requests={"runs": "1e64"})
    assert isinstance(plan(snapshot(run, (slot("p1"),))), Wait)


def test_a_request_that_is_not_a_quantity_is_still_invalid_resources() -> None:
    run = decoded_run("r", requests={"cpu": "1e"})
    assert plan(snapshot(run, (slot("p1"),))) == Fail("InvalidResources", 'resource request "cpu" must be a non-negative integer')


def test_a_capacity_annotation_past_the_bounds_is_ignored_and_the_default_applies() -> None:
    pod = decoded_pod(
        "p1", capacity={"cpu": "1e" + "0" * PAST_PYTHON + "1", "runs": "9" * PAST_PYTHON, "gpu": "1e65", "memory": "2Gi"}
    )
    assert dict(pod.capacity) == {**DEFAULT_CAPACITY, "memory": 2 * 1024**3}


# --- durations ---------------------------------------------------------------------------------


def test_a_backoff_of_5000_digits_fails_the_run_as_invalid_spec_naming_the_field() -> None:
    run = decoded_run("r", backoff="9" * PAST_PYTHON + "s")
    assert plan(snapshot(run, (slot("p1"),))) == Fail(
        "InvalidSpec", "spec.retryPolicy.backoff is longer than 128 characters (a Go duration such as 500ms, 15s or 1m30s)"
    )


def test_a_backoff_within_the_bound_that_go_refuses_still_counts_as_absent() -> None:
    run = decoded_run("r", backoff="9" * (MAX_DURATION_LENGTH - 1) + "s")
    assert run.spec_error is None and run.retry_backoff is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0" * 100 + "1s", timedelta(seconds=1)),  # Go reads leading zeros
        ("1." + "0" * 100 + "1s", timedelta(seconds=1)),  # and fraction digits past its precision
        ("0" * (MAX_DURATION_LENGTH - 2) + "1s", timedelta(seconds=1)),  # the bound itself
    ],
)
def test_durations_within_the_bound_read_as_go_reads_them(text: str, value: timedelta) -> None:
    assert len(text) <= MAX_DURATION_LENGTH
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", ["9" * PAST_PYTHON + "s", "0" * PAST_PYTHON + "1s", "1." + "0" * PAST_PYTHON + "s"])
def test_a_duration_longer_than_the_bound_is_refused_unread(text: str) -> None:
    assert parse_duration(text) is None


# --- times ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2026-W49-6T10:00:00Z",  # ISO 8601 week date
        "2026-339T10:00:00Z",  # ordinal date
        "20261205T100000Z",  # basic format
        "2026-12-05 10:00:00Z",  # a space for the T
        "2026-12-05t10:00:00Z",  # Go wants the upper-case T and Z
        "2026-12-05T10:00:00z",
        "2026-12-05T10:00Z",  # no seconds
        "2026-12-05T10Z",
        "2026-12-05T10:00:00",  # no zone
        "2026-12-05T10:00:00+01",
        "2026-12-05T10:00:00+0100",
        "2026-12-05T10:00:00,5Z",
        "2026-12-05T10:00:00.Z",
        "2026-12-05T24:00:00Z",
        "2026-12-05T10:00:60Z",
        "2026-02-29T10:00:00Z",  # not a leap year
        "2026-12-05T10:00:00+24:00",
        "２０２６-12-05T10:00:00Z",  # digits other than ASCII
        "+2026-12-05T10:00:00Z",
        "0000-01-01T00:00:00Z",  # Go reads year 0; Python holds no such date: refused, not raised
        "2026-12-05T10:00:00." + "0" * 100 + "Z",  # longer than the bound
    ],
)
def test_a_time_go_would_not_read_as_rfc_3339_is_refused(text: str) -> None:
    assert parse_time(text) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2026-12-05T10:00:00Z", datetime(2026, 12, 5, 10, tzinfo=UTC)),
        ("2026-12-05T10:00:00.123456789Z", datetime(2026, 12, 5, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-12-05T11:30:00+01:30", datetime(2026, 12, 5, 10, tzinfo=UTC)),
        ("2026-12-05T10:00:00-00:00", datetime(2026, 12, 5, 10, tzinfo=UTC)),
        ("2024-02-29T23:59:59.5-23:59", datetime(2024, 3, 1, 23, 58, 59, 500000, tzinfo=UTC)),
        ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_rfc_3339_times_as_go_writes_them_are_read(text: str, value: datetime) -> None:
    assert parse_time(text) == value


def test_a_time_as_long_as_the_bound_is_read() -> None:
    text = "2026-12-05T10:00:00.5" + "0" * (MAX_TIME_LENGTH - 22) + "Z"
    assert len(text) == MAX_TIME_LENGTH
    assert parse_time(text) == datetime(2026, 12, 5, 10, 0, 0, 500000, tzinfo=UTC)


@pytest.mark.parametrize("text", ["9999-12-31T23:59:59-00:01", "0001-01-01T00:00:00+00:01"])
def test_a_time_whose_offset_leaves_the_calendar_is_refused_not_raised(text: str) -> None:
    assert parse_time(text) is None


def test_a_heartbeat_written_as_an_iso_week_date_is_stale() -> None:
    # NOW (2024-05-01, a Wednesday) in ISO week notation: Python's fromisoformat reads it, Go does not
    week_date_now = "2024-W18-3T12:00:00Z"
    run = decoded_run("r")
    assert isinstance(plan(snapshot(run, (slot("p1", heartbeat_at=week_date_now),))), Wait)


# --- JSON numbers past Python's limit -----------------------------------------------------------------


def test_a_json_integer_longer_than_python_converts_decodes_to_a_value_no_field_accepts() -> None:
    text = '{"a": ' + "9" * PAST_PYTHON + ', "b": [1, -' + "1" * PAST_PYTHON + "]}"
    assert loads(text) == {"a": OverlongNumber(PAST_PYTHON), "b": [1, OverlongNumber(PAST_PYTHON)]}
    assert describe(OverlongNumber(PAST_PYTHON)) == "a number of 5000 digits"


def test_a_value_nested_past_pythons_recursion_is_read_as_null_past_512_levels() -> None:
    # json.loads raises RecursionError just under 1,000 levels: one such object would fail a whole list
    deep = '{"k": ' * 100_000 + '"[{\\"}]"' + "}" * 100_000
    document = loads('{"items": [{"name": "a"}, ' + deep + ', {"name": "b"}]}')
    assert isinstance(document, dict)
    first, nested, last = document["items"]
    assert (first, last) == ({"name": "a"}, {"name": "b"})
    for _ in range(MAX_DEPTH - 3):  # levels 1 and 2 are the document and its list: this is level 512
        nested = nested["k"]
    assert nested == {"k": None}


def test_a_document_nested_past_pythons_recursion_and_not_closed_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        loads("[" * 100_000)


def test_a_run_body_with_a_5000_digit_request_fails_as_invalid_spec_and_a_huge_unread_number_is_ignored() -> None:
    body = json.dumps(run_json("r", requests={"cpu": "__N__"}))
    hostile = loads(body.replace('"__N__"', "9" * PAST_PYTHON))
    run = decode_run(hostile).unwrap()
    assert isinstance(plan(snapshot(run, (slot("p1"),))), Fail)
    assert run.spec_error is not None and run.spec_error.startswith('spec.resources.requests "cpu"')
    ignored = json.dumps(run_json("r2", attempt=7)).replace('"attempt": 7', '"attempt": ' + "9" * PAST_PYTHON)
    ignored = ignored.replace('"spec": {', '"spec": {"timeoutSeconds": ' + "9" * PAST_PYTHON + ", ")
    quiet = decode_run(loads(ignored)).unwrap()
    assert quiet.spec_error is None and quiet.status.attempt == 0
    assert plan(snapshot(quiet, (slot("p1"),))) == plan(snapshot(decoded_run("r2"), (slot("p1"),)))


def test_a_pod_body_with_huge_numbers_decodes_with_its_default_capacity() -> None:
    body = json.dumps(pod_json("p1")).replace('"spec": {', '"spec": {"priority": ' + "9" * PAST_PYTHON + ", ")
    pod = decode_pod(loads(body)).unwrap()
    assert dict(pod.capacity) == dict(DEFAULT_CAPACITY)
