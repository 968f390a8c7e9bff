"""broker.model.format.segment_format, grouped: segment format version 3 (a
directory of the jobs' groups in the header), its checks, and the JSON of a
grouped segment's reference (``groups``, ``taken_at``). Pure: no store, no I/O.
(The operations on ``taken_at``: segments/test_refs_taken_at.py.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import timefmt
from broker.errors import CorruptState
from broker.limits import MAX_GROUP_CHARS
from broker.model.format import segment_format as sf
from broker.model.job_lines import job_line
from broker.model.state import SegmentRef
from tests.support.segment_refs import T0, key_of, payloads, ref_for

GOLDEN_V3 = Path(__file__).resolve().parents[4] / "fixtures" / "golden_segment_v3.jsonl"
KEY = key_of(1001)
#: A group name's tail that a refusal must not quote (beyond shown()'s cut).
HIDDEN = "HIDDEN-TAIL-of-a-long-name"
LONG = "n" * 70 + HIDDEN


# -- version 3: written only with a directory ----------------------------------------


def golden_args() -> dict[str, Any]:
    return {"queue": "q", "first_seq": 1001, "priority": 2,
            "run_at_ms": timefmt.parse("2026-11-23T03:43:47.123Z"),
            "payloads": [b'{"doc":"a1"}', b'{"doc":"a2"}', b'{"doc":"b1"}',
                         b'[1,2,{"a":null}]', b'"x"'],
            "max_attempts": 5, "created_ms": timefmt.parse("2026-11-23T03:42:47.123Z"),
            "groups": [('tenant\u00e9 "A"', 2), ("b/1", 2), (None, 1)]}


def test_the_golden_version_3_segment_is_written_byte_for_byte() -> None:
    """The golden file is a version-3 segment as this encoder writes it (JSON
    escapes in a name, a null run last); it must not be regenerated to make a
    change pass: a change here is a change of format."""
    args = golden_args()
    assert sf.encode_segment(**args) == GOLDEN_V3.read_bytes()
    header = sf.read_header(GOLDEN_V3.read_bytes(), KEY)
    assert header.version == 3
    assert header.groups == tuple(args["groups"])
    assert (header.first_seq, header.count, header.priority, header.max_attempts) == \
        (1001, 5, 2, 5)


def test_without_groups_the_segment_is_version_2_as_before() -> None:
    plain = sf.encode_segment("q", 5, 0, T0, payloads(3), max_attempts=3)
    assert sf.encode_segment("q", 5, 0, T0, payloads(3), max_attempts=3, groups=None) == plain
    assert b'"version":2' in plain and b"groups" not in plain
    assert sf.read_header(plain, key_of(5)).groups is None


names = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FFF,
                              blacklist_characters="\x7f"), min_size=1, max_size=MAX_GROUP_CHARS)


@st.composite
def directories(draw: st.DrawFn) -> list[tuple[str | None, int]]:
    groups = draw(st.lists(names | st.none(), min_size=1, max_size=12, unique=True))
    if groups == [None]:
        groups.insert(draw(st.integers(0, 1)), draw(names))
    return [(g, draw(st.integers(1, 5))) for g in groups]


@settings(max_examples=150, deadline=None)
@given(runs=directories(), first_seq=st.integers(1, 10**12), priority=st.integers(-5, 5))
def test_a_directory_round_trips_through_header_and_directory(
        runs: list[tuple[str | None, int]], first_seq: int, priority: int) -> None:
    count = sum(n for _, n in runs)
    data = sf.encode_segment("q", first_seq, priority, T0, payloads(count), max_attempts=3,
                             groups=runs)
    key = key_of(first_seq)
    header = sf.read_header(data, key)
    assert header.groups == tuple(runs) and header.count == count
    line = data[:data.index(b"\n") + 1]
    ref = replace(ref_for(first_seq, count, priority), groups=len(runs))
    assert sf.read_directory(line, key) == tuple(runs)
    assert sf.read_directory(line + b'{"n":', key, ref) == tuple(runs)
    assert orjson.loads(line)["groups"] == [[g, n] for g, n in runs]


# -- refusals --------------------------------------------------------------------------


def v3_with(groups: Any, count: int = 5, version: Any = 3) -> bytes:
    """The golden segment with its header's ``groups`` (and count, version) replaced."""
    lines = GOLDEN_V3.read_bytes().split(b"\n", 1)
    header = orjson.loads(lines[0])
    header.update(groups=groups, count=count, version=version)
    if groups is ...:
        del header["groups"]
    return orjson.dumps(header) + b"\n" + lines[1]


@pytest.mark.parametrize(("groups", "match"), [
    ({"a": 5}, r"header groups must be a non-empty list of \[group, count\] runs"),
    ([], r"header groups must be a non-empty list"),
    ([["a", 4], ["b"]], r"header groups\[1\] must be a \[group, count\] pair"),
    ([["a", 4], "b1"], r"header groups\[1\] must be a \[group, count\] pair"),
    ([["a", 4], [7, 1]], r"header groups\[1\]: group must be a string of 1..128"),
    ([["a", 4], ["", 1]], r"header groups\[1\]: group must be a string"),
    ([["a", 4], ["a\nb", 1]], r"header groups\[1\]: group must be a string"),
    ([["a", 4], ["x\x7f", 1]], r"header groups\[1\]: group must be a string"),
    ([["a", 4], ["x" * 129, 1]], r"header groups\[1\]: group must be a string"),
    ([["a", 4], [LONG + "\x01", 1]], r"header groups\[1\]: group must be a string"),
    ([["a", 5], ["b", 0]], r"header groups\[1\] count must be an integer within \[1, 5\]"),
    ([["a", 4], ["b", True]], r"header groups\[1\] count must be an integer"),
    ([["a", 4], ["b", 1.0]], r"header groups\[1\] count must be an integer"),
    ([["a", 6]], r"header groups\[0\] count must be an integer within \[1, 5\]"),
    ([["a", 2], ["b", 1], ["a", 2]], r"header groups\[2\] names group 'a' again "
                                      r"\(first at run 0\)"),
    ([[LONG, 2], [None, 1], [LONG, 2]], r"header groups\[2\] names group 'n"),
    ([[None, 2], ["b", 1], [None, 2]], r"header groups\[2\] names group None again"),
    ([["a", 3], ["b", 3]], r"header groups\[1\] ends at position 6, past the 5 jobs"),
    ([["a", 3], ["b", 1]], r"header groups\[1\] ends at position 4, short of the 5 jobs"),
    ([[None, 5]], r"header groups\[0\] is the only run and has no group: a segment "
                  r"without groups is version 2"),
    (..., r"header fields \['groups'\] missing or unknown"),
])
def test_a_bad_directory_is_refused_naming_the_key_and_the_run(groups: Any, match: str) -> None:
    data = v3_with(groups)
    with pytest.raises(ValueError, match=match) as info:
        sf.read_header(data, KEY)
    assert str(info.value).startswith(f"segment {KEY}: ")
    assert HIDDEN not in str(info.value)
    with pytest.raises(ValueError, match=match):
        sf.read_directory(data.split(b"\n", 1)[0] + b"\n", KEY)
    with pytest.raises(CorruptState, match=match):  # (what the broker and Spark read through)
        sf.read_checked(replace(ref_for(1001, 5, 2, timefmt.parse("2026-11-23T03:43:47.123Z")),
                                groups=3), data, "etag-1", "file:///store")


@pytest.mark.parametrize(("groups", "match"), [
    ([], r"groups must be a non-empty list"),
    ([("a", 2), ("b", 2)], r"groups\[1\] ends at position 4, short of the 5 jobs"),
    ([("a", 2), ("a", 3)], r"groups\[1\] names group 'a' again"),
    ([(LONG + "\x00", 5)], r"groups\[0\]: group must be a string"),
    ([(None, 5)], r"groups\[0\] is the only run and has no group"),
    ([("a", 0), ("b", 5)], r"groups\[0\] count must be an integer within \[1, 5\]"),
])
def test_the_encoder_refuses_what_the_reader_would(groups: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        sf.encode_segment("q", 1, 0, T0, payloads(5), max_attempts=3, groups=groups)
    assert str(info.value).startswith("segment of 'q': groups")
    assert HIDDEN not in str(info.value)


def test_a_version_2_header_with_a_directory_is_refused() -> None:
    with pytest.raises(ValueError, match=r"header fields \['groups'\] missing or unknown"):
        sf.read_header(v3_with([["a", 5]], version=2), KEY)


@pytest.mark.parametrize("version", [4, 99, 0, "3", True, None])
def test_a_version_this_broker_does_not_know_is_refused(version: Any) -> None:
    """A newer version is refused as one this broker does not read, as a
    broker before version 3 refuses version 3 (main at 737a174: "version 3;
    this broker reads versions 1 to 2")."""
    with pytest.raises(ValueError, match=rf"segment {KEY}: version .*; this broker reads "
                                         r"versions 1 to 3$"):
        sf.read_header(v3_with([["a", 5]], version=version), KEY)


def test_a_header_line_over_the_bound_is_refused_before_it_is_parsed() -> None:
    line = b'{"format":"osqueue-segment",' + b" " * sf.MAX_SEGMENT_HEADER_BYTES + b'"version":3}'
    for data in (line + b"\n{}\n", line):
        with pytest.raises(ValueError, match=rf"segment {KEY}: the header line is over "
                                             rf"{sf.MAX_SEGMENT_HEADER_BYTES} bytes"):
            sf.read_header(data, KEY)


def test_a_directory_whose_header_would_pass_the_bound_is_not_written() -> None:
    count = sf.MAX_SEGMENT_JOBS
    runs = [(f"{i:06d}" + "x" * (MAX_GROUP_CHARS - 6), 1) for i in range(count)]
    with pytest.raises(ValueError, match=r"segment of 'q': header of \d+ bytes is over 8388608"):
        sf.encode_segment("q", 1, 0, T0, [b"1"] * count, max_attempts=3, groups=runs)
    # (half as long names fit: the bound is on bytes, not runs)
    short = [(name[:60], 1) for name, _ in runs]
    data = sf.encode_segment("q", 1, 0, T0, [b"1"] * count, max_attempts=3, groups=short)
    assert sf.read_header(data, key_of(1)).groups == tuple(short)


# -- the object against its reference --------------------------------------------------


GOLDEN_REF = SegmentRef(KEY, "etag-1", 1001, 5, 2, timefmt.parse("2026-11-23T03:43:47.123Z"),
                        groups=3)


@pytest.mark.parametrize(("ref", "data"), [
    (replace(GOLDEN_REF, groups=None), GOLDEN_V3.read_bytes()),  # ungrouped ref, v3 object
    (replace(GOLDEN_REF, groups=2), GOLDEN_V3.read_bytes()),  # another number of runs
    (GOLDEN_REF, sf.encode_segment(**{**golden_args(), "groups": None})),  # v2 object
])
def test_an_object_and_ref_that_disagree_on_groups_are_refused(
        ref: SegmentRef, data: bytes) -> None:
    with pytest.raises(ValueError, match=rf"segment {KEY}: header disagrees with the "
                                         r"queue's reference on groups$"):
        sf.check_segment(data, ref)
    with pytest.raises(ValueError, match=r"disagrees with the queue's reference on groups"):
        sf.segment_lines(data, ref)


def test_a_directory_read_against_a_ref_must_agree_with_it() -> None:
    line = GOLDEN_V3.read_bytes().split(b"\n", 1)[0] + b"\n"
    assert sf.read_directory(line, KEY, GOLDEN_REF) == tuple(golden_args()["groups"])
    for ref, odd in [(replace(GOLDEN_REF, groups=2), "groups"),
                     (replace(GOLDEN_REF, priority=1), "priority"),
                     (replace(GOLDEN_REF, count=4, groups=2), "count, groups")]:
        with pytest.raises(ValueError, match=rf"segment {KEY}: header disagrees with the "
                                             rf"queue's reference on {odd}$"):
            sf.read_directory(line, KEY, ref)


def test_a_grouped_segments_lines_carry_their_runs_groups_as_the_head_writes_them() -> None:
    """Each job's line has its group from the directory, spliced as the head's
    own grouped lines are (job_line of the job read back gives the same bytes);
    a window reads any positions; the default is the whole segment."""
    data = GOLDEN_V3.read_bytes()
    assert sf.check_segment(data, GOLDEN_REF).groups == tuple(golden_args()["groups"])
    lines = sf.read_checked(GOLDEN_REF, data, "etag-1", "file:///store", 0, 5)
    assert sf.segment_lines(data, GOLDEN_REF) == lines
    jobs = [sf.segment_job(seq, line, GOLDEN_REF) for seq, line in enumerate(lines, 1001)]
    assert [job.group for job in jobs] == ['tenant\u00e9 "A"'] * 2 + ["b/1"] * 2 + [None]
    assert [job.payload for job in jobs] == golden_args()["payloads"]
    assert {(job.priority, job.max_attempts, job.created_ms) for job in jobs} == {
        (2, 5, golden_args()["created_ms"])}
    for job, line in zip(jobs, lines, strict=True):
        job._enc = None
        assert job_line(job) == line
    assert sf.segment_lines(data, GOLDEN_REF, 1, 3) == lines[1:3]


def test_a_group_name_holding_a_percent_sign_is_not_a_format() -> None:
    args = {**golden_args(), "groups": [("100%s %d", 4), (None, 1)]}
    data = sf.encode_segment(**args)
    ref = replace(GOLDEN_REF, groups=2)
    lines = sf.segment_lines(data, ref)
    assert [sf.segment_job(seq, line, ref).group
            for seq, line in enumerate(lines, 1001)] == ["100%s %d"] * 4 + [None]


def test_read_directory_needs_the_whole_header_line_of_a_grouped_segment() -> None:
    data = GOLDEN_V3.read_bytes()
    with pytest.raises(ValueError, match=rf"segment {KEY}: no header line"):
        sf.read_directory(data[:data.index(b"\n")], KEY)
    plain = sf.encode_segment(**{**golden_args(), "groups": None})
    with pytest.raises(ValueError, match=rf"segment {KEY} \(version 2\) has no group directory"):
        sf.read_directory(plain, KEY)


# -- a grouped segment's reference ----------------------------------------------------------


def test_a_grouped_ref_json_is_the_ungrouped_one_plus_groups_and_taken_at() -> None:
    ref = replace(GOLDEN_REF, taken=3, taken_at=(0, 1, 2, 2))
    assert sf.ref_bytes(ref) == (
        b'{"key":"q/segments/seg-0000001001-0a1b2c3d.jsonl","etag":"etag-1","first_seq":1001,'
        b'"count":5,"priority":2,"run_at":"2026-11-23T03:43:47.123Z","taken":3,"groups":3,'
        b'"taken_at":[0,1,2,2]}')
    assert sf.ref_bytes(GOLDEN_REF).endswith(b'"taken":0,"groups":3}')  # (none taken: omitted)
    plain = replace(GOLDEN_REF, groups=None)
    assert sf.ref_bytes(plain) == orjson.dumps({
        "key": KEY, "etag": "etag-1", "first_seq": 1001, "count": 5, "priority": 2,
        "run_at": "2026-11-23T03:43:47.123Z", "taken": 0})
    for r in (ref, GOLDEN_REF):
        assert sf.ref_from_json(orjson.loads(sf.ref_bytes(r)), "w", grouped_ok=True) == r


def test_a_grouped_ref_is_refused_by_a_reader_not_asking_for_one() -> None:
    """Until the decoder reads grouped refs, it refuses them as a
    broker before groups would: their taken jobs are not a prefix."""
    raw = sf.ref_to_json(replace(GOLDEN_REF, taken=1, taken_at=(4, 1)))
    with pytest.raises(ValueError, match=r"fields \['groups', 'taken_at'\] missing or unknown"):
        sf.ref_from_json(raw, "queue q: segments[0]")


@st.composite
def taken_sets(draw: st.DrawFn) -> tuple[int, set[int]]:
    count = draw(st.integers(1, 40))
    return count, draw(st.sets(st.integers(0, count - 1)))


@settings(max_examples=200, deadline=None)
@given(case=taken_sets())
def test_taken_at_of_any_set_of_positions_round_trips(case: tuple[int, set[int]]) -> None:
    count, taken = case
    flat: list[int] = []
    for pos in sorted(taken):
        if flat and flat[-2] + flat[-1] == pos:
            flat[-1] += 1
        else:
            flat += [pos, 1]
    ref = SegmentRef(key_of(1), "e", 1, count, 0, T0, len(taken), groups=1,
                     taken_at=tuple(flat))
    back = sf.ref_from_json(orjson.loads(sf.ref_bytes(ref)), "w", grouped_ok=True)
    assert back == ref
    assert {p for s, n in zip(back.taken_at[::2], back.taken_at[1::2], strict=True)
            for p in range(s, s + n)} == taken


def grouped_raw(**change: Any) -> dict[str, Any]:
    raw = sf.ref_to_json(replace(GOLDEN_REF, taken=3, taken_at=(0, 1, 2, 2)))
    raw.update(change)
    return {k: v for k, v in raw.items() if v is not ...}


@pytest.mark.parametrize(("raw", "match"), [
    (grouped_raw(taken_at="0,1"), r"taken_at must be a non-empty list of \[from, count\] pairs"),
    (grouped_raw(taken_at=[]), r"taken_at must be a non-empty list"),
    (grouped_raw(taken_at=[0, 1, 2]), r"taken_at must be a non-empty list"),
    (grouped_raw(taken_at=[0, 1, "2", 2]), r"taken_at run 1 from must be an integer"),
    (grouped_raw(taken_at=[0, True, 2, 2]), r"taken_at run 0 count must be an integer"),
    (grouped_raw(taken_at=[-1, 1, 2, 2]), r"taken_at run 0 from must be an integer within "
                                          r"\[0, 4\]"),
    (grouped_raw(taken_at=[5, 3]), r"taken_at run 0 from must be an integer within \[0, 4\]"),
    (grouped_raw(taken_at=[0, 0, 2, 3]), r"taken_at run 0 count must be an integer within "
                                         r"\[1, 5\]"),
    (grouped_raw(taken_at=[3, 3]), r"taken_at run 0 count must be an integer within \[1, 2\]"),
    (grouped_raw(taken_at=[2, 2, 0, 1]), r"taken_at run 1 overlaps or comes before the run "
                                         r"before it"),
    (grouped_raw(taken_at=[0, 2, 1, 1]), r"taken_at run 1 overlaps or comes before"),
    (grouped_raw(taken_at=[0, 1, 1, 2]), r"taken_at run 1 touches the run before it \(runs "
                                         r"are ascending, disjoint and coalesced\)"),
    (grouped_raw(taken_at=[0, 1, 2, 1]), r"taken_at counts 2 taken positions, the reference "
                                         r"says 3"),
    (grouped_raw(taken_at=...), r"fields \['taken_at'\] missing or unknown"),
    (grouped_raw(taken=0), r"fields \['taken_at'\] missing or unknown"),
    (grouped_raw(groups=...), r"fields \['groups'\] missing or unknown"),
    (grouped_raw(groups=0), r"groups must be an integer within \[1, 5\]"),
    (grouped_raw(groups=6), r"groups must be an integer within \[1, 5\]"),
    (grouped_raw(groups=None), r"groups must be an integer"),
])
def test_a_bad_grouped_ref_is_refused_naming_where_and_the_run(
        raw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        sf.ref_from_json(raw, "queue q: segments[2]", grouped_ok=True)
    assert str(info.value).startswith("queue q: segments[2]: ")
