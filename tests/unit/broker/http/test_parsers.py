"""Staged lines and request bodies (broker.http.parsers): the compact job format of stage, publish
and push bodies, and the nesting limit on payloads."""

from __future__ import annotations

import orjson
import pytest

from broker.errors import InvalidRequest, PayloadTooLarge
from broker.http import parsers
from broker.limits import MAX_DEPTH
from broker.model.checks import check_depth, parse_staged
from broker.model.ops import NewJob, Push, PushPayloads, push_of
from broker.wire import encode_staged_line


def test_lines_round_trip_with_and_without_options() -> None:
    data = (encode_staged_line(b'{"a":1}')
            + encode_staged_line(b"[1,2]", {"priority": 5, "key": "k"})
            + encode_staged_line(b'"x"', {"delay_s": 1.5, "max_attempts": 2}))
    for check in (True, False):
        assert parse_staged(data, check=check, max_payload_bytes=100) == [
            b'{"a":1}',
            NewJob(b"[1,2]", 5, 0, None, "k"),
            NewJob(b'"x"', 0, 1500, 2, None),
        ]


def test_default_options_come_back_as_bare_payloads_on_both_paths() -> None:
    payloads = [orjson.dumps({"i": i, "tab": "a\tb"}) for i in range(50)]
    data = b"".join(encode_staged_line(p) for p in payloads)
    assert parse_staged(data, check=False) == payloads  # the bulk shortcut
    assert parse_staged(data, check=True, max_payload_bytes=1000) == payloads


def test_line_breaks_in_a_payload_are_encoded_away() -> None:
    pretty = b'{\n  "a": [1,\n 2]\n}'
    line = encode_staged_line(pretty)
    assert line.count(b"\n") == 1
    assert parse_staged(line, check=True, max_payload_bytes=100) == [b'{"a":[1,2]}']


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b'\t{"a":1}', InvalidRequest),  # no final line break
        (b'{"a":1}\n', InvalidRequest),  # no tab
        (b"\t{not json\n", InvalidRequest),
        (b"\t\n", InvalidRequest),  # empty payload
        (b'{"colour":1}\t1\n', InvalidRequest),  # unknown option
        (b'{"priority":"high"}\t1\n', InvalidRequest),
        (b'{"max_attempts":0}\t1\n', InvalidRequest),
        (b"[1]\t1\n", InvalidRequest),  # options not an object
        (b'\t"' + b"x" * 200 + b'"\n', PayloadTooLarge),
    ],
)
def test_bad_lines_are_refused_with_the_line_named(data: bytes, error: type) -> None:
    with pytest.raises(error, match="staged line"):
        parse_staged(b"\t1\n" + data, check=True, max_payload_bytes=100)


def test_push_of_picks_the_bulk_form_only_when_every_job_is_bare() -> None:
    assert isinstance(push_of([b"1", b"2"]), PushPayloads)
    mixed = push_of([b"1", NewJob(b"2", 3)], once="k")
    assert isinstance(mixed, Push) and mixed.once == "k"
    assert mixed.jobs == (NewJob(b"1"), NewJob(b"2", 3))


#: a payload nested 300 levels deep: canonical, valid JSON, 601 bytes
DEPTH = 300
PAYLOAD = b"[" * DEPTH + b"1" + b"]" * DEPTH


def test_payloads_deeper_than_the_limit_are_refused_on_every_push_path() -> None:
    """A payload nested deeper than MAX_DEPTH is refused on every push path
    (staged lines with and without options, push and complete bodies); brackets
    inside strings do not count.

    Accepted once, such a payload made the queue object undecodable for good: the
    staged path checked it with orjson.loads (depth limit 1024) and stored its
    bytes verbatim, but a re-read re-encoded it with orjson.dumps (depth limit
    255), which raised; decode called that CorruptState, and the broker refused to
    touch its own object and, at its next start, to start at all."""
    limit = MAX_DEPTH
    ok = b"[" * limit + b"1" + b"]" * limit
    assert parse_staged(b"\t" + ok + b"\n", check=True, max_payload_bytes=1 << 20) == [ok]
    for body in (b"\t" + PAYLOAD + b"\n", b'{"priority":1}\t' + PAYLOAD + b"\n"):
        with pytest.raises(InvalidRequest, match="nested 300 levels"):
            parse_staged(body, check=True, max_payload_bytes=1 << 20)
    with pytest.raises(InvalidRequest, match=r"jobs\[0\]\.payload"):
        parsers.parse_push(orjson.loads(b'{"jobs":[{"payload":' + PAYLOAD + b"}]}"))
    with pytest.raises(InvalidRequest, match="result"):
        parsers.parse_complete(orjson.loads(b'{"items":[{"token":"j1.1","result":' + PAYLOAD
                                        + b"}]}"))
    text = b'["[[[[", ' * 1 + b'"a\\"[[["]'  # brackets inside strings do not count
    check_depth(text * 300, "payload")
