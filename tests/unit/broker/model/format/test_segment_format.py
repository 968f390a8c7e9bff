"""broker.model.format.segment_format: a segment object's bytes, written (version 2)
and read (versions 1 and 2), and the one check of a read object. Pure: no
store, no I/O."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import timefmt
from broker.errors import CorruptState, SegmentMissing
from broker.limits import MAX_PRIORITY
from broker.model.format import segment_format as sf
from broker.model.job import PENDING, Job
from broker.model.job_lines import job_line, new_pending_lines
from broker.model.state import SegmentRef
from tests.support.segment_refs import T0, key_of, payloads, ref_for
from tests.support.segment_v1 import encode_segment_v1

SECRET = b'{"secret":"do-not-quote-me"}'
GOLDEN_V1 = Path(__file__).resolve().parents[4] / "fixtures" / "golden_segment_v1.jsonl"


# -- the object's bytes ---------------------------------------------------------------


def test_encode_segment_is_jq_readable_line_by_line() -> None:
    data = sf.encode_segment("q", 5, 7, T0, payloads(3), max_attempts=4, created_ms=T0 - 5)
    lines = data.decode().splitlines()
    assert json.loads(lines[0]) == {
        "format": "osqueue-segment", "version": 2, "queue": "q", "first_seq": 5,
        "count": 3, "priority": 7, "run_at": "2023-11-14T22:13:20.123Z",
        "created_at": "2023-11-14T22:13:20.118Z", "max_attempts": 4}
    assert [json.loads(line) for line in lines[1:]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert data == lines[0].encode() + b"\n" + b"".join(p + b"\n" for p in payloads(3))


def test_a_default_option_segment_line_is_the_bulk_push_line() -> None:
    data = sf.encode_segment("q", 11, 0, T0, payloads(5), max_attempts=3)
    assert sf.segment_lines(data, ref_for(11, 5)) == new_pending_lines(11, payloads(5), T0, 3)


@settings(max_examples=100, deadline=None)
@given(priority=st.integers(-MAX_PRIORITY, MAX_PRIORITY),
       run_at=st.integers(0, 2**40), created=st.integers(0, 2**40),
       max_attempts=st.integers(1, 100), first_seq=st.integers(1, 10**12),
       values=st.lists(st.recursive(
           st.none() | st.booleans() | st.integers(-2**60, 2**60) | st.text(),
           lambda inner: st.lists(inner, max_size=3)
           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6),
           min_size=1, max_size=8))
def test_segment_lines_and_jobs_are_the_jobs_inline_lines(
        priority: int, run_at: int, created: int, max_attempts: int, first_seq: int,
        values: list[Any]) -> None:
    blobs = [orjson.dumps(v) for v in values]
    data = sf.encode_segment("q", first_seq, priority, run_at, blobs,
                             max_attempts=max_attempts, created_ms=created)
    ref = ref_for(first_seq, len(blobs), priority, run_at)
    for seq, (blob, line) in enumerate(zip(blobs, sf.segment_lines(data, ref), strict=True),
                                       first_seq):
        fresh = Job(seq, blob, PENDING, priority, run_at, 0, max_attempts, created)
        assert line == job_line(fresh)
        job = sf.segment_job(seq, line, ref)
        assert job == fresh
        assert job._enc == line  # kept as its line
        job._enc = None
        assert job_line(job) == line


def test_segment_lines_reads_a_window_in_the_heads_form() -> None:
    data = sf.encode_segment("q", 100, 0, T0, payloads(10), max_attempts=3)
    everything = new_pending_lines(100, payloads(10), T0, 3)
    assert sf.segment_lines(data, ref_for(100, 10, taken=4)) == everything[4:]
    assert sf.segment_lines(data, ref_for(100, 10), 2, 5) == everything[2:5]
    assert sf.segment_lines(data, ref_for(100, 10), 3, 3) == []
    assert sf.segment_lines(data, ref_for(100, 10, taken=10)) == []
    for start, stop in [(-1, 2), (3, 2), (0, 11)]:
        with pytest.raises(ValueError, match="window"):
            sf.segment_lines(data, ref_for(100, 10), start, stop)


def test_encode_segment_refuses_a_payload_with_a_line_break_without_quoting_it() -> None:
    with pytest.raises(ValueError, match="payload 1 holds a line break") as info:
        sf.encode_segment("q", 1, 0, T0, [b"1", b'{"secret":\n"do-not-quote-me"}'],
                          max_attempts=3)
    assert "do-not-quote-me" not in str(info.value)


@pytest.mark.parametrize(("args", "match"), [
    (("q", 1, 0, T0, []), "job count"),
    (("q", 1, 0, T0, [b"1"] * (sf.MAX_SEGMENT_JOBS + 1)), "job count"),
    (("q", 0, 0, T0, [b"1"]), "first_seq"),
    (("q", 1, MAX_PRIORITY + 1, T0, [b"1"]), "priority"),
    (("q", 1, 0, -1, [b"1"]), "run_at_ms"),
    (("q/x", 1, 0, T0, [b"1"]), "invalid queue name"),
    (("q", 1, 0, T0, [b"1", b""]), "payload 1 is empty"),
])
def test_encode_segment_refuses(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sf.encode_segment(*args, max_attempts=3)
    with pytest.raises(ValueError, match="max_attempts"):
        sf.encode_segment("q", 1, 0, T0, [b"1"], max_attempts=0)


# -- refusals on read: each names the key, none quotes a payload -------------------------


def refused(data: bytes, ref: SegmentRef, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        sf.segment_lines(data, ref, 0, ref.count)
    assert ref.key in str(info.value)
    assert "do-not-quote-me" not in str(info.value)


GOOD = sf.encode_segment("q", 10, 3, T0, [SECRET] * 4, max_attempts=3)
V1 = encode_segment_v1("q", 10, 3, T0, [SECRET] * 4, max_attempts=3)


@pytest.mark.parametrize(("ref", "field"), [
    (ref_for(10, 4, 3, T0, queue="other"), "queue"),
    (SegmentRef(key_of(10), "e", 11, 4, 3, T0), "first_seq"),
    (ref_for(10, 5, 3, T0), "count"),
    (ref_for(10, 4, 2, T0), "priority"),
    (ref_for(10, 4, 3, T0 + 1), "run_at_ms"),
])
def test_a_header_that_disagrees_with_the_ref_is_refused(ref: SegmentRef, field: str) -> None:
    refused(GOOD, ref, f"header disagrees with the queue's reference on {field}")


@pytest.mark.parametrize(("data", "match"), [
    (GOOD[:-1], "truncated: its last line has no line break"),
    (GOOD[:GOOD.rindex(b"\n", 0, -1) + 1], "truncated: 3 job lines, the reference says 4"),
    (GOOD[:30], "no header line"),
    (b"", "no header line"),
    (GOOD + GOOD.splitlines(keepends=True)[-1], "extra lines: 5 job lines"),
    (b"not json\n" + GOOD.split(b"\n", 1)[1], "header line is not JSON"),
    (GOOD.replace(b"osqueue-segment", b"osqueue", 1), "not an osqueue-segment object"),
    (GOOD.replace(b'"version":2', b'"version":4', 1), "version 4; this broker reads "
                                                       "versions 1 to 3"),
    (GOOD.replace(b'"version":2', b'"version":true', 1), "version True"),
    (GOOD.replace(b'"version":2', b'"version":2,"extra":0', 1), "'extra'"),
    (GOOD.replace(b',"max_attempts":3', b'', 1), "'max_attempts'"),
    (GOOD.replace(b'"max_attempts":3', b'"max_attempts":0', 1), "header max_attempts"),
    (GOOD.replace(b'"created_at":"2023', b'"created_at":"x023', 1), "header created_at"),
    (V1.replace(b'"version":1', b'"version":1,"max_attempts":3', 1), "'max_attempts'"),
    (GOOD.replace(b"\n" + SECRET + b"\n", b"\n\n", 1), "line 2 is empty"),
    (GOOD.replace(b'"count":4', b'"count":true', 1), "count"),
])
def test_a_broken_segment_object_is_refused(data: bytes, match: str) -> None:
    refused(data, ref_for(10, 4, 3, T0), match)


@pytest.mark.parametrize("good", [GOOD, V1], ids=["v2", "v1"])
def test_a_broken_object_of_either_version_is_refused(good: bytes) -> None:
    for data, match in [
            (good[:-1], "truncated: its last line has no line break"),
            (good[:good.rindex(b"\n", 0, -1) + 1], "truncated: 3 job lines, the reference says 4"),
            (good + good.splitlines(keepends=True)[-1], "extra lines: 5 job lines")]:
        refused(data, ref_for(10, 4, 3, T0), match)


def test_a_version_1_seq_gap_or_changed_line_is_refused() -> None:
    lines = V1.splitlines(keepends=True)
    other = encode_segment_v1("q", 20, 3, T0, [SECRET], max_attempts=3).splitlines(
        keepends=True)[1]
    ref = ref_for(10, 4, 3, T0)
    refused(b"".join([*lines[:3], other, lines[4]]), ref,
            "line 4 is not the pending job of seq 12")
    refused(b"".join([lines[0], lines[2], lines[1], *lines[3:]]), ref,  # out of order
            "line 2 is not the pending job of seq 10")
    for old, new in [(b'"priority":3', b'"priority":4'),
                     (b'"status":"pending"', b'"status":"dead"'),
                     (b'"attempts":0,', b'"attempts":1,'),
                     (b'"max_attempts":3', b'"max_attempts":0'),
                     (b'"max_attempts":3', b'"max_attempts":03'),
                     (b'"created_at":"2023', b'"created_at":"x023'),
                     (b'"payload":' + SECRET, b'"payload":'),
                     (b'"payload":', b'"payloaX":'), (b'}}\n', b'} \n')]:
        bad = lines[3].replace(old, new, 1)
        assert bad != lines[3]
        data = b"".join([*lines[:3], bad, lines[4]])
        refused(data, ref, "line 4 is not")  # checked against the window's first line
        with pytest.raises(ValueError, match="line 4 is not"):  # as the window's first line
            sf.segment_lines(data, ref, 2, 4)
        assert len(sf.segment_lines(data, ref, 0, 2)) == 2


def test_segment_lines_refuses_a_version_1_line_whose_max_attempts_or_creation_differs(
) -> None:
    one = encode_segment_v1("q", 10, 3, T0, [b"1", b"2"], max_attempts=3).splitlines(
        keepends=True)
    two = encode_segment_v1("q", 10, 3, T0, [b"1", b"2"], max_attempts=4,
                            created_ms=T0 - 1).splitlines(keepends=True)
    for other in (two, [two[0], *(ln.replace(b'"max_attempts":4', b'"max_attempts":3')
                                  for ln in two[1:])]):
        data = b"".join([one[0], one[1], other[2]])
        refused(data, ref_for(10, 2, 3, T0), "line 3 is not")


def test_only_the_window_read_has_its_version_1_lines_checked() -> None:
    lines = V1.splitlines(keepends=True)
    bad = b"".join([lines[0], lines[1].replace(b'"priority":3', b'"priority":4'), *lines[2:]])
    assert len(sf.segment_lines(bad, ref_for(10, 4, 3, T0, taken=1))) == 3
    refused(bad, ref_for(10, 4, 3, T0), "line 2 is not")


def test_read_checked_refuses_a_missing_changed_or_broken_object_naming_it() -> None:
    """The one check of a read segment, shared by the broker's SegmentStore and the
    Spark reader: what the read gave (bytes and etag, or None for not found)
    against the reference."""
    data = sf.encode_segment("q", 1, 0, T0, payloads(4), max_attempts=3)
    ref = replace(ref_for(1, 4), taken=1)
    url = "file:///data/osq"
    assert sf.read_checked(ref, data, "etag-1", url) == sf.segment_lines(data, ref)
    assert sf.read_checked(ref, data, "etag-1", url, 0, 2) == sf.segment_lines(data, ref, 0, 2)
    with pytest.raises(SegmentMissing) as missing:
        sf.read_checked(ref, None, None, url)
    assert str(missing.value) == (f"queue 'q' references segment {url}/{ref.key}, which is "
                                  "missing (deleted behind the broker's back?)")
    with pytest.raises(SegmentMissing, match=rf"segment {url}/{ref.key} at etag 'etag-1', "
                                             r"but the object has etag 'etag-2'"):
        sf.read_checked(ref, data, "etag-2", url)
    with pytest.raises(CorruptState, match=rf"^{url}: segment {ref.key} is truncated"):
        sf.read_checked(ref, data[:-1], "etag-1", url)
    with pytest.raises(CorruptState, match=r"window \[3, 5\) is outside \[0, 4\]"):
        sf.read_checked(ref, data, "etag-1", url, 3, 5)


# -- version 1: still read -------------------------------------------------------------


def test_a_version_1_segment_a_broker_wrote_reads_as_its_version_2_twin() -> None:
    """The golden file is a version-1 segment as the broker wrote it before
    version 2; it reads to the same head lines as the version-2 object of the
    same jobs, and to the lines it holds."""
    data = GOLDEN_V1.read_bytes()
    header = orjson.loads(data.split(b"\n", 1)[0])
    assert header["version"] == 1
    run_at = timefmt.parse(header["run_at"])
    ref = SegmentRef(key_of(1001), "e", 1001, 5, 2, run_at, taken=1)
    lines = data.splitlines()[1:]
    jobs = [orjson.loads(line) for line in lines]
    twin = sf.encode_segment("q", 1001, 2, run_at,
                             [orjson.dumps(job["payload"]) for job in jobs],
                             max_attempts=5, created_ms=timefmt.parse(jobs[0]["created_at"]))
    # (the payloads as written: orjson.dumps would respell the escaped text)
    twin = b"\n".join([twin.split(b"\n", 1)[0], *(line[line.index(b'"payload":') + 10:-1]
                                                  for line in lines)]) + b"\n"
    assert sf.segment_lines(data, ref) == [b",\n" + line for line in lines[1:]]
    assert sf.segment_lines(twin, ref) == sf.segment_lines(data, ref)
    assert sf.segment_lines(twin, ref, 0, 5) == [b",\n" + line for line in lines]
    assert encode_segment_v1("q", 1001, 2, run_at, [
        line[line.index(b'"payload":') + 10:-1] for line in lines], max_attempts=5,
        created_ms=timefmt.parse(jobs[0]["created_at"])) == data
