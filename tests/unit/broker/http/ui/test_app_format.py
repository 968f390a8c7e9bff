"""How the dashboard's pages say durations and times (broker.http.ui.app): durations
without a trailing zero unit, times relative to the page's clock with the exact
UTC time on hover, a host:port for the header."""

from __future__ import annotations

import pytest
from jinja2 import Environment

from broker import timefmt
from broker.http.ui.app import age, host_of, relative, when

NOW = 1_795_000_000_000


@pytest.mark.parametrize(("seconds", "said"), [
    (None, "—"), (0, "0 s"), (0.5, "0.5 s"), (42, "42 s"), (60, "1 min"), (61, "1 min 1 s"),
    (192, "3 min 12 s"), (3600, "1 h"), (7500, "2 h 5 min"), (86400, "1 d"), (90000, "1 d 1 h"),
])
def test_age(seconds: float | None, said: str) -> None:
    assert age(seconds) == said


@pytest.mark.parametrize(("ago_ms", "said"), [
    (0, "just now"), (999, "just now"), (1000, "1 s ago"), (59_999, "59 s ago"),
    (60_000, "1 min ago"), (3_599_000, "59 min ago"), (3_600_000, "1 h ago"),
    (3 * 86_400_000, "3 d ago"), (-5000, "in 5 s"), (-120_000, "in 2 min"),
])
def test_relative(ago_ms: int, said: str) -> None:
    assert relative(NOW - ago_ms, NOW) == said


def test_when_is_a_time_element_with_the_exact_utc_time_on_hover() -> None:
    env = Environment(autoescape=True)
    env.filters["when"] = when
    page = env.from_string("{{ at | when }}")
    at = timefmt.fmt(NOW - 192_000)
    assert page.render(at=at, now_ms=NOW) == (
        f'<time datetime="{at}" title="{at[:10]} {at[11:23]} UTC">3 min ago</time>')
    assert page.render(at=None, now_ms=NOW) == "—"
    assert page.render(at="<b>\u202e", now_ms=NOW) == "&lt;b&gt;\\u202e"  # not a time


def test_host_of() -> None:
    assert host_of("http://127.0.0.1:8765") == "127.0.0.1:8765"
    assert host_of("") == "" and host_of(None) == "" and host_of("http://[::1") == ""
