"""broker.model.spill_parts (and the settlements of broker.model.transitions):
a claim from a due pending spill ref holds its jobs at the claim record's spill
part, no line in the head; each settlement materializes the job as a claimed
job (attempts the spilled ones + 1, its last error kept) and then runs as for
an inline claimed job; the ref stays while a record names it and goes, its
object to be deleted, once none does and its jobs are all taken."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from broker.model import browse
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.spill_refs import SpillRef
from broker.model.held import done_entries, done_lines
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING, job_id_for
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
    ReadJobs,
    Reclaim,
    Release,
)
from broker.model.spill_compaction import COMPACT_REFS, to_compact
from broker.model.spill_parts import spill_missing
from broker.model.state import QueueState
from broker.model.views import stats
from tests.support.spill_claims import (
    ERROR,
    NOW,
    load_held,
    spill_queue,
    write_back,
)
from tests.support.spill_objects import ETAG, spill_key

LEASE_MS = 60_000


def _claim(state: QueueState, n: int, now: int = NOW, request: str | None = None) -> Any:
    return T.apply(state, Claim("w1", n, LEASE_MS, request=request), now).jobs


def test_a_claim_holds_spilled_jobs_at_a_spill_part_with_no_line_in_the_head() -> None:
    state, ref = spill_queue(5)
    got = _claim(state, 3)
    assert list(got.ids) == [job_id_for(seq) for seq in (1, 2, 3)]
    assert list(got.attempts) == [2, 2, 2]  # (spilled attempts + 1)
    assert not state.jobs.entries  # no line
    (record,) = state.claim_records.values()
    assert record.spills == [(0, 3, ref.key, 0)] and record.seqs == [1, 2, 3]
    (left,) = state.spill_refs
    assert left.taken == 3 and left.live == 2
    data, again = write_back(state)
    head = orjson.loads(data)
    assert head["claims"][0]["parts"] == [{"spill": ref.key, "at": [0, 3], "seq": [1, 3]}]
    assert b"boom" not in data  # (the errors stay in the object)
    assert codec.encode(again) == data  # (read back, written again: the same bytes)
    assert again.seg_names == {ref.key: 1}


def test_an_exhausted_ref_stays_while_a_record_names_it_then_goes() -> None:
    state, ref = spill_queue(3)
    got = _claim(state, 10)
    assert len(got.ids) == 3
    (left,) = state.spill_refs
    assert left.key == ref.key and left.taken == 3 and left.live == 0
    assert not state.dropped_refs
    T.apply(state, Complete(tuple(CompleteItem(t, b"1") for t in got.tokens[:2])), NOW + 1)
    assert state.spill_refs and not state.dropped_refs
    T.apply(state, Complete((CompleteItem(got.tokens[2], None),)), NOW + 2)
    # completed in the record's done entries (no line): it stays until they are archived
    assert not state.jobs.entries and state.counters.completed == 3
    (record,) = state.claim_records.values()
    assert record.done and state.spill_refs and not state.dropped_refs
    codec.stamp(state, "b", NOW + 3, "c-1")
    (entry,) = [e for _, e in done_entries(state, state.seq)]
    spilled = [state.held.spilled_job(record.fence, record.spills[0], p) for p in entry.pos]
    archived = done_lines(record, entry, spilled)
    lines = [orjson.loads(line) for line in archived.lines]
    assert [(a["id"], a["status"], a["attempts"], a["result"], a["last_error"], a["worker"])
            for a in lines] == [(job_id_for(s), COMPLETED, 2, r, ERROR, "w1")
                                for s, r in ((1, 1), (2, 1), (3, None))]
    T.apply(state, DropArchived((state.seq,)), NOW + 4)  # (its archive object landed)
    assert not state.claim_records and not state.spill_refs
    assert [r.key for r in state.dropped_refs] == [ref.key]
    assert not state.seg_names


def test_a_complete_repeated_answers_the_same_and_changes_nothing_more() -> None:
    state, _ = spill_queue(2)
    got = _claim(state, 2)
    first = T.apply(state, Complete((CompleteItem(got.tokens[0], b"1"),)), NOW + 1)
    again = T.apply(state, Complete((CompleteItem(got.tokens[0], b"1"),)), NOW + 2)
    assert list(first.items.oks) == list(again.items.oks) == [True]
    assert state.counters.completed == 1
    (record,) = state.claim_records.values()
    assert [e.pos for e in record.completions or ()] == [[0]]


def test_a_fail_on_the_last_attempt_makes_the_job_dead_with_its_error() -> None:
    state, _ = spill_queue(2, attempts=2, max_attempts=3)
    got = _claim(state, 2)
    assert list(got.attempts) == [3, 3]
    res = T.apply(state, Fail((FailItem(got.tokens[0], "KeyError: doc", None),)), NOW + 1)
    assert list(res.items.statuses) == [DEAD]
    job = state.jobs[1]
    assert (job.status, job.attempts, job.last_error) == (DEAD, 3, "KeyError: doc")
    assert state.counters.dead == 1 and state.counters.failed == 1


def test_a_fail_with_attempts_left_makes_it_pending_for_its_retry() -> None:
    state, _ = spill_queue(2)
    got = _claim(state, 1)
    T.apply(state, Fail((FailItem(got.tokens[0], "again", 5_000),)), NOW + 1)
    job = state.jobs[1]
    assert (job.status, job.attempts, job.run_at_ms, job.last_error) == (
        PENDING, 2, NOW + 5_001, "again")
    assert not state.claim_records  # (its one position settled)
    # (its ref still holds job 2: it stays, unnamed)
    assert [r.live for r in state.spill_refs] == [1] and not state.seg_names


def test_a_release_gives_the_job_back_with_its_spilled_attempts_and_error() -> None:
    state, _ = spill_queue(2)
    got = _claim(state, 2)
    res = T.apply(state, Release(tuple(got.tokens)), NOW + 1)
    assert res.count == 2
    for seq in (1, 2):
        job = state.jobs[seq]
        assert (job.status, job.attempts, job.last_error) == (PENDING, 1, ERROR)
    again = _claim(state, 5, NOW + 2)  # (now from the head's own lines)
    assert list(again.ids) == ["j0000000001", "j0000000002"]


def test_a_cancel_marks_the_record_and_the_next_call_ends_it_cancelled() -> None:
    state, _ = spill_queue(2)
    got = _claim(state, 2)
    res = T.apply(state, Cancel(("j0000000001",)), NOW + 1)
    assert res.changed
    (record,) = state.claim_records.values()
    assert 0 in record.cancel and not state.jobs.entries
    assert stats(state, NOW + 1)["cancel_requested"] == 1
    hb = T.apply(state, Heartbeat(tuple(got.tokens), LEASE_MS), NOW + 2)
    assert [i.ok for i in hb.items] == [False, True]  # (the marked one is told)
    assert state.jobs[1].status == CANCELLED
    assert record.expires_ms == NOW + 2 + LEASE_MS  # (the other's lease renewed)


def test_a_reclaim_after_the_lease_ran_out_retries_or_buries_the_jobs() -> None:
    state, _ = spill_queue(2, attempts=1, max_attempts=2)
    got = _claim(state, 2)
    res = T.apply(state, Reclaim(), NOW + LEASE_MS + 1)
    assert sorted(res.ids) == ["j0000000001", "j0000000002"]
    assert {state.jobs[s].status for s in (1, 2)} == {DEAD}
    assert "lease expired" in (state.jobs[1].last_error or "")
    assert not state.claim_records and not state.spill_refs and state.dropped_refs
    stale = T.apply(state, Complete((CompleteItem(got.tokens[0], None),)), NOW + LEASE_MS + 2)
    assert list(stale.items.oks) == [False]  # (a stale token never completes)
    assert state.jobs[1].status == DEAD


def test_a_token_after_its_lease_ran_out_holds_nothing() -> None:
    state, _ = spill_queue(1)
    got = _claim(state, 1)
    late = NOW + LEASE_MS + 1
    res = T.apply(state, Complete((CompleteItem(got.tokens[0], None),)), late)
    assert list(res.items.oks) == [False]
    assert not state.jobs.entries  # (not completed; the reclaim settles it)


def test_a_heartbeat_extends_the_record_without_a_line() -> None:
    state, _ = spill_queue(3)
    got = _claim(state, 3)
    res = T.apply(state, Heartbeat(tuple(got.tokens), 120_000), NOW + 10)
    assert all(i.ok for i in res.items)
    (record,) = state.claim_records.values()
    assert record.expires_ms == NOW + 10 + 120_000 and not state.jobs.entries


def test_a_redriven_ref_materializes_as_it_shows_its_jobs() -> None:
    state, _ = spill_queue(2, max_attempts=2, redrive=True)
    got = _claim(state, 2)
    assert list(got.attempts) == [1, 1]  # (redriven: no attempts before this claim)
    T.apply(state, Fail((FailItem(got.tokens[0], "no", 0),)), NOW + 1)
    job = state.jobs[1]
    assert (job.status, job.attempts, job.last_error) == (PENDING, 1, "no")


def test_claim_order_merges_the_head_and_the_spill_ref() -> None:
    state, ref = spill_queue(4, inline=3)  # inline seqs 1..3 due at NOW-1000, spilled 4..7
    got = _claim(state, 5)
    assert list(got.ids) == [job_id_for(s) for s in (1, 2, 3, 4, 5)]
    (record,) = state.claim_records.values()
    assert record.spills == [(3, 2, ref.key, 0)]
    assert sorted(state.jobs.entries) == [1, 2, 3]  # (only the inline ones have lines)


def test_a_claim_repeat_answers_the_held_jobs_with_their_tokens() -> None:
    state, _ = spill_queue(3)
    got = _claim(state, 3, request="r1")
    again = T.apply(state, Claim("w1", 3, LEASE_MS, request="r1"), NOW + 1)
    assert again.replayed and [j.token for j in again.jobs] == list(got.tokens)
    assert [j.attempt for j in again.jobs] == list(got.attempts)


def test_a_new_owner_loads_the_named_object_before_it_settles() -> None:
    state, ref = spill_queue(3)
    got = _claim(state, 3)
    _, fresh = write_back(state, keep_cache=False)
    (record,) = fresh.claim_records.values()
    assert [(r.key, f) for r, f, _ in spill_missing(fresh, {record.fence: record})] == [
        (ref.key, record.fence)]
    # not loaded: a fail cannot materialize the job (it stays held, nothing changed)
    res = T.apply(fresh, Fail((FailItem(got.tokens[0], "x", 0),)), NOW + 1)
    assert list(res.items.oks) == [False] and not fresh.jobs.entries
    # a complete needs no job (a done entry; the archive reads the object)
    res = T.apply(fresh, Complete((CompleteItem(got.tokens[1], None),)), NOW + 1)
    assert list(res.items.oks) == [True] and not fresh.jobs.entries
    load_held(fresh)
    assert not spill_missing(fresh, {record.fence: record})
    res = T.apply(fresh, Fail((FailItem(got.tokens[0], "x", 0),)), NOW + 2)
    assert list(res.items.oks) == [True]
    assert fresh.jobs[1].status == PENDING and fresh.jobs[1].attempts == 2


def test_stats_count_the_held_jobs_as_claimed() -> None:
    state, _ = spill_queue(5)
    _claim(state, 3)
    counts = stats(state, NOW)["counts"]
    assert counts[CLAIMED] == 3 and counts[PENDING] == 2


@pytest.mark.parametrize("status", [PENDING, CLAIMED])
def test_a_purge_keeps_a_named_ref_until_its_record_goes(status: str) -> None:
    state, _ = spill_queue(4)
    _claim(state, 2)
    res = T.apply(state, Purge((status,)), NOW + 1)
    if status == PENDING:
        assert res.count == 2
        (left,) = state.spill_refs  # (named: stays, every job taken)
        assert left.live == 0 and state.claim_records
    else:
        assert res.count == 2 and not state.claim_records
        (left,) = state.spill_refs  # (unnamed, 2 jobs left: stays)
        assert left.live == 2 and not state.dropped_refs


def test_pages_and_lookups_show_the_held_jobs_claimed_with_their_lease() -> None:
    state, _ = spill_queue(4, inline=2)
    _claim(state, 4)  # inline 1, 2; spilled 3, 4 held
    page = T.apply(state, ReadJobs(limit=10), NOW + 1).view
    shown = {job["id"]: job for job in page.rows}
    assert list(shown) == [job_id_for(s) for s in range(1, 7)]
    for seq in (3, 4):
        job = shown[job_id_for(seq)]
        assert job["status"] == CLAIMED and job["attempts"] == 2
        assert job["lease"]["worker"] == "w1"
        assert job["last_error"] == ERROR
    assert [shown[job_id_for(s)]["status"] for s in (5, 6)] == [PENDING, PENDING]
    found = browse.lookup(state, NOW + 1, "q", job_id_for(3))["job"]
    assert (found["status"], found["location"], found["attempts"]) == (CLAIMED, "spill", 2)
    assert "token" not in found["lease"]
    claimed = T.apply(state, ReadJobs(CLAIMED, 10), NOW + 1).view
    assert [job["id"] for job in claimed.rows] == [job_id_for(s) for s in range(1, 5)]


def test_compaction_never_merges_an_object_a_record_names() -> None:
    state, ref = spill_queue(3)
    _claim(state, 3)
    small = [SpillRef(spill_key(DEAD, 100 + i), ETAG, DEAD, 1, (100 + i, 100 + i), NOW,
                      first=(0, 100 + i)) for i in range(COMPACT_REFS + 5)]
    state.spill_refs.extend(small)
    picked = to_compact(state)
    assert picked and ref.key not in {r.key for r in picked}
    assert state.seg_names == {ref.key: 1}
