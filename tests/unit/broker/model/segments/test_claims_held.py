"""broker.model.segments.claims with ``held_in_records``: a claim from an
ungrouped segment names its jobs in its claim record (a ``seg`` part) and
writes no job line; the answer's payloads come from the loaded window; the
ref stays while a record names it and is dropped (to ``dropped_refs``) once
exhausted and unnamed; settlements materialize the job from the held-jobs
cache; every write decodes to the same state. Pure: segments are made with
encode_segment and "loaded" by hand."""

from __future__ import annotations

import orjson
import pytest

from broker.errors import CorruptState
from broker.model import browse, views
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    Fail,
    FailItem,
    Heartbeat,
    Purge,
    PushPayloads,
    ReadJobs,
    Reclaim,
    Release,
)
from broker.model.segments.claims import held_loads
from broker.model.state import HeldJobs
from tests.support.held_records import LATER, held_queue, write_back
from tests.support.states import read_back


def test_a_claim_of_2000_from_a_segment_adds_one_record_and_no_job_line() -> None:
    state, ref, payloads = held_queue(2_000)
    before = len(codec.encode(state))
    got = T.apply(state, Claim("w", 2_000, 60_000), LATER).jobs
    assert list(got.payloads) == payloads
    assert list(got.attempts) == [1] * 2_000
    assert len(state.jobs) == 0
    data, again = write_back(state)
    head = orjson.loads(data)
    assert head["jobs"] == []
    [record] = head["claims"]
    assert record["n"] == 2_000
    assert record["parts"] == [{"seg": ref.key, "at": [0, 2_000]}]
    assert head["segments"][0]["taken"] == 2_000  # (exhausted, still named)
    assert len(data) - before < 600
    assert again.count_by_status()[CLAIMED] == 2_000
    assert again.seg_names == {ref.key: 1}


def test_complete_writes_a_done_entry_and_the_ref_goes_after_the_last_drop() -> None:
    state, ref, _ = held_queue(3)
    got = T.apply(state, Claim("w", 3, 60_000), LATER).jobs
    _, state = write_back(state)
    done = T.apply(state, Complete((CompleteItem(got.tokens[1], b'{"r":1}'),
                                    CompleteItem(got.tokens[0], None))), LATER)
    assert [(a.ok, a.status) for a in done.items] == [(True, COMPLETED)] * 2
    assert len(state.jobs) == 0  # (no line: the record's done entry)
    data, state = write_back(state)
    [record] = orjson.loads(data)["claims"]
    assert record["settled"] == [0, 2]
    assert record["done"] == [{"commit_seq": 2, "commit": "c-x", "at": "2026-01-01T00:00:01.000Z",
                               "pos": [0, 2], "results": [None, {"r": 1}]}]
    assert state.count_by_status()[COMPLETED] == 2
    # a repeat (its reply was lost) answers completed, from the done entry
    again = T.apply(state, Complete((CompleteItem(got.tokens[0], None),)), LATER)
    assert (again.items[0].ok, again.items[0].status) == (True, COMPLETED)
    T.apply(state, Complete((CompleteItem(got.tokens[2]),)), LATER)
    assert [r.key for r in state.segment_refs] == [ref.key] and not state.dropped_refs
    _, state = write_back(state)
    T.apply(state, DropArchived((2,)), LATER)
    assert len(state.claim_records) == 1 and not state.dropped_refs  # (commit 3's awaits)
    T.apply(state, DropArchived((3,)), LATER)
    assert not state.claim_records and not state.segment_refs
    assert [r.key for r in state.dropped_refs] == [ref.key]  # (deleted once this lands)
    data, _ = write_back(state)
    assert orjson.loads(data)["claims"] == [] and orjson.loads(data)["segments"] == []


def test_a_segment_outlives_its_last_record_only_while_named() -> None:
    state, ref, _ = held_queue(4)
    first = T.apply(state, Claim("w", 2, 60_000), LATER).jobs
    second = T.apply(state, Claim("w", 2, 60_000), LATER).jobs
    _, state = write_back(state)
    assert state.seg_names == {ref.key: 2}
    T.apply(state, Complete(tuple(CompleteItem(t) for t in first.tokens)), LATER)
    T.apply(state, DropArchived((state.seq + 1,)), LATER)
    assert len(state.segment_refs) == 1 and not state.dropped_refs
    T.apply(state, Complete(tuple(CompleteItem(t) for t in second.tokens)), LATER)
    T.apply(state, DropArchived((state.seq + 1,)), LATER)
    assert not state.segment_refs and [r.key for r in state.dropped_refs] == [ref.key]


def test_fail_release_and_reclaim_materialize_held_jobs_from_the_cache() -> None:
    state, ref, payloads = held_queue(6)
    got = T.apply(state, Claim("w", 6, 60_000), LATER).jobs
    _, state = write_back(state)
    failed = T.apply(state, Fail((FailItem(got.tokens[0], "boom", 0),)), LATER)
    assert failed.items[0].ok and failed.items[0].status == PENDING
    job = state.jobs[ref.first_seq]
    assert job.status == PENDING and job.payload == payloads[0] and job.attempts == 1
    assert job.last_error == "boom"
    released = T.apply(state, Release((got.tokens[1],)), LATER)
    assert released.count == 1 and state.jobs[ref.first_seq + 1].attempts == 0
    _, state = write_back(state)
    # the rest expire: a reclaim makes them pending lines again
    T.apply(state, Reclaim(), LATER + 61_000)
    assert {state.jobs[s].status for s in range(1, 7)} == {PENDING}
    assert [state.jobs[s].payload for s in range(1, 7)] == payloads
    assert not state.claim_records and not state.segment_refs
    _, state = write_back(state)
    # the jobs are claimed again (second attempts) as inline jobs
    again = T.apply(state, Claim("w", 6, 60_000), LATER + 62_000).jobs
    assert sorted(again.payloads) == sorted(payloads)


def test_a_reclaim_without_the_held_lines_leaves_the_record_for_a_later_batch() -> None:
    state, _, _ = held_queue(2)
    T.apply(state, Claim("w", 2, 60_000), LATER)
    _, state = write_back(state)
    state.held = HeldJobs()  # a new owner: nothing cached
    T.apply(state, Reclaim(), LATER + 61_000)
    assert len(state.claim_records) == 1 and len(state.jobs) == 0
    _, state = write_back(state)  # (and it still decodes)


def test_heartbeat_renews_the_record_and_cancel_marks_it() -> None:
    state, ref, _ = held_queue(2)
    got = T.apply(state, Claim("w", 2, 60_000), LATER).jobs
    beat = T.apply(state, Heartbeat((got.tokens[0],), 120_000), LATER + 10)
    assert beat.items[0].ok
    [record] = state.claim_records.values()
    assert record.expires_ms == LATER + 10 + 120_000
    answer = T.apply(state, Cancel((got.ids[1],)), LATER + 20).view
    assert answer[0].ok
    data, state = write_back(state)
    assert orjson.loads(data)["claims"][0]["cancel"][0][0] == 1
    ended = T.apply(state, Heartbeat((got.tokens[1],), 120_000), LATER + 30)
    assert not ended.items[0].ok and ended.items[0].status == CANCELLED
    assert state.jobs[ref.first_seq + 1].status == CANCELLED
    write_back(state)


def test_fail_of_the_last_attempt_makes_a_dead_line() -> None:
    state, _, payloads = held_queue(1)
    got = T.apply(state, Claim("w", 1, 60_000), LATER).jobs
    T.apply(state, Fail((FailItem(got.tokens[0], "x", 0),)), LATER)
    got = T.apply(state, Claim("w", 1, 60_000), LATER).jobs
    assert list(got.attempts) == [2]
    T.apply(state, Fail((FailItem(got.tokens[0], "y", 0),)), LATER)
    assert state.jobs[1].status == DEAD and state.jobs[1].payload == payloads[0]


def test_a_record_naming_a_segment_the_head_lacks_or_has_not_taken_is_refused() -> None:
    state, ref, _ = held_queue(2)
    T.apply(state, Claim("w", 2, 60_000), LATER)
    codec.stamp(state, "b", LATER, "c-x")
    head = orjson.loads(codec.encode(state))
    head["segments"] = []
    with pytest.raises(CorruptState, match=f"seg part naming segment {ref.key}"):
        read_back(orjson.dumps(head))
    head = orjson.loads(codec.encode(state))
    head["claims"][0]["parts"] = [{"seg": ref.key, "at": [0, 5]}]
    head["claims"][0]["n"] = 5
    head["counters"]["fence"] = 5
    with pytest.raises(CorruptState, match="has taken only 2"):
        read_back(orjson.dumps(head))


def test_pages_and_lookup_show_held_jobs_as_claimed_with_their_record_lease() -> None:
    state, ref, payloads = held_queue(5)
    T.apply(state, Claim("w-1", 3, 60_000), LATER)
    _, state = write_back(state)
    page = views.list_page(state, None, 10)
    assert [(j.seq, j.status) for j in page.jobs] == [
        (1, CLAIMED), (2, CLAIMED), (3, CLAIMED), (4, PENDING), (5, PENDING)]
    assert [j.payload for j in page.jobs] == payloads
    assert page.cut is None
    held = views.list_page(state, CLAIMED, 2, "j0000000001").jobs
    assert [(j.seq, j.lease_worker, j.lease_expires_ms, j.attempts) for j in held] == [
        (2, "w-1", LATER + 60_000, 1), (3, "w-1", LATER + 60_000, 1)]
    seen = browse.lookup(state, LATER, "q", "j0000000002")["job"]
    assert seen["status"] == CLAIMED and seen["location"] == "segment"
    assert seen["lease"]["worker"] == "w-1" and "token" not in seen["lease"]
    # a broker without the lines (a reader of the stored head): the page ends
    # before the first held job and the lookup finds nothing until they are loaded
    state.held = HeldJobs()
    page = views.list_page(state, None, 10)
    assert [j.seq for j in page.jobs] == [] and page.cut == 1
    assert browse.lookup(state, LATER, "q", "j0000000002")["job"] is None
    loads = held_loads(state, [ReadJobs(None, 10)], LATER)
    assert [(r.key, span) for r, _, span in loads] == [(ref.key, (0, 3, ref.key, 0))]


def test_completions_in_done_entries_are_read_as_completed_until_dropped() -> None:
    state, _, payloads = held_queue(3)
    got = T.apply(state, Claim("w-1", 3, 60_000), LATER).jobs
    T.apply(state, Complete((CompleteItem(got.tokens[1], b'{"r":2}'),)), LATER)
    _, state = write_back(state)
    rows = views.list_page(state, None, 10).jobs
    assert [(j.seq, j.status) for j in rows] == [(1, CLAIMED), (2, COMPLETED), (3, CLAIMED)]
    assert rows[1].payload == payloads[1] and rows[1].result == b'{"r":2}'
    assert [j.seq for j in views.list_page(state, COMPLETED, 10).jobs] == [2]
    seen = browse.lookup(state, LATER, "q", "j0000000002")["job"]
    assert (seen["status"], seen["location"]) == (COMPLETED, "segment")
    assert seen["archive_key"].startswith("q/archive/")
    T.apply(state, DropArchived((state.seq,)), LATER)
    assert [j.seq for j in views.list_page(state, None, 10).jobs] == [1, 3]
    assert browse.lookup(state, LATER, "q", "j0000000002")["job"] is None  # (archived)


def test_purges_take_held_jobs_and_keep_the_refs_records_name() -> None:
    state, ref, _ = held_queue(6)
    T.apply(state, Claim("w", 3, 60_000), LATER)
    # a purge of pending jobs: the 3 untaken go; the ref stays, exhausted, while named
    assert T.apply(state, Purge((PENDING,)), LATER).count == 3
    assert [(r.key, r.taken) for r in state.segment_refs] == [(ref.key, 6)]
    assert not state.dropped_refs
    _, state = write_back(state)  # (and the head still decodes)
    assert state.count_by_status()[CLAIMED] == 3
    # a purge of claimed jobs: the held ones go, their record and then the ref
    assert T.apply(state, Purge((CLAIMED,)), LATER).count == 3
    assert not state.claim_records and not state.segment_refs
    assert [r.key for r in state.dropped_refs] == [ref.key]
    data, state = write_back(state)
    assert state.count_by_status()[CLAIMED] == 0 and orjson.loads(data)["claims"] == []


def test_stats_count_held_jobs_their_marks_and_done_entries() -> None:
    state, _, _ = held_queue(5)
    got = T.apply(state, Claim("w", 4, 60_000), LATER).jobs
    T.apply(state, Cancel((got.ids[0],)), LATER)
    T.apply(state, Complete((CompleteItem(got.tokens[1]),)), LATER)
    _, state = write_back(state)
    seen = views.stats(state, LATER)
    assert (seen["counts"]["claimed"], seen["counts"]["completed"],
            seen["counts"]["pending"], seen["cancel_requested"]) == (3, 1, 1, 1)


def test_a_complete_whose_record_leaves_mid_call_answers_its_later_tokens() -> None:
    """One call completes the last job of an inline claim (its record leaves the
    head) and then names a token of that claim settled and archived earlier:
    answered stale, not looked up in the record that left."""
    state = held_queue(1)[0]
    T.apply(state, PushPayloads((b"1", b"2")), LATER)
    T.apply(state, Claim("w", 1, 60_000), LATER)  # the segment's job, held in a record
    inline = T.apply(state, Claim("w", 2, 60_000), LATER).jobs
    T.apply(state, Complete((CompleteItem(inline.tokens[1]),)), LATER)
    T.apply(state, DropArchived((state.seq + 1,)), LATER)
    answers = T.apply(state, Complete((CompleteItem(inline.tokens[0]),
                                       CompleteItem(inline.tokens[1]))), LATER).items
    assert [(a.ok, a.status) for a in answers] == [(True, COMPLETED), (True, COMPLETED)]
