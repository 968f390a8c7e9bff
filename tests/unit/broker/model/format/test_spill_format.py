"""broker.model.format.spill_format: a spill object's bytes (``osqueue-jobs`` v1),
written sorted and split at the bounds, its error texts stored once per object
and bounded per job, and the one check of a read object. Pure: no store, no I/O."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import groupby, pairwise
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import timefmt
from broker.errors import CorruptState, SegmentMissing
from broker.limits import ERRORS_KEPT, MAX_ERROR_CHARS
from broker.model.format import spill_format as sf
from broker.model.format.spill_format import ErrorEntry, SpilledJob
from broker.model.format.spill_refs import SpillRef, redriven
from broker.model.job import DEAD, PENDING
from tests.support.spill_objects import ETAG, STORE, T0, spill_key, spilled, spilled_jobs, written

SECRET = b'{"secret":"do-not-quote-me"}'


def _lines(data: bytes) -> list[Any]:
    # (split at line breaks only, as jq does: a text may hold U+2028)
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def _read(obj: sf.EncodedSpill, ref: SpillRef, **window: int) -> list[SpilledJob]:
    return sf.read_checked(ref, obj.data, ref.etag, STORE, **window)


# -- the object's bytes ---------------------------------------------------------------


def test_a_pending_object_is_a_header_then_one_job_a_line_readable_with_jq() -> None:
    jobs = [spilled(7, key="k-7", payload=b'{"doc": 7}'),
            spilled(5, errors=(ErrorEntry(1, T0 - 1, "first"), ErrorEntry(2, T0, "second")),
                    attempts=2)]
    [(obj, _)] = written(PENDING, jobs)
    header, *lines = _lines(obj.data)
    assert header == {"format": "osqueue-jobs", "version": 1, "queue": "q", "kind": "pending",
                      "priority": 0, "count": 2, "errors": ["first", "second",
                                                            "ValueError: boom"]}
    assert lines == [
        {"id": "j0000000005", "seq": 5, "run_at": timefmt.fmt(T0 + 5), "attempts": 2,
         "max_attempts": 3, "created_at": timefmt.fmt(T0),
         "err": [[1, timefmt.fmt(T0 - 1), 0], [2, timefmt.fmt(T0), 1]], "payload": {"n": 5}},
        {"id": "j0000000007", "seq": 7, "run_at": timefmt.fmt(T0 + 7), "attempts": 1,
         "max_attempts": 3, "created_at": timefmt.fmt(T0), "key": "k-7",
         "err": [[1, timefmt.fmt(T0), 2]], "payload": {"doc": 7}}]
    # the payload is kept verbatim (its space too), and comes last on its line
    assert obj.data.splitlines()[2].endswith(b',"payload":{"doc": 7}}')
    assert (obj.kind, obj.priority, obj.count, obj.seqs) == (PENDING, 0, 2, (5, 7))
    assert (obj.next, obj.due_min, obj.created_min) == ((T0 + 5, 5), T0 + 5, T0)


def test_a_job_without_errors_or_key_has_neither_field() -> None:
    [(obj, _)] = written(PENDING, [spilled(3, errors=(), attempts=0)])
    header, line = _lines(obj.data)
    assert header["errors"] == [] and "err" not in line and "key" not in line


def test_pending_jobs_make_one_object_per_priority_sorted_by_run_at_then_seq() -> None:
    jobs = [spilled(1, priority=0, run_at_ms=T0 + 9), spilled(2, priority=5, run_at_ms=T0 + 3),
            spilled(3, priority=0, run_at_ms=T0 + 1), spilled(4, priority=5, run_at_ms=T0 + 3),
            spilled(5, priority=-1, run_at_ms=T0), spilled(6, priority=0, run_at_ms=T0 + 1)]
    objects = written(PENDING, jobs)
    assert [(obj.priority, [job.seq for job in _read(obj, ref)]) for obj, ref in objects] == [
        (5, [2, 4]), (0, [3, 6, 1]), (-1, [5])]
    assert [_lines(obj.data)[0]["priority"] for obj, _ in objects] == [5, 0, -1]


def test_a_dead_object_is_sorted_by_priority_higher_first_then_seq() -> None:
    jobs = [spilled(seq, priority=priority, attempts=3)
            for seq, priority in ((1, 0), (2, 9), (3, 0), (4, -3), (5, 9))]
    [(obj, ref)] = written(DEAD, jobs)
    header, *lines = _lines(obj.data)
    assert "priority" not in header and header["kind"] == "dead"
    assert [(line["priority"], line["seq"]) for line in lines] == [
        (9, 2), (9, 5), (0, 1), (0, 3), (-3, 4)]
    assert obj.first == (9, 2) and ref.first == (9, 2)
    assert [job.seq for job in _read(obj, ref)] == [2, 5, 1, 3, 4]


def test_objects_split_at_the_job_bound() -> None:
    jobs = [spilled(seq) for seq in range(1, 12)]
    objects = written(PENDING, jobs, max_jobs=4)
    assert [obj.count for obj, _ in objects] == [4, 4, 3]
    assert [job.seq for obj, ref in objects for job in _read(obj, ref)] == list(range(1, 12))


def test_objects_split_at_the_byte_bound_but_a_larger_job_goes_alone() -> None:
    jobs = [spilled(seq, payload=b'{"pad":"%s"}' % (b"x" * 300)) for seq in range(1, 9)]
    jobs.append(spilled(9, payload=b'{"pad":"%s"}' % (b"y" * 5000)))
    objects = written(PENDING, jobs, max_bytes=2000)
    sizes = [(obj.count, len(obj.data)) for obj, _ in objects]
    assert all(size <= 2000 for count, size in sizes if count > 1)
    assert sizes[-1][0] == 1 and sizes[-1][1] > 2000  # the big one, alone
    assert sum(count for count, _ in sizes) == 9 and len(sizes) > 3
    assert sf.MAX_SPILL_JOBS == 65_536 and sf.MAX_SPILL_BYTES == 16 * 1024 * 1024


# -- the error table and the history bound ------------------------------------------------


def test_a_bad_deploys_identical_errors_are_stored_once_per_object() -> None:
    trace = "Traceback (most recent call last):\n" + "  File x, line 1\n" * 150 + "Boom"
    jobs = [spilled(seq, attempts=2, max_attempts=2,
                    errors=(ErrorEntry(1, T0, trace), ErrorEntry(2, T0 + 5, trace)))
            for seq in range(1, 501)]
    objects = written(DEAD, jobs, max_jobs=200)
    assert len(objects) == 3
    for obj, ref in objects:
        header, *lines = _lines(obj.data)
        assert header["errors"] == [trace]
        assert {tuple(i for _, _, i in line["err"]) for line in lines} == {(0, 0)}
        assert obj.data.count(b"Boom") == 1  # the text once, whatever the job count
        assert all(job.errors == (ErrorEntry(1, T0, trace), ErrorEntry(2, T0 + 5, trace))
                   and job.last_error == trace for job in _read(obj, ref))


def test_distinct_texts_are_numbered_in_order_of_first_use() -> None:
    jobs = [spilled(1, errors=(ErrorEntry(1, T0, "b"),)),
            spilled(2, errors=(ErrorEntry(1, T0, "a"), ErrorEntry(2, T0, "b")), attempts=2),
            spilled(3, errors=(ErrorEntry(1, T0, "c"),))]
    [(obj, _)] = written(PENDING, jobs)
    header, *lines = _lines(obj.data)
    assert header["errors"] == ["b", "a", "c"]
    assert [[i for _, _, i in line["err"]] for line in lines] == [[0], [1, 0], [2]]


def test_bounded_errors_keeps_the_first_attempts_and_the_latest_each_cut() -> None:
    history = [ErrorEntry(n, T0 + n, f"error {n}:" + "z" * 5000) for n in range(1, 21)]
    kept = sf.bounded_errors(history)
    assert ERRORS_KEPT == 8
    assert [entry.attempt for entry in kept] == [1, 14, 15, 16, 17, 18, 19, 20]
    assert all(len(entry.text) == MAX_ERROR_CHARS for entry in kept)
    assert kept[1].text == history[13].text[-MAX_ERROR_CHARS:]  # the end: where it raised
    assert sf.bounded_errors(history[:8]) == tuple(
        entry._replace(text=entry.text[-MAX_ERROR_CHARS:]) for entry in history[:8])


def test_a_spilled_jobs_history_is_bounded_per_job() -> None:
    history = tuple(ErrorEntry(n, T0 + n, "q" * 4500 + f"-e{n}") for n in range(1, 13))
    [(obj, ref)] = written(DEAD, [spilled(1, attempts=3, errors=history)])
    [job] = _read(obj, ref)
    assert job.errors == sf.bounded_errors(history)
    assert [entry.attempt for entry in job.errors] == [1, 6, 7, 8, 9, 10, 11, 12]
    assert len(_lines(obj.data)[0]["errors"]) == 8
    assert len(obj.data) < 8 * (MAX_ERROR_CHARS + 200)


# -- round trips ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=st.sampled_from([PENDING, DEAD]),
       max_jobs=st.integers(1, 8), max_bytes=st.integers(300, 6000))
def test_any_jobs_come_back_from_their_objects_sorted_and_split_at_the_bounds(
        data: st.DataObject, kind: str, max_jobs: int, max_bytes: int) -> None:
    jobs = data.draw(spilled_jobs(kind))
    objects = written(kind, jobs, max_jobs=max_jobs, max_bytes=max_bytes)
    back = [_read(obj, ref) for obj, ref in objects]
    want = [replace(job, errors=sf.bounded_errors(job.errors)) for job in jobs]
    # every job once, as it went in (history bounded), payload bytes verbatim
    assert sorted((job for part in back for job in part), key=lambda j: j.seq) == sorted(
        want, key=lambda j: j.seq)
    if kind == PENDING:  # one priority an object, higher first; each by (run_at, seq)
        assert all(len({job.priority for job in part}) == 1 for part in back)
        priorities = [part[0].priority for part in back]
        assert priorities == sorted(priorities, reverse=True)
        assert all(part == sorted(part, key=lambda j: (j.run_at_ms, j.seq)) for part in back)
    else:  # the objects in a row are (priority desc, seq)
        flat = [job for part in back for job in part]
        assert flat == sorted(want, key=lambda j: (-j.priority, j.seq))
    for (obj, _), part in zip(objects, back, strict=True):
        assert obj.count == len(part) <= max_jobs
        assert len(obj.data) <= max_bytes or obj.count == 1
        assert obj.seqs == (min(j.seq for j in part), max(j.seq for j in part))
        assert obj.first == (part[0].priority, part[0].seq)
        assert obj.due_min == min(j.run_at_ms for j in part)
        assert obj.created_min == min(j.created_ms for j in part)
        # a text is in an object's table once, and only if a job of it has it
        table = _lines(obj.data)[0]["errors"]
        assert sorted(table) == sorted({e.text for j in part for e in j.errors})
    # filled in order: the next object of a group starts only when this one is full
    for _, group in groupby(zip(objects, back, strict=True), key=lambda o: o[0][0].priority):
        members = list(group)
        for ((obj, _), _part), ((_, _), nxt) in pairwise(members):
            [(alone, _)] = written(kind, [nxt[0]])
            texts = set(_lines(alone.data)[0]["errors"]) - set(_lines(obj.data)[0]["errors"])
            more = len(alone.data.split(b"\n")[1]) + 1 + sum(
                len(orjson.dumps(text)) + 1 for text in texts)
            # (16: what the size estimate may count above the bytes: digits, a comma)
            assert obj.count == max_jobs or len(obj.data) + more > max_bytes - 16


# -- reading a window -----------------------------------------------------------------------


def test_a_window_reads_its_positions_and_defaults_to_the_untaken_jobs() -> None:
    [(obj, ref)] = written(PENDING, [spilled(seq) for seq in range(10, 20)])
    assert [j.seq for j in _read(obj, ref, start=3, stop=6)] == [13, 14, 15]
    assert [j.seq for j in _read(obj, replace(ref, taken=8))] == [18, 19]
    assert _read(obj, ref, start=4, stop=4) == []


def test_a_dead_object_redriven_by_reference_reads_as_pending_jobs_due_at_the_reset() -> None:
    jobs = [spilled(seq, attempts=3, priority=seq % 3) for seq in range(1, 7)]
    [(obj, ref)] = written(DEAD, jobs)
    reset = T0 + 10**6
    back = _read(obj, redriven(ref, reset))
    assert [(j.seq, j.attempts, j.run_at_ms) for j in back] == [
        (2, 0, reset), (5, 0, reset), (1, 0, reset), (4, 0, reset), (3, 0, reset),
        (6, 0, reset)]
    assert all(j.errors == jobs[0].errors for j in back)
    assert [j.attempts for j in _read(obj, ref)] == [3] * 6  # (the dead ref: as stored)


def test_a_line_becomes_the_jobs_fields_as_a_job_of_its_status() -> None:
    [(obj, ref)] = written(DEAD, [spilled(4, key="k", priority=3, attempts=3, errors=(
        ErrorEntry(1, T0, "one"), ErrorEntry(2, T0 + 1, "two")))])
    [spilled_job] = _read(obj, ref)
    job = spilled_job.to_job(DEAD)
    assert (job.id, job.status, job.priority, job.attempts, job.max_attempts) == (
        "j0000000004", DEAD, 3, 3, 3)
    assert (job.key, job.last_error, job.payload, job.run_at_ms, job.created_ms) == (
        "k", "two", b'{"n":4}', T0 + 4, T0)
    assert spilled(1, errors=(ErrorEntry(1, T0, ""),)).to_job(PENDING).last_error is None
    with pytest.raises(ValueError, match="pending or dead"):
        spilled_job.to_job("claimed")


# -- refusals when writing ---------------------------------------------------------------


@pytest.mark.parametrize(("kind", "jobs", "match"), [
    ("retrying", [spilled(1)], "kind 'retrying'"),
    (PENDING, [], "no jobs"),
    (PENDING, [spilled(1), spilled(1)], "twice"),
    (PENDING, [spilled(1, attempts=3)], "j0000000001: attempts"),
    (PENDING, [spilled(1, payload=b'{"a":\n1}')], "j0000000001: its payload.*line break"),
    (PENDING, [spilled(1, payload=b"")], "empty"),
    (DEAD, [spilled(2, priority=10**7, attempts=3)], "j0000000002: priority"),
    (DEAD, [spilled(2, run_at_ms=-1)], "run_at"),
    (DEAD, [spilled(2, key="")], "key must be"),
    (DEAD, [spilled(2, errors=(ErrorEntry(0, T0, "x"),))], r"err\[0\] attempt"),
])
def test_encode_spills_refuses_what_cannot_be_spilled(kind: str, jobs: list[SpilledJob],
                                                      match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        sf.encode_spills("q", kind, jobs)
    assert "spill of 'q'" in str(info.value) and "\n1}" not in str(info.value)


def test_encode_spills_refuses_a_bad_queue_name() -> None:
    with pytest.raises(ValueError, match="queue name"):
        sf.encode_spills("../q", PENDING, [spilled(1)])


# -- refusals when reading ---------------------------------------------------------------


def _object(kind: str = PENDING) -> tuple[bytes, SpillRef]:
    jobs = [spilled(seq, attempts=2 if kind == DEAD else 1, key="k" if seq == 2 else None,
                    payload=SECRET if seq == 3 else b'{"n":%d}' % seq) for seq in (1, 2, 3)]
    [(obj, ref)] = written(kind, jobs)
    return obj.data, ref


def _edit_header(data: bytes, **fields: Any) -> bytes:
    header, rest = data.split(b"\n", 1)
    raw = orjson.loads(header)
    for name, value in fields.items():
        if value is None:
            raw.pop(name)
        else:
            raw[name] = value
    return orjson.dumps(raw) + b"\n" + rest


def _edit_line(data: bytes, n: int, line: bytes | None = None, **fields: Any) -> bytes:
    lines = data.split(b"\n")
    if line is None:
        raw = orjson.loads(lines[n])
        for name, value in fields.items():
            if value is None:
                raw.pop(name)
            else:
                raw[name] = value
        raw["payload"] = raw.pop("payload")  # (last, as the broker writes it)
        line = orjson.dumps(raw)
    lines[n] = line
    return b"\n".join(lines)


REFUSALS = [
    ("not the format", lambda d: _edit_header(d, format="osqueue-segment"),
     "not an osqueue-jobs object"),
    ("a newer version", lambda d: _edit_header(d, version=2), "version 2"),
    ("an unknown kind", lambda d: _edit_header(d, kind="retrying"), "header kind 'retrying'"),
    ("another kind", lambda d: _edit_header(d, kind="dead", priority=None),
     "disagrees with the queue's reference on kind"),
    ("another priority", lambda d: _edit_header(d, priority=4), "on priority"),
    ("another count", lambda d: _edit_header(d, count=4), "on count"),
    ("another queue", lambda d: _edit_header(d, queue="other"), "on queue"),
    ("an extra header field", lambda d: _edit_header(d, extra=1), "header fields"),
    ("no error table", lambda d: _edit_header(d, errors=None), "header fields"),
    ("a bad error table", lambda d: _edit_header(d, errors=[1]), "header errors"),
    ("no header", lambda d: b"", "no header line"),
    ("a header not JSON", lambda d: b"{" + d, "header line is not JSON"),
    ("a truncated last line", lambda d: d[:-9], "truncated: its last line"),
    ("a missing line", lambda d: d[:d.rindex(b"\n", 0, -1) + 1], "truncated: 2 job lines"),
    ("an extra line", lambda d: d + b'{"x":1}\n', "has extra lines"),
    ("a line not JSON", lambda d: _edit_line(d, 1, b'{"id":,"payload":1}'),
     "line 2: not a JSON object"),
    ("a line with no payload", lambda d: _edit_line(d, 1, b'{"id":"j0000000001"}'),
     "line 2: not a job line"),
    ("a payload not last", lambda d: _edit_line(
        d, 1, d.split(b"\n")[1].replace(b'"attempts":1,', b"")[:-1] + b',"attempts":1}'),
     "line 2: "),
    ("a payload not JSON", lambda d: _edit_line(
        d, 1, d.split(b"\n")[1].replace(b'"payload":{"n":1}', b'"payload":{"n":1')),
     "line 2: its payload is not JSON"),
    ("a second payload", lambda d: _edit_line(
        d, 1, d.split(b"\n")[1][:-1] + b',"payload":2}'), "line 2: its payload is not JSON"),
    ("an id not its seq's", lambda d: _edit_line(d, 2, id="j0000000009"),
     "line 3: id 'j0000000009'"),
    ("an unknown field", lambda d: _edit_line(d, 2, status="pending"), "line 3: fields"),
    ("a missing field", lambda d: _edit_line(d, 2, created_at=None), "line 3: fields"),
    ("a bad time", lambda d: _edit_line(d, 2, run_at="yesterday"), "line 3: run_at"),
    ("no attempts left", lambda d: _edit_line(d, 2, attempts=3), "line 3: attempts"),
    ("a key not text", lambda d: _edit_line(d, 2, key=5), "line 3: key"),
    ("an error index past the table", lambda d: _edit_line(
        d, 2, err=[[1, timefmt.fmt(T0), 1]]), r"line 3: err\[0\] index"),
    ("an error entry of two", lambda d: _edit_line(d, 2, err=[[1, 0]]), r"err\[0\] must be"),
    ("an empty history", lambda d: _edit_line(d, 2, err=[]), "err must be a non-empty list"),
    ("too long a history", lambda d: _edit_line(
        d, 2, err=[[1, timefmt.fmt(T0), 0]] * 9), "9 errors kept; at most 8"),
    ("a seq not an integer", lambda d: _edit_line(d, 2, seq=True),
     "line 3: seq must be an integer"),
    ("a time before 1970", lambda d: _edit_line(d, 2, created_at="1969-12-31T23:59:59.000Z"),
     "line 3: created_at .* before 1970"),
    ("a time not text", lambda d: _edit_line(d, 2, run_at=5), "line 3: run_at must be a time"),
    ("no attempt at all", lambda d: _edit_line(d, 2, max_attempts=0), "line 3: max_attempts"),
    ("an error's attempt 0", lambda d: _edit_line(d, 2, err=[[0, timefmt.fmt(T0), 0]]),
     r"line 3: err\[0\] attempt"),
    ("an error's attempt a bool", lambda d: _edit_line(d, 2, err=[[True, timefmt.fmt(T0), 0]]),
     r"line 3: err\[0\] attempt"),
    ("an error's index a bool", lambda d: _edit_line(d, 2, err=[[1, timefmt.fmt(T0), False]]),
     r"line 3: err\[0\] index"),
    ("a later error's time bad", lambda d: _edit_line(
        d, 2, err=[[1, timefmt.fmt(T0), 0], [2, "noon", 0]]), r"line 3: err\[1\] failed_at"),
    ("lines out of order", lambda d: _edit_line(d, 3, d.split(b"\n")[1]), "line 4: out of order"),
    ("a seq outside the reference", lambda d: _edit_line(
        d, 3, d.split(b"\n")[3].replace(b"j0000000003", b"j0000000008").replace(
            b'"seq":3', b'"seq":8')), "line 4: seq 8 is outside"),
]


@pytest.mark.parametrize(("what", "edit", "match"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_read_checked_refuses_an_object_that_is_not_its_references(
        what: str, edit: Any, match: str) -> None:
    data, ref = _object()
    bad = edit(data)
    assert bad != data
    with pytest.raises(CorruptState, match=match) as info:
        sf.read_checked(ref, bad, ref.etag, STORE, 0, 3)
    message = str(info.value)
    assert info.value.code == "corrupt_state"
    assert f"{STORE}: spill object {ref.key}" in message
    assert "do-not-quote-me" not in message


def test_read_checked_refuses_a_dead_object_whose_first_job_is_not_its_references() -> None:
    data, ref = _object(DEAD)
    with pytest.raises(CorruptState, match=r"line 2: the first job is not the reference's"):
        sf.read_checked(replace(ref, first=(0, 2)), data, ref.etag, STORE)
    with pytest.raises(CorruptState, match="on kind"):  # (a dead object, a pending ref)
        sf.read_checked(replace(ref, kind=PENDING, priority=0, first=None), data, ref.etag,
                        STORE)


def test_read_checked_refuses_an_object_under_a_key_of_the_other_kind() -> None:
    data, ref = _object()
    moved = replace(ref, key=spill_key(DEAD))
    with pytest.raises(CorruptState, match="on the kind its key names"):
        sf.read_checked(moved, data, ref.etag, STORE)


def test_read_checked_refuses_a_window_outside_the_object() -> None:
    data, ref = _object()
    with pytest.raises(CorruptState, match=r"window \[2, 4\) is outside \[0, 3\]"):
        sf.read_checked(ref, data, ref.etag, STORE, 2, 4)


def test_read_checked_says_which_object_is_missing_or_rewritten() -> None:
    data, ref = _object()
    with pytest.raises(SegmentMissing, match="references spill object "
                       f"{STORE}/{ref.key}, which is missing") as info:
        sf.read_checked(ref, None, None, STORE)
    assert info.value.code == "segment_missing"
    with pytest.raises(SegmentMissing, match=f"at etag '{ETAG}', but the object has etag"):
        sf.read_checked(ref, data, '"etag-2"', STORE)
