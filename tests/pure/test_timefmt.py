"""Times and durations survive a log round trip exactly, so a replayed cycle sees the same clock."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.times import format_duration, format_time, parse_duration, parse_time

UTC = timezone.utc


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00.123456Z", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T12:00:00.5Z", datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_rfc3339_times_parse_to_utc(text: str, value: datetime) -> None:
    parsed = parse_time(text)
    assert parsed == value
    assert parsed is not None and parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", ["", "2024-05-01", "2024-05-01T12:00:00", "yesterday", "2024-13-01T00:00:00Z", "x" * 100])
def test_dates_without_time_or_zone_are_not_times(text: str) -> None:
    assert parse_time(text) is None


def test_formatting_keeps_microseconds_only_when_there_are_any() -> None:
    assert format_time(datetime(2024, 5, 1, 12, tzinfo=UTC)) == "2024-05-01T12:00:00Z"
    assert format_time(datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC)) == "2024-05-01T12:00:00.000001Z"


@pytest.fixture
def machine_zone_kolkata() -> Iterator[None]:
    """The process's local zone at UTC+05:30, as on a machine not set to UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kolkata"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_times_are_read_and_written_in_utc_whatever_the_machine_zone(machine_zone_kolkata: None) -> None:
    assert datetime(2024, 5, 1, 12).astimezone().utcoffset() == timedelta(hours=5, minutes=30)
    parsed = parse_time("2024-05-01T14:00:00+02:00")
    assert parsed is not None and parsed.utcoffset() == timedelta(0) and parsed.hour == 12
    assert format_time(datetime(2024, 5, 1, 12, tzinfo=UTC)) == "2024-05-01T12:00:00Z"


def test_a_year_before_1000_is_written_in_four_digits() -> None:
    assert format_time(datetime(999, 5, 1, 12, tzinfo=UTC)) == "0999-05-01T12:00:00Z"


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)))
def test_time_format_then_parse_is_the_identity(value: datetime) -> None:
    assert parse_time(format_time(value)) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("15s", timedelta(seconds=15)),
        ("1m30s", timedelta(seconds=90)),
        ("1.5h", timedelta(minutes=90)),
        ("-2s", timedelta(seconds=-2)),
        ("0", timedelta(0)),
        ("250us", timedelta(microseconds=250)),
    ],
)
def test_go_durations_parse(text: str, value: timedelta) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", ["", "5", "abc", "1d", "s", "1s2", "999999999h"])
def test_malformed_or_absurd_durations_are_refused(text: str) -> None:
    assert parse_duration(text) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(microseconds=1), "1us"),
        (timedelta(microseconds=-1), "-1us"),
        (timedelta(milliseconds=-1500), "-1500ms"),
        (timedelta(minutes=2), "120s"),
    ],
)
def test_durations_are_written_in_whole_seconds_milliseconds_or_microseconds(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@given(st.timedeltas(min_value=timedelta(days=-3650), max_value=timedelta(days=3650)))
def test_duration_format_then_parse_is_the_identity(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value
