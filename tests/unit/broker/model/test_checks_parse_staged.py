"""broker.model.checks.parse_staged: staged lines (a tab between a job's
options and its payload, one job a line) to jobs. Its fast path (every line
with default options: one split, then one parse a payload without a Python
step) must answer exactly what reading a line at a time answers."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import InvalidRequest, PayloadTooLarge
from broker.model import ops
from broker.model.checks import StagedChunk, parse_staged, parse_staged_chunk
from broker.model.ops import NewJob

PAYLOAD = st.sampled_from([b"1", b'{"a":\t[1, "x\\ty"]}', b'\t"lead"', b'"t"\t', b"[]",
                           b"{nope", b"", b'"\xc3\xa9"'])
OPTIONS = st.sampled_from([b"", b"", b'{"priority":2}', b'{"key":"k"}', b'{"bogus":1}'])


def one_line_at_a_time(data: bytes, check: bool, limit: int) -> list[ops.NewJob | bytes]:
    """parse_staged of each line alone: what the whole must equal."""
    jobs: list[ops.NewJob | bytes] = []
    for line in data.split(b"\n")[:-1]:
        jobs += parse_staged(line + b"\n", check=check, max_payload_bytes=limit)
    return jobs


def outcome(fn: object, *args: object) -> object:
    try:
        return fn(*args)  # type: ignore[operator]
    except (InvalidRequest, PayloadTooLarge) as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(OPTIONS, PAYLOAD), min_size=1, max_size=6), st.booleans())
def test_parse_staged_answers_what_reading_a_line_at_a_time_answers(
        jobs: list[tuple[bytes, bytes]], check: bool) -> None:
    data = b"".join(b"%s\t%s\n" % job for job in jobs)
    whole = outcome(lambda: parse_staged(data, check=check, max_payload_bytes=1 << 20))
    alone = outcome(lambda: one_line_at_a_time(data, check, 1 << 20))
    if isinstance(alone, list) and isinstance(whole, list):
        assert whole == alone
        assert all(isinstance(job, bytes) for job, (head, _) in zip(whole, jobs, strict=True)
                   if not head)
        bare = [job for job in whole if isinstance(job, bytes)]
        assert parse_staged_chunk(data, check=check, max_payload_bytes=1 << 20) == StagedChunk(
            whole, len(bare) == len(whole), sum(map(len, bare)), max(map(len, bare), default=0))
    else:
        assert whole == alone  # the same refusal


def test_default_option_lines_give_their_payloads_as_sent() -> None:
    data = b'\t{"n":1}\n\t\t[2]\n\t"a\\tb"\t\n'
    assert parse_staged(data, check=True, max_payload_bytes=100) == [
        b'{"n":1}', b"\t[2]", b'"a\\tb"\t']
    assert [orjson.loads(p) for p in parse_staged(data, check=False)] == [  # type: ignore[arg-type]
        {"n": 1}, [2], "a\tb"]


@pytest.mark.parametrize(("data", "match"), [
    (b"\t1\n\t2", "must end with a line break"),
    (b"\t1\n\tnope\n", "staged line 1: payload is not valid JSON"),
    (b"\t1\n1\n", "staged line 1 has no tab"),
    (b"\t1\n\t\n", "staged line 1: payload is not valid JSON"),
])
def test_a_bad_staged_line_is_named(data: bytes, match: str) -> None:
    with pytest.raises(InvalidRequest, match=match):
        parse_staged(data, check=True, max_payload_bytes=100)


def test_a_payload_over_the_limit_is_named() -> None:
    with pytest.raises(PayloadTooLarge, match="staged line 1: payload is 11 bytes"):
        parse_staged(b"\t1\n\t" + b"1" * 11 + b"\n", check=True, max_payload_bytes=10)


def test_parse_staged_chunk_knows_its_bare_payloads_bytes_and_largest() -> None:
    """What a publish needs of a chunk without a pass over its payloads, the
    same on the fast path (every job bare) and a line at a time."""
    bare = [b'{"n":1}', b"[22]", b"3"]
    data = b"".join(b"\t%s\n" % p for p in bare)
    for check in (True, False):
        assert parse_staged_chunk(data, check=check, max_payload_bytes=100) == StagedChunk(
            bare, True, 12, 7)
    mixed = [b"1", NewJob(b"[4444]", 3), b"22"]
    assert parse_staged_chunk(b'\t1\n{"priority":3}\t[4444]\n\t22\n', check=True,
                              max_payload_bytes=100) == StagedChunk(mixed, False, 3, 2)
    assert parse_staged_chunk(b"", check=False) == StagedChunk([], True, 0, 0)
