"""broker.model.format.segment_format.check_time, whose parse goes through an
LRU cache (``_parsed_time``): for any text it gives exactly what
:func:`broker.timefmt.parse` gives (offsets, fractions, lower-case letters,
leap seconds, dates out of range), the first time and every time after, and
a text it refuses it refuses again (a refusal is never cached as a time)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import timefmt
from broker.model.format.segment_format import check_time
from broker.model.indexes import TIME_MASK

ODD = [
    "2026-01-01T00:00:00.010Z", "2026-01-01T01:00:00.010+01:00", "2025-12-31T23:00:00-01:00",
    "2026-01-01T00:00:00.010z", "2026-01-01t00:00:00.010Z", "2026-12-31T23:59:60Z",
    "2026-01-01T00:00:00", "2026-01-01", "2026-01-01T00:00:00.0101Z", "2026-01-01T00:00Z",
    "2026-01-01T00:00:00.123456789Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.999Z",
    "1970-01-01T00:59:59+01:00", "9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59-01:00",
    "0001-01-01T00:00:00Z", "2026-01-01T00:00:00ZZ", "2026-01-01T00:00:00+24:00",
    "2026-01-01T00:00:00+00:00:01", " 2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z ",
    "\uff12\uff10\uff12\uff16-01-01T00:00:00Z", "", "Z", "noon",
]


def _expected(text: str) -> int | None:
    """What check_time must give for ``text`` (None: a refusal), from timefmt.parse."""
    try:
        ms = timefmt.parse(text)
    except ValueError:
        return None
    return ms if 0 <= ms <= TIME_MASK else None


def _checked(text: str) -> int | None:
    try:
        return check_time(text, "t")
    except ValueError as exc:
        assert str(exc).startswith("t "), exc
        return None


@pytest.mark.parametrize("text", ODD)
def test_check_time_gives_what_timefmt_parse_gives_every_time(text: str) -> None:
    want = _expected(text)
    assert [_checked(text) for _ in range(3)] == [want] * 3


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet="0123456789-:.+TZz ", min_size=0, max_size=32))
def test_any_text_of_time_characters_checks_as_parse_says(text: str) -> None:
    assert _checked(text) == _expected(text) == _checked(text)


def test_past_the_cache_size_times_still_check_as_parse_says() -> None:
    """More distinct times than the cache holds (4,096), then the first ones again."""
    texts = [timefmt.fmt(1_767_225_600_000 + n) for n in range(5_000)]
    assert [check_time(text, "t") for text in texts] == [timefmt.parse(t) for t in texts]
    assert [check_time(text, "t") for text in texts[:100]] == \
        [1_767_225_600_000 + n for n in range(100)]
