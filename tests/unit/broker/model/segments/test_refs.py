"""broker.model.segments.refs: segment keys, the head's references to segment
objects (their JSON: broker.model.format.segment_format), claim order across inline
jobs and segments, purge and stats. Pure: no store, no I/O. (The objects'
bytes: test_segment_format.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import paths
from broker.limits import MAX_PRIORITY
from broker.model.format import segment_format as sf
from broker.model.indexes import ready_key
from broker.model.segments import refs as sg
from broker.model.state import SegmentRef
from tests.support.segment_refs import T0, key_of, ref_for

SECRET = b'{"secret":"do-not-quote-me"}'


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


# -- the head's references ------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(first_seq=st.integers(1, 10**14), count=st.integers(1, sf.MAX_SEGMENT_JOBS), data=st.data(),
       priority=st.integers(-MAX_PRIORITY, MAX_PRIORITY), run_at=st.integers(0, 2**45),
       etag=st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1,
                    max_size=sf.MAX_ETAG_CHARS))
def test_ref_json_round_trips(first_seq: int, count: int, data: st.DataObject,
                              priority: int, run_at: int, etag: str) -> None:
    taken = data.draw(st.integers(0, count))
    ref = SegmentRef(key_of(first_seq), etag, first_seq, count, priority, run_at, taken)
    raw = json.loads(json.dumps(sf.ref_to_json(ref)))  # through the head's JSON
    assert sf.ref_from_json(raw, "segments[0]") == ref


def good_raw(**changes: Any) -> dict[str, Any]:
    raw = sf.ref_to_json(ref_for(10, 4, 3, T0, taken=1))
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
    (good_raw(etag="e" * (sf.MAX_ETAG_CHARS + 1)), "etag"),
    (good_raw(etag="e\n"), "etag"),
    (good_raw(count=0), "count"),
    (good_raw(count=sf.MAX_SEGMENT_JOBS + 1), "count"),
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
        sf.ref_from_json(raw, "queue q: segments[3]")
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


# -- purge, stats ---------------------------------------------------------


def test_purge_drops_every_ref_and_counts_its_pending_jobs() -> None:
    refs = [ref_for(1, 5, taken=2), ref_for(10, 3), ref_for(20, 4, taken=4)]
    dropped, purged = sg.purge_segments(refs)
    assert dropped == refs
    assert purged == 3 + 3 + 0
    assert sg.purge_segments([]) == ([], 0)


def test_stats_of_segments_leave_exhausted_ones_out() -> None:
    refs = [ref_for(1, 5, taken=2, run_at_ms=T0 + 50), ref_for(10, 3, taken=3, run_at_ms=T0),
            ref_for(20, 4, run_at_ms=T0 + 10), ref_for(30, 1, run_at_ms=T0 + 100)]
    assert sg.segment_counts(refs) == 3 + 0 + 4 + 1
    assert sg.oldest_due(refs) == T0 + 10  # (the exhausted one does not count)
    assert sg.next_wakeup(refs, T0 + 10) == T0 + 50
    assert sg.next_wakeup(refs, T0 + 100) is None
    assert sg.oldest_due([]) is None
    assert sg.segment_counts([]) == 0
