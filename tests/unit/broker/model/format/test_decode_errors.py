"""broker.model.format.decode's reading of a job line's ``"errors"`` (the error
history, :func:`broker.model.job_lines.errors_field`): every malformed history
(wrong types, too many entries, a text too long, null in the wrong place, a
time that is not one) is refused with a CorruptState naming the job and the
entry; a history the broker may write (an entry of an attempt above the
job's attempts: a redriven job's) loads as written."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from broker.errors import CorruptState
from broker.limits import ERRORS_KEPT, MAX_ATTEMPTS, MAX_ERROR_CHARS
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import ErrorEntry
from broker.model.ops import Claim, Fail, FailItem, NewJob, Push
from tests.support.states import new_queue, read_back

NOW = 1_767_225_600_000
T0 = "2026-01-01T00:00:00.010Z"


def _head() -> tuple[list[bytes], int]:
    """A head whose one job failed twice ("boom 0", "boom 1"): its lines and
    the index of the job's line."""
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b'{"doc":1}', max_attempts=5),)), NOW)
    for n in range(2):
        (token,) = T.apply(state, Claim("w", 1, 60_000), NOW + 10 * n + 1).jobs.tokens
        T.apply(state, Fail((FailItem(token, f"boom {n}", 0),)), NOW + 10 * n + 2)
    codec.stamp(state, "b", NOW + 100, "c-1")
    lines = codec.encode(state).split(b"\n")
    (at,) = [i for i, line in enumerate(lines) if line.startswith(b'{"id":"j0000000001"')]
    return lines, at


def _with_errors(errors: Any) -> bytes:
    """The head with the job line's ``"errors"`` replaced by ``errors``."""
    lines, at = _head()
    raw = orjson.loads(lines[at].rstrip(b","))
    raw["errors"] = errors
    lines[at] = orjson.dumps(raw) + (b"," if lines[at].endswith(b",") else b"")
    return b"\n".join(lines)


def _bad_time(case: str) -> Any:
    return pytest.param([[1, case, None]], id=f"failed_at {case!r}")


MALFORMED = [
    pytest.param("x", id="a string"),
    pytest.param({}, id="an object"),
    pytest.param([], id="no entries"),
    pytest.param([[1, T0, "a"]] * ERRORS_KEPT + [[2, T0, None]], id="too many entries"),
    pytest.param([5], id="an entry not a list"),
    pytest.param([[1, T0]], id="an entry of two"),
    pytest.param([[1, T0, None, 4]], id="an entry of four"),
    pytest.param([[True, T0, None]], id="attempt true"),
    pytest.param([[0, T0, None]], id="attempt 0"),
    pytest.param([[MAX_ATTEMPTS + 1, T0, None]], id="attempt past MAX_ATTEMPTS"),
    pytest.param([[1.0, T0, None]], id="attempt a float"),
    pytest.param([["1", T0, None]], id="attempt a string"),
    pytest.param([[1, 5, None]], id="failed_at a number"),
    pytest.param([[1, None, None]], id="failed_at null"),
    pytest.param([[1, "1960-01-01T00:00:00Z", None]], id="failed_at before 1970"),
    _bad_time("garbage"),
    _bad_time("2026-01-01T00:00:00"),  # (no zone)
    _bad_time("2026-01-01T00:00:00.010z"),
    _bad_time("2026-12-31T23:59:60Z"),  # (a leap second)
    pytest.param([[1, T0, "x"]], id="the newest with a text"),
    pytest.param([[1, T0, None], [2, T0, None]], id="an older one null"),
    pytest.param([[1, T0, 5], [2, T0, None]], id="an older text a number"),
    pytest.param([[1, T0, "x" * (MAX_ERROR_CHARS + 1)], [2, T0, None]],
                 id="an older text too long"),
]


@pytest.mark.parametrize("errors", MALFORMED)
def test_a_malformed_history_is_refused_naming_the_job_and_its_entry(errors: Any) -> None:
    with pytest.raises(CorruptState) as refused:
        read_back(_with_errors(errors))
    message = str(refused.value)
    assert "j0000000001" in message and "errors" in message, message


def test_the_history_as_written_loads_entries_of_later_attempts_and_offsets_too() -> None:
    """An entry of an attempt above the job's attempts (a redriven job's older
    failures) and a time with an offset load; the newest text is last_error's."""
    back = read_back(_with_errors([[4, "2026-01-01T01:00:00.010+01:00", "older"],
                                   [2, T0, None]]))
    job = back.jobs.get(1)
    assert job is not None and job.attempts == 2
    assert job.errors == (ErrorEntry(4, NOW + 10, "older"), ErrorEntry(2, NOW + 10, "boom 1"))
    assert job.last_error == "boom 1"


def _with_last_error(text: str, errors: bool) -> bytes:
    """The head with the job line's ``last_error`` replaced by ``text``, its
    ``"errors"`` kept (``errors``) or dropped (a line of a broker before histories)."""
    lines, at = _head()
    raw = orjson.loads(lines[at].rstrip(b","))
    raw["last_error"] = text
    if not errors:
        del raw["errors"]
    lines[at] = orjson.dumps(raw) + (b"," if lines[at].endswith(b",") else b"")
    return b"\n".join(lines)


@pytest.mark.parametrize("errors", [True, False], ids=["with errors", "without errors"])
def test_a_last_error_too_long_is_refused_not_written_into_a_head_no_broker_reads(
        errors: bool) -> None:
    """A line whose ``last_error`` is longer than any broker writes (MAX_ERROR_CHARS
    + 1) is refused naming the job; were it loaded, the next failure would move
    it into ``"errors"`` and the head written then is refused (the queue wedged)."""
    data = _with_last_error("x" * (MAX_ERROR_CHARS + 1), errors)
    try:
        state = read_back(data)
    except CorruptState as refused:
        assert "j0000000001" in str(refused) and "last_error" in str(refused)
        return
    (token,) = T.apply(state, Claim("w", 1, 60_000), NOW + 1_000).jobs.tokens
    T.apply(state, Fail((FailItem(token, "next", 0),)), NOW + 1_001)
    codec.stamp(state, "b", NOW + 1_002, "c-2")
    read_back(codec.encode(state))  # (the head this broker wrote: refused)
    pytest.fail("a last_error past MAX_ERROR_CHARS loaded")


def test_a_last_error_of_max_error_chars_loads_and_survives_more_failures() -> None:
    data = _with_last_error("x" * MAX_ERROR_CHARS, True)
    state = read_back(data)
    for n in range(ERRORS_KEPT + 1):
        (token,) = T.apply(state, Claim("w", 1, 60_000), NOW + 1_000 * (n + 1)).jobs.tokens
        T.apply(state, Fail((FailItem(token, f"next {n}", 0),)), NOW + 1_000 * (n + 1) + 1)
        codec.stamp(state, "b", NOW + 1_000 * (n + 1) + 2, f"c-{n}")
        state = read_back(codec.encode(state))
        if state.jobs.get(1) is None or state.jobs[1].status != "pending":
            break
