"""broker.service.archiver over a commit that completed inline jobs and jobs
held in a claim record together (one claim took inline jobs around a
segment's): while the archive object's writes fail (not landed) nothing
leaves the head; once they land, one object holds every job once in seq
order, the held jobs' lines spliced from their segment's lines in the bytes
archive_line makes of their jobs, and the store is left with no record, no
job line and no segment object. An in-process broker on a file store with
injected faults."""

from __future__ import annotations

from pathlib import Path

from broker import paths
from broker.model import held
from broker.model.format import archive
from broker.model.job import Job
from broker.model.ops import CompleteItem
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, run, started, stored, until

OBJECTS = paths.archive_prefix("q")
CONFIG = {"held_in_records": True, "segment_push_jobs": 10}


def test_inline_and_held_completions_of_one_commit_are_archived_once_in_seq_order(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store, clock=clock, **CONFIG)
        try:
            ids = list(await a.push("q", [b'{"n":%d}' % i for i in range(3)]))
            ids += await a.push("q", [b'{"n":%d}' % i for i in range(3, 15)])  # (a segment)
            ids += await a.push("q", [b'{"n":%d}' % i for i in range(15, 17)])
            head = stored(store)
            assert len(head.segment_refs) == 1 and len(head.jobs) == 5
            jobs = await a.claim("q", "w", 17, lease_s=600)
            assert sorted(j.id for j in jobs) == ids
            [record] = stored(store).claim_records.values()
            assert record.segs and len(record.segs) < record.n  # (inline and held parts)
            store.inject("put", NOT_LANDED, times=None, key_contains=OBJECTS)
            got = await a.complete("q", [CompleteItem(j.token, b'{"r":"%s"}' % j.id.encode())
                                         for j in jobs])
            assert [x.status for x in got] == ["completed"] * 17
            await until(lambda: a._queues["q"].archiver.failures > 0)
            head = stored(store)
            [seq] = head.done_commits
            assert len(head.completed[seq]) == 5 and head.claim_records  # (nothing left)
            # what the object must hold: the jobs, the held ones built from the cache
            state = a._queues["q"].loop.state  # type: ignore[attr-defined]
            mine: list[Job] = [state.jobs[s] for s in state.completed[seq]]
            for rec, entry in held.done_entries(state, seq):
                for i, pos in enumerate(entry.pos):
                    span = rec.seg_span(pos)
                    assert span is not None
                    line = state.held.line(rec.fence, span, pos - span[0])
                    assert line is not None
                    mine.append(held.done_job(rec, entry, i, *line))
            want_key, want = archive.commit_object("q", mine)
            assert store.list(OBJECTS) == []
            store.heal()
            await until(lambda: not stored(store).claim_records and not stored(store).jobs)
            assert store.list(OBJECTS) == [want_key]
            assert store.get(want_key) == want
            rows = archive_lines(store)
            assert [r["id"] for r in rows] == ids  # (each once, in seq order)
            assert [r["payload"] for r in rows] == [{"n": i} for i in range(17)]
            assert [r["result"] for r in rows] == [{"r": i} for i in ids]
            assert {(r["status"], r["attempts"], r["worker"]) for r in rows} == {
                ("completed", 1, "w")}
            await until(lambda: store.list(paths.segments_prefix("q")) == [])
        finally:
            await a.stop(5)

    run(main())
