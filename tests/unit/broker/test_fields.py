"""broker.fields: one check of a field's value for the broker
(broker.model.checks) and the client (osqueue_spark.args). Both take and
refuse the same values, in the same words; a value that passes comes back as
given."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker import fields
from broker.errors import InvalidRequest
from broker.limits import MAX_ATTEMPTS, MAX_DELAY_S, MAX_KEY_CHARS, MAX_PRIORITY
from broker.model.checks import job_options as broker_job_options
from broker.wire import ExactNumber
from osqueue_spark.args import InvalidArgument
from osqueue_spark.args import job_options as client_job_options

VALUES: dict[str, list[Any]] = {
    "priority": [0, -MAX_PRIORITY, MAX_PRIORITY, MAX_PRIORITY + 1, 2**70, 1.5, True, "1", [1]],
    "delay_s": [0, 0.0, 2.5, MAX_DELAY_S, MAX_DELAY_S + 1, -1, -0.5, math.nan, math.inf,
                ExactNumber("1e400"), False, "5", {}],
    "max_attempts": [1, MAX_ATTEMPTS, 0, MAX_ATTEMPTS + 1, 2.0, False, "3"],
    "key": ["k", "x" * MAX_KEY_CHARS, "", "x" * (MAX_KEY_CHARS + 1), 7, b"k", ["k"]],
}
CASES = [(name, value) for name, values in VALUES.items() for value in values]


def refusal(check: Any, *args: Any) -> tuple[type[Exception], str] | None:
    try:
        check(*args)
    except InvalidRequest as exc:
        return type(exc), exc.message
    return None


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}={v!r}"[:40] for n, v in CASES])
def test_the_client_and_the_broker_refuse_a_job_option_alike(name: str, value: Any) -> None:
    broker = refusal(broker_job_options, {name: value}, "")
    client = refusal(client_job_options, {name: value})
    assert (broker is None) == (client is None), (broker, client)
    if broker is not None and client is not None:
        assert broker[0] is InvalidRequest and client[0] is InvalidArgument
        assert broker[1].startswith(f"field '{name}' ")
        assert broker[1].removeprefix(f"field '{name}'") == client[1].removeprefix(name)
        assert "\n" not in client[1] and len(client[1]) < 200


def test_a_value_that_passes_comes_back_as_given() -> None:
    assert type(fields.number("n", 5, 0, 10)) is int
    exact = ExactNumber("0.1000000000000000055511")
    assert fields.number("n", exact, 0, 1) is exact
    assert fields.integer("i", 2**62, 0, 2**63) == 2**62
    assert fields.text("t", "abc", 3) == "abc"


@pytest.mark.parametrize(("check", "args", "words"), [
    (fields.number, ("lease_s", "30", 1.0, 60.0), "lease_s must be a number, got '30'"),
    (fields.number, ("lease_s", math.nan, 1.0, 60.0), "lease_s must be a finite number, got nan"),
    (fields.number, ("lease_s", 0.5, 1.0, 60.0), "lease_s must be within [1.0, 60.0], got 0.5"),
    (fields.integer, ("max_jobs", True, 1, 9), "max_jobs must be an integer, got True"),
    (fields.integer, ("max_jobs", 10, 1, 9), "max_jobs must be within [1, 9], got 10"),
    (fields.text, ("worker", "", 9), "worker must be a string of 1..9 characters, got ''"),
])
def test_a_refusal_names_the_field_and_quotes_a_prefix(check: Any, args: tuple[Any, ...],
                                                      words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check(*args)
    assert info.value.message == words and type(info.value) is InvalidRequest
    with pytest.raises(InvalidArgument):
        check(*args, InvalidArgument)


def test_a_long_value_is_quoted_by_its_start_only() -> None:
    with pytest.raises(InvalidRequest) as info:
        fields.text("key", "s" * 10_000 + "SECRET-TAIL", 512)
    assert "SECRET-TAIL" not in info.value.message and len(info.value.message) < 200


@given(st.text())
def test_error_text_gives_utf8_storable_text_and_leaves_storable_text_alone(value: str) -> None:
    got = fields.error_text(value)
    got.encode("utf-8")  # never raises
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        assert got != value and "\\ud" in got
    else:
        assert got is value


def test_error_text_escapes_each_lone_surrogate_and_keeps_the_rest() -> None:
    assert fields.error_text("bad name b'\udcff' in é") == "bad name b'\\udcff' in é"
