"""broker.model.segments (issue 20 step 2, not yet wired): segment objects,
the head's references to them, claim order across inline jobs and segments,
purge and stats. Pure: no store, no I/O."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import paths
from broker.errors import CorruptState, SegmentMissing
from broker.limits import MAX_PRIORITY
from broker.model import segments as sg
from broker.model.indexes import ready_key
from broker.model.job import PENDING, Job
from broker.model.lines import job_line, new_pending_lines
from broker.model.segments import SegmentRef

T0 = 1_700_000_000_123
SECRET = b'{"secret":"do-not-quote-me"}'


def key_of(first_seq: int, queue: str = "q", salt: str = "0a1b2c3d") -> str:
    return paths.segment_key(queue, paths.segment_name(first_seq, salt))


def ref_for(first_seq: int, count: int, priority: int = 0, run_at_ms: int = T0,
            taken: int = 0, queue: str = "q") -> SegmentRef:
    return SegmentRef(key_of(first_seq, queue), "etag-1", first_seq, count, priority,
                      run_at_ms, taken)


def payloads(n: int) -> list[bytes]:
    return [b'{"n":%d}' % i for i in range(n)]


# -- paths ----------------------------------------------------------------------------


def test_segment_key_round_trips_through_parse_segment_key() -> None:
    key = key_of(42, queue="docs.v2")
    assert key == "docs.v2/segments/seg-0000000042-0a1b2c3d.jsonl"
    assert key.startswith(paths.segments_prefix("docs.v2"))
    assert paths.parse_segment_key(key) == ("docs.v2", 42)
    big = paths.segment_key("q", paths.segment_name(123_456_789_012, "ffffffff"))
    assert paths.parse_segment_key(big) == ("q", 123_456_789_012)


@pytest.mark.parametrize("key", [
    "q/segments/seg-0000000042-0a1b2c3d.json",  # another suffix
    "q/segments/seg-000000042-0a1b2c3d.jsonl",  # 9 digits
    "q/segments/seg-00000000042-0a1b2c3d.jsonl",  # a leading zero past 10 digits
    "q/segments/seg-0000000000-0a1b2c3d.jsonl",  # seq 0
    "q/segments/seg-0000000042-0A1B2C3D.jsonl",  # upper-case salt
    "q/segments/seg-0000000042-0a1b2c3.jsonl",  # short salt
    "q/segments/x/seg-0000000042-0a1b2c3d.jsonl",  # nested
    "q/staging/seg-0000000042-0a1b2c3d.jsonl",
    "../segments/seg-0000000042-0a1b2c3d.jsonl",
    "/segments/seg-0000000042-0a1b2c3d.jsonl",
    "q/segments/seg-0000000042-0a1b2c3d.jsonl\n",
])
def test_parse_segment_key_refuses(key: str) -> None:
    assert paths.parse_segment_key(key) is None


@pytest.mark.parametrize(("first_seq", "salt"), [
    (0, "0a1b2c3d"), (-1, "0a1b2c3d"), (10**15, "0a1b2c3d"), (True, "0a1b2c3d"),
    (1, "0a1b2c3"), (1, "0a1b2c3g"), (1, "0A1B2C3D"), (1, "0a1b2c3d\n"),
])
def test_segment_name_refuses(first_seq: Any, salt: str) -> None:
    with pytest.raises(ValueError, match="segment"):
        paths.segment_name(first_seq, salt)


def test_segment_key_refuses_a_name_segment_name_does_not_make() -> None:
    with pytest.raises(ValueError, match="invalid segment name"):
        paths.segment_key("q", "../queue.json")


# -- the object's bytes ---------------------------------------------------------------


def test_encode_segment_is_jq_readable_line_by_line() -> None:
    data = sg.encode_segment("q", 5, 7, T0, payloads(3), max_attempts=4)
    lines = data.decode().splitlines()
    assert json.loads(lines[0]) == {
        "format": "osqueue-segment", "version": 1, "queue": "q", "first_seq": 5,
        "count": 3, "priority": 7, "run_at": "2023-11-14T22:13:20.123Z"}
    jobs = [json.loads(line) for line in lines[1:]]
    assert [j["id"] for j in jobs] == ["j0000000005", "j0000000006", "j0000000007"]
    assert {(j["status"], j["priority"], j["max_attempts"]) for j in jobs} == {
        ("pending", 7, 4)}
    assert [j["payload"] for j in jobs] == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_a_default_option_segment_line_is_the_bulk_push_line() -> None:
    data = sg.encode_segment("q", 11, 0, T0, payloads(5), max_attempts=3)
    assert sg.segment_lines(data, ref_for(11, 5)) == new_pending_lines(11, payloads(5), T0, 3)


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
    data = sg.encode_segment("q", first_seq, priority, run_at, blobs,
                             max_attempts=max_attempts, created_ms=created)
    ref = ref_for(first_seq, len(blobs), priority, run_at)
    for seq, (blob, line) in enumerate(zip(blobs, sg.segment_lines(data, ref), strict=True),
                                       first_seq):
        fresh = Job(seq, blob, PENDING, priority, run_at, 0, max_attempts, created)
        assert line == job_line(fresh)
        job = sg.segment_job(seq, line, ref)
        assert job == fresh
        assert job._enc == line  # kept as its line
        job._enc = None
        assert job_line(job) == line


def test_segment_lines_reads_a_window_in_the_heads_form() -> None:
    data = sg.encode_segment("q", 100, 0, T0, payloads(10), max_attempts=3)
    everything = new_pending_lines(100, payloads(10), T0, 3)
    assert sg.segment_lines(data, ref_for(100, 10, taken=4)) == everything[4:]
    assert sg.segment_lines(data, ref_for(100, 10), 2, 5) == everything[2:5]
    assert sg.segment_lines(data, ref_for(100, 10), 3, 3) == []
    assert sg.segment_lines(data, ref_for(100, 10, taken=10)) == []
    for start, stop in [(-1, 2), (3, 2), (0, 11)]:
        with pytest.raises(ValueError, match="window"):
            sg.segment_lines(data, ref_for(100, 10), start, stop)


def test_encode_segment_refuses_a_payload_with_a_line_break_without_quoting_it() -> None:
    with pytest.raises(ValueError, match="payload 1 holds a line break") as info:
        sg.encode_segment("q", 1, 0, T0, [b"1", b'{"secret":\n"do-not-quote-me"}'],
                          max_attempts=3)
    assert "do-not-quote-me" not in str(info.value)


@pytest.mark.parametrize(("args", "match"), [
    (("q", 1, 0, T0, []), "job count"),
    (("q", 1, 0, T0, [b"1"] * (sg.MAX_SEGMENT_JOBS + 1)), "job count"),
    (("q", 0, 0, T0, [b"1"]), "first_seq"),
    (("q", 1, MAX_PRIORITY + 1, T0, [b"1"]), "priority"),
    (("q", 1, 0, -1, [b"1"]), "run_at_ms"),
    (("q/x", 1, 0, T0, [b"1"]), "invalid queue name"),
])
def test_encode_segment_refuses(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sg.encode_segment(*args, max_attempts=3)
    with pytest.raises(ValueError, match="max_attempts"):
        sg.encode_segment("q", 1, 0, T0, [b"1"], max_attempts=0)


# -- refusals on read: each names the key, none quotes a payload -------------------------


def refused(data: bytes, ref: SegmentRef, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        sg.segment_lines(data, ref, 0, ref.count)
    assert ref.key in str(info.value)
    assert "do-not-quote-me" not in str(info.value)


GOOD = sg.encode_segment("q", 10, 3, T0, [SECRET] * 4, max_attempts=3)


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
    (GOOD.replace(b'"version":1', b'"version":2', 1), "version 2"),
    (GOOD.replace(b'"version":1', b'"version":1,"extra":0', 1), "'extra'"),
    (GOOD.replace(b'"count":4', b'"count":true', 1), "count"),
])
def test_a_broken_segment_object_is_refused(data: bytes, match: str) -> None:
    refused(data, ref_for(10, 4, 3, T0), match)


def test_a_seq_gap_or_a_changed_line_is_refused() -> None:
    lines = GOOD.splitlines(keepends=True)
    other = sg.encode_segment("q", 20, 3, T0, [SECRET], max_attempts=3).splitlines(
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
            sg.segment_lines(data, ref, 2, 4)
        assert len(sg.segment_lines(data, ref, 0, 2)) == 2


def test_segment_lines_refuses_a_line_whose_max_attempts_or_creation_differs() -> None:
    one = sg.encode_segment("q", 10, 3, T0, [b"1", b"2"], max_attempts=3).splitlines(
        keepends=True)
    two = sg.encode_segment("q", 10, 3, T0, [b"1", b"2"], max_attempts=4,
                            created_ms=T0 - 1).splitlines(keepends=True)
    for other in (two, [two[0], *(ln.replace(b'"max_attempts":4', b'"max_attempts":3')
                                  for ln in two[1:])]):
        data = b"".join([one[0], one[1], other[2]])
        refused(data, ref_for(10, 2, 3, T0), "line 3 is not")


def test_only_the_window_read_has_its_lines_checked() -> None:
    lines = GOOD.splitlines(keepends=True)
    bad = b"".join([lines[0], lines[1].replace(b'"priority":3', b'"priority":4'), *lines[2:]])
    assert len(sg.segment_lines(bad, ref_for(10, 4, 3, T0, taken=1))) == 3
    refused(bad, ref_for(10, 4, 3, T0), "line 2 is not")


def test_read_checked_refuses_a_missing_changed_or_broken_object_naming_it() -> None:
    """The one check of a read segment, shared by the broker's SegmentStore and the
    Spark reader: what the read gave (bytes and etag, or None for not found)
    against the reference."""
    data = sg.encode_segment("q", 1, 0, T0, payloads(4), max_attempts=3)
    ref = replace(ref_for(1, 4), taken=1)
    url = "file:///data/osq"
    assert sg.read_checked(ref, data, "etag-1", url) == sg.segment_lines(data, ref)
    assert sg.read_checked(ref, data, "etag-1", url, 0, 2) == sg.segment_lines(data, ref, 0, 2)
    with pytest.raises(SegmentMissing) as missing:
        sg.read_checked(ref, None, None, url)
    assert str(missing.value) == (f"queue 'q' references segment {url}/{ref.key}, which is "
                                  "missing (deleted behind the broker's back?)")
    with pytest.raises(SegmentMissing, match=rf"segment {url}/{ref.key} at etag 'etag-1', "
                                             r"but the object has etag 'etag-2'"):
        sg.read_checked(ref, data, "etag-2", url)
    with pytest.raises(CorruptState, match=rf"^{url}: segment {ref.key} is truncated"):
        sg.read_checked(ref, data[:-1], "etag-1", url)
    with pytest.raises(CorruptState, match=r"window \[3, 5\) is outside \[0, 4\]"):
        sg.read_checked(ref, data, "etag-1", url, 3, 5)


# -- the head's references ------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(first_seq=st.integers(1, 10**14), count=st.integers(1, sg.MAX_SEGMENT_JOBS), data=st.data(),
       priority=st.integers(-MAX_PRIORITY, MAX_PRIORITY), run_at=st.integers(0, 2**45),
       etag=st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1,
                    max_size=sg.MAX_ETAG_CHARS))
def test_ref_json_round_trips(first_seq: int, count: int, data: st.DataObject,
                              priority: int, run_at: int, etag: str) -> None:
    taken = data.draw(st.integers(0, count))
    ref = SegmentRef(key_of(first_seq), etag, first_seq, count, priority, run_at, taken)
    raw = json.loads(json.dumps(sg.ref_to_json(ref)))  # through the head's JSON
    assert sg.ref_from_json(raw, "segments[0]") == ref


def good_raw(**changes: Any) -> dict[str, Any]:
    raw = sg.ref_to_json(ref_for(10, 4, 3, T0, taken=1))
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not ...}


@pytest.mark.parametrize(("raw", "match"), [
    ([], "must be an object"),
    (good_raw(taken=...), "'taken'"),
    (good_raw(extra=1), "'extra'"),
    (good_raw(key="q/queue.json"), "is not a segment key"),
    (good_raw(key=7), "is not a segment key"),
    (good_raw(key=key_of(11)), "its key names another"),
    (good_raw(etag=""), "etag"),
    (good_raw(etag=None), "etag"),
    (good_raw(etag="e" * (sg.MAX_ETAG_CHARS + 1)), "etag"),
    (good_raw(etag="e\n"), "etag"),
    (good_raw(count=0), "count"),
    (good_raw(count=sg.MAX_SEGMENT_JOBS + 1), "count"),
    (good_raw(count=-4), "count"),
    (good_raw(count=4.0), "count"),
    (good_raw(first_seq=True), "first_seq"),
    (good_raw(taken=5), "taken"),
    (good_raw(taken=-1), "taken"),
    (good_raw(priority=MAX_PRIORITY + 1), "priority"),
    (good_raw(run_at=T0), "run_at"),
    (good_raw(run_at="yesterday"), "run_at"),
    (good_raw(run_at="1969-12-31T23:59:59.999Z"), "before 1970"),
])
def test_ref_from_json_refuses(raw: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        sg.ref_from_json(raw, "queue q: segments[3]")
    assert str(info.value).startswith("queue q: segments[3]: ")


# -- cursors and claim order ----------------------------------------------------------


def test_take_advances_the_cursor_until_exhausted() -> None:
    refs = [ref_for(10, 4)]
    assert (refs[0].next_seq, refs[0].remaining, refs[0].exhausted) == (10, 4, False)
    refs[0] = sg.take(refs, 0)
    refs[0] = sg.take(refs, 0, 2)
    assert (refs[0].next_seq, refs[0].remaining, refs[0].exhausted) == (13, 1, False)
    for n in (0, 2, True):
        with pytest.raises(ValueError, match="cannot take"):
            sg.take(refs, 0, n)
    refs[0] = sg.take(refs, 0)
    assert (refs[0].taken, refs[0].remaining, refs[0].exhausted) == (4, 0, True)
    assert sg.due_key(refs[0], T0) is None
    with pytest.raises(ValueError, match="cannot take"):
        sg.take(refs, 0)


def test_next_from_skips_segments_not_due_or_exhausted() -> None:
    later = ref_for(1, 5, priority=9, run_at_ms=T0 + 1)
    done = ref_for(10, 2, priority=9, taken=2)
    low = ref_for(20, 3, priority=-1)
    assert sg.next_from(None, [later, done], T0) is None
    assert sg.next_from(None, [later, done, low], T0) == 2
    assert sg.next_from(ready_key(0, T0, 99), [later, done, low], T0) == sg.INLINE
    assert sg.next_from(ready_key(-2, T0, 99), [later, done, low], T0) == 2
    assert sg.next_from(ready_key(-2, T0, 99), [later, done, low], T0 + 1) == 0
    assert sg.run_from(None, [later, done, low], 2, T0) == 3
    assert sg.run_from(None, [later, done, low], 0, T0) == 0


def test_run_from_stops_where_another_source_comes_first() -> None:
    refs = [ref_for(10, 10), ref_for(100, 5)]
    assert sg.run_from(ready_key(0, T0, 14), refs, 0, T0) == 4
    assert sg.run_from(None, refs, 0, T0) == 10
    assert sg.run_from(None, refs, 1, T0) == 0  # ref 0's next job comes first
    assert sg.run_from(ready_key(1, T0 + 5, 1000), refs, 0, T0) == 0


SOURCES = st.lists(st.one_of(
    st.tuples(st.just("inline"), st.integers(-2, 2), st.integers(0, 4)),
    st.tuples(st.just("segment"), st.integers(-2, 2), st.integers(0, 4),
              st.integers(1, 6), st.integers(0, 6))), max_size=25)


@settings(max_examples=300, deadline=None)
@given(sources=SOURCES, now=st.integers(0, 4), first=st.integers(1, 1000))
def test_merging_segments_and_inline_jobs_gives_the_claim_order(
        sources: list[tuple[Any, ...]], now: int, first: int) -> None:
    seq = first
    due_inline: list[int] = []  # (the caller gives only a due inline head)
    refs: list[SegmentRef] = []
    expected: list[tuple[int, int, int]] = []
    for source in sources:
        priority, run_at = source[1], source[2]
        if source[0] == "inline":
            if run_at <= now:
                due_inline.append(ready_key(priority, run_at, seq))
                expected.append((-priority, run_at, seq))
            seq += 1
        else:
            count, taken = source[3], min(source[4], source[3])
            refs.append(SegmentRef(key_of(seq), "e", seq, count, priority, run_at, taken))
            if run_at <= now:
                expected += [(-priority, run_at, s) for s in range(seq + taken, seq + count)]
            seq += count
    want = [ready_key(-p, r, s) for p, r, s in sorted(expected)]
    # in runs (run_from), as a claim would take them
    assert sg.merged_order(due_inline, refs, now) == want
    # and one job at a time
    heap, cursors, got = sorted(due_inline), list(refs), []
    while (source := sg.next_from(heap[0] if heap else None, cursors, now)) is not None:
        if source == sg.INLINE:
            got.append(heap.pop(0))
        else:
            got.append(sg.due_key(cursors[source], now))
            cursors[source] = sg.take(cursors, source)
    assert got == want
    assert sg.segment_counts(cursors) == sum(r.remaining for r in refs if r.run_at_ms > now)


# -- purge, exhaustion, stats ---------------------------------------------------------


def test_purge_drops_every_ref_and_counts_its_pending_jobs() -> None:
    refs = [ref_for(1, 5, taken=2), ref_for(10, 3), ref_for(20, 4, taken=4)]
    dropped, purged = sg.purge_segments(refs)
    assert dropped == refs
    assert purged == 3 + 3 + 0
    assert sg.purge_segments([]) == ([], 0)


def test_drop_exhausted_and_stats() -> None:
    refs = [ref_for(1, 5, taken=2, run_at_ms=T0 + 50), ref_for(10, 3, taken=3, run_at_ms=T0),
            ref_for(20, 4, run_at_ms=T0 + 10), ref_for(30, 1, run_at_ms=T0 + 100)]
    live, exhausted = sg.drop_exhausted(refs)
    assert live == [refs[0], refs[2], refs[3]]
    assert exhausted == [refs[1]]
    assert sg.segment_counts(refs) == 3 + 0 + 4 + 1
    assert sg.oldest_due(refs) == T0 + 10  # (the exhausted one does not count)
    assert sg.next_wakeup(refs, T0 + 10) == T0 + 50
    assert sg.next_wakeup(refs, T0 + 100) is None
    assert sg.oldest_due([]) is None
    assert sg.segment_counts([]) == 0
