"""Claim records over jobs taken from segment objects (format version 5),
moved into the head or held at the record's segment parts
(``held_in_records``; both settings run): a claim that takes jobs from a
segment is one record; releasing, failing and cancelling some of them, a
takeover in between and the segment's drop keep every job exactly once
(pending, claimed by one record, or archived), and the segment object is
deleted only once no landed head references it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.model.ops import CompleteItem, FailItem
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    bodies,
    crash,
    held_jobs,
    run,
    started,
    stored,
    successor,
)

HELD = pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])


def _head(store: FileStore) -> dict:  # type: ignore[type-arg]
    raw: dict = orjson.loads(store.read(paths.state_key("q")).data)  # type: ignore[type-arg]
    return raw


def _every_job_once(store: FileStore, total: int) -> dict[str, str]:
    """Each job id of 1..total is in exactly one place (a line of the head, held
    at a claim record's segment part, pending in a segment, archived); where,
    by id."""
    head = _head(store)
    where: dict[str, str] = {}
    fences = {r["fence"]: r for r in head["claims"]}
    for j in head["jobs"]:
        assert j["id"] not in where, j
        if j["status"] == "claimed":
            rec = fences[j["claim"]]
            seqs = [s for p in rec["parts"] for k in range(0, len(p.get("seq", ())), 2)
                    for s in range(p["seq"][k], p["seq"][k] + p["seq"][k + 1])]
            assert j["seq"] in seqs, (j, rec)
        where[j["id"]] = j["status"]
    archived = {rec["id"] for rec in archive_lines(store)}
    for job in held_jobs(store, stored(store)):
        assert job.id not in where, job
        if job.status == "claimed":
            assert job.claim in fences, job
        if job.status != "completed" or job.id not in archived:
            where[job.id] = job.status
    seg_seqs = [s for r in stored(store).segment_refs
                for s in range(r.next_seq, r.first_seq + r.count)]
    for s in seg_seqs:
        jid = f"j{s:010d}"
        assert jid not in where, jid
        where[jid] = "segment"
    for rec in archive_lines(store):
        assert rec["id"] not in where or where[rec["id"]] == "archived", rec
        where[rec["id"]] = "archived"
    assert sorted(where) == [f"j{s:010d}" for s in range(1, total + 1)], where
    return where


@HELD
def test_a_claim_from_a_segment_settled_in_parts_across_a_takeover_keeps_every_job_once(
        tmp_path: Path, held: bool) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        a = await started(store, clock=clock, segment_push_jobs=4, lease_s=5.0,
                          held_in_records=held)
        await a.push("q", bodies(10))
        assert _head(store).get("segments"), "the push went into a segment"
        got = await a.claim("q", "w", 6, 30.0)
        assert len(got) == 6
        head = _head(store)
        assert len(head["claims"]) == 1 and head["claims"][0]["n"] == 6
        await a.release("q", [got[0].token, got[1].token])
        await a.fail("q", [FailItem(got[2].token, "boom", 0)])
        await a.cancel("q", [got[3].id])
        await crash(a)
        b = await successor(store, clock, lease_s=5.0, held_in_records=held)
        _every_job_once(store, 10)
        # the old owner's tokens still settle (same fences; takeover renews leases)
        done = await b.complete("q", [CompleteItem(got[4].token), CompleteItem(got[5].token)])
        assert [x.ok for x in done] == [True, True]
        stale = await b.complete("q", [CompleteItem(got[0].token)])
        assert not stale[0].ok
        rest = await b.claim("q", "w2", 20, 30.0)
        ids = sorted(j.id for j in rest)
        assert got[3].id not in ids
        assert {got[0].id, got[1].id, got[2].id} <= set(ids)
        done = await b.complete("q", [CompleteItem(j.token) for j in rest])
        assert all(x.ok for x in done)
        # the job marked for cancel while claimed: its owner's complete answers cancelled
        marked = await b.complete("q", [CompleteItem(got[3].token)])
        assert not marked[0].ok and marked[0].status == "cancelled", marked
        await archived_and_dropped(b, store, clock)
        await b.stop(drain_s=5)

    run(main())
    head = _head(store)
    assert head["claims"] == []
    assert not stored(store).segment_refs
    assert all(j["status"] != "claimed" for j in head["jobs"])
    where = _every_job_once(store, 10)
    assert set(where.values()) <= {"archived", "completed", "cancelled"}, where


@HELD
@pytest.mark.parametrize("fault", [NOT_LANDED, LOST_REPLY, LOST_REPLY_412])
def test_a_claim_through_a_segment_whose_commit_faults_drops_and_deletes_the_segment_once(
        tmp_path: Path, fault: str, held: bool) -> None:
    """A claim that takes a whole segment (moved in, so its ref dropped; or held,
    so its ref kept, exhausted, while the record names it) and whose write
    faults: every job stays exactly once, and the segment object is deleted only
    once no landed head references it."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()

    async def main() -> None:
        a = await started(store, clock=clock, segment_push_jobs=4, lease_s=5.0,
                          held_in_records=held)
        await a.push("q", bodies(2))  # inline
        await a.push("q", bodies(5, 2))  # a segment
        await a.push("q", bodies(2, 7))  # inline again
        assert len(stored(inner).segment_refs) == 1
        store.inject("write_if_match", fault, key_contains="q/queue.json")
        got = await a.claim("q", "w", 9, 30.0, request="r-1")  # (the loop retries the write)
        assert ("write_if_match", fault, "q/queue.json") in store.injected
        again = await a.claim("q", "w", 9, 30.0, request="r-1")
        assert [j.token for j in again] == [j.token for j in got]
        assert sorted(j.id for j in got) == [f"j{s:010d}" for s in range(1, 10)]
        head = _head(inner)
        assert len(head["claims"]) == 1 and head["claims"][0]["n"] == 9
        state = stored(inner)
        if held:  # (kept, exhausted, while the record names it)
            assert [(r.taken, r.count) for r in state.segment_refs] == [(5, 5)]
            assert set(state.seg_names) == {state.segment_refs[0].key}
        else:
            assert not state.segment_refs
        _every_job_once(inner, 9)
        await a.release("q", [got[0].token, got[4].token])
        await a.fail("q", [FailItem(got[5].token, "boom", 0)])
        clock.advance(31)  # the rest of the record's lease runs out: a reclaim
        rest = await a.claim("q", "w2", 20, 30.0)
        assert sorted(j.id for j in rest) == [f"j{s:010d}" for s in range(1, 10)]
        done = await a.complete("q", [CompleteItem(j.token) for j in rest])
        assert all(x.ok for x in done)
        stale = await a.complete("q", [CompleteItem(got[1].token)])
        assert not stale[0].ok
        await archived_and_dropped(a, inner, clock, deleted=held or fault == NOT_LANDED)
        await a.stop(drain_s=5)

    run(main())
    head = _head(inner)
    assert head["claims"] == [] and head["counters"]["completed"] == 9
    assert all(j["status"] != "claimed" for j in head["jobs"])
    where = _every_job_once(inner, 9)
    assert set(where.values()) <= {"archived", "completed"}, where
    assert not stored(inner).segment_refs
    if fault == NOT_LANDED or held:  # (a lost reply of the moving-in claim's drop: left
        # to the sweep; a held segment's drop is a later commit, after the archive)
        assert inner.list(paths.segments_prefix("q")) == []  # dropped, so deleted
