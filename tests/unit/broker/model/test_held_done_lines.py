"""broker.model.held.done_lines: the archive lines of a done entry's completions,
spliced from their segments' lines, are byte for byte what archive_line makes
of done_job's jobs (the path a successor, a page or an older broker takes):
any priority, due and creation time, seq width, worker name, result, and a
grouped line (made through its Job); an entry not committed is refused."""

from __future__ import annotations

import orjson
import pytest

from broker.model.claim_records import ClaimRecord, Done
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.held import done_job, done_lines
from broker.model.job_lines import archive_line, archived_from_pending, new_grouped_pending_lines
from broker.model.state import SegmentRef
from broker.paths import segment_key, segment_name

T0 = 1_767_225_600_123
PAYLOADS = [b'{"n":1}', b'"a \\"quoted\\" \\u2028 one"', b"[1,2]", b"null",
            orjson.dumps({"k": 'q"\\\u00e9', "payload": {"status": "pending"}}),
            b'{"attempts":0,"status":"pending"}']
RESULTS = [None, b'{"r":1}', b"null", b'"\\",\\"result\\":1"', b"[]", b"12345678901234567890"]
WORKERS = ["w-1", 'w"\\\u00e9\u2028-\U0001f600', ""]


def _lines(first: int, priority: int, run_at_ms: int,
           created_ms: int) -> tuple[SegmentRef, list[bytes]]:
    data = encode_segment("q", first, priority, run_at_ms, PAYLOADS, max_attempts=7,
                          created_ms=created_ms)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), '"e1"', first,
                     len(PAYLOADS), priority, run_at_ms)
    return ref, segment_lines(data, ref)


def _entry(first: int, fence: int, worker: str) -> tuple[ClaimRecord, Done]:
    record = ClaimRecord(fence, worker, 60_000, T0 + 60_000, T0,
                         seqs=[first - 2, first - 1, *range(first, first + len(PAYLOADS))])
    record.segs = [(2, len(PAYLOADS), "k", 0)]
    pos = [2, 3, 5, 6, 7]  # (not every position: the archive names only the completed)
    return record, Done(9, "c-8f3a", T0 + 5_000, pos, [RESULTS[p - 2] for p in pos])


@pytest.mark.parametrize("first,priority,run_at_ms,created_ms", [
    (1, 0, T0, T0), (123_456, -5, T0 + 86_400_000, T0 - 1), (98_765_432_101, 9, 0, 0)])
@pytest.mark.parametrize("worker", WORKERS)
def test_the_lines_are_archive_lines_of_the_jobs(first: int, priority: int, run_at_ms: int,
                                                 created_ms: int, worker: str) -> None:
    ref, lines = _lines(first, priority, run_at_ms, created_ms)
    record, entry = _entry(first, 1_000 + first, worker)
    got = [(ref, lines[p - 2]) for p in entry.pos]
    assert all(archived_from_pending(line, b"}\n") for _, line in got)  # (spliced, no Job)
    made = done_lines(record, entry, got)
    want = [archive_line(done_job(record, entry, i, r, line)) for i, (r, line) in enumerate(got)]
    assert made.lines == want
    assert made.seqs == [record.seqs[p] for p in entry.pos]
    assert (made.done_ms, made.done_seq, made.done_commit) == (
        entry.at_ms, entry.commit_seq, entry.commit)
    row = orjson.loads(made.lines[0])
    assert (row["status"], row["attempts"], row["worker"]) == ("completed", 1, worker)


def test_a_grouped_line_is_made_through_its_job() -> None:
    first = 40
    lines = new_grouped_pending_lines(first, PAYLOADS, ["g", None, '"x"', None, "g", "h"],
                                      T0, 3)
    ref = SegmentRef("q/segments/x", '"e1"', first, len(PAYLOADS), 0, T0)
    record, entry = _entry(first, 77, "w")
    got = [(ref, lines[p - 2]) for p in entry.pos]
    assert [archived_from_pending(line, b"}\n") is None for _, line in got] == [
        True, False, False, True, True]  # (the grouped ones: made through their Job)
    assert done_lines(record, entry, got).lines == [
        archive_line(done_job(record, entry, i, r, line)) for i, (r, line) in enumerate(got)]


def test_an_entry_not_committed_is_refused() -> None:
    ref, lines = _lines(1, 0, T0, T0)
    record, entry = _entry(1, 5, "w")
    entry.commit = None
    with pytest.raises(ValueError, match="not committed"):
        done_lines(record, entry, [(ref, lines[p - 2]) for p in entry.pos])
