"""Grouped pushes by reference (``grouped_segments`` on): a bulk push whose
jobs have groups goes into grouped segment objects (format 3, group-major,
a directory of runs), its ids still answered in request order; claims take
the runs' jobs by group (limits, oldest first within a group), moving each
into the head by position (``taken_at``); a cancel makes a hole; a takeover
rebuilds the runs from ``taken_at``. Real file store (behind the fault
injector where a fault is injected); the store is checked afterwards."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.format import segment_format
from broker.model.ops import CompleteItem, LeasedJob, NewJob
from broker.model.segments.refs import untaken_spans
from broker.storage.files import FileStore
from tests.support.faults import LOST_REPLY, NOT_LANDED, REFUSED, Clock, FaultyStore
from tests.support.inprocess import crash, run, segment_objects, started, stored, successor

QUEUE_KEY = paths.state_key("q")
GROUPS = 5


def grouped_jobs(n: int, start: int = 0) -> list[NewJob]:
    """Jobs ``{"n": i}`` in groups ``g{i % GROUPS}``: interleaved, not group-major."""
    return [NewJob(orjson.dumps({"n": i}), group=f"g{i % GROUPS}")
            for i in range(start, start + n)]


def group_of(job: LeasedJob) -> str:
    """The group :func:`grouped_jobs` gave the claimed ``job``."""
    return f"g{orjson.loads(job.payload)['n'] % GROUPS}"


def pending_in_segments(store: FileStore | FaultyStore) -> dict[int, tuple[str | None, int]]:
    """seq -> (group, n) of every untaken job of the referenced segments, read
    from the objects and honouring each ref's ``taken_at``."""
    out = {}
    for ref in stored(store).segment_refs:
        got = store.read(ref.key)
        assert got.etag == ref.etag
        for lo, hi in untaken_spans(ref):
            lines = segment_format.read_checked(ref, got.data, got.etag, "file://", lo, hi)
            for seq, line in enumerate(lines, ref.first_seq + lo):
                job = segment_format.segment_job(seq, line, ref)
                out[seq] = (job.group, orjson.loads(job.payload)["n"])
    return out


def test_a_grouped_bulk_push_writes_a_v3_segment_and_answers_ids_in_request_order(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        ids = await a.push("q", grouped_jobs(100))
        head = store.read(QUEUE_KEY).data
        assert b'"version":6' in head and b'"status"' not in head  # (no job line in the head)
        [key] = segment_objects(store)
        data = store.read(key).data
        header = segment_format.read_header(data, key)
        assert header.version == 3
        assert header.groups == tuple((f"g{g}", 20) for g in range(GROUPS))
        [ref] = stored(store).segment_refs
        assert (ref.groups, ref.taken, ref.taken_at) == (GROUPS, 0, ())
        pending = pending_in_segments(store)
        # id i is the job of request position i: its payload and group
        assert [pending[int(i[1:])] for i in ids] == [
            (f"g{i % GROUPS}", i) for i in range(100)]
        # within a group, seq order is request order
        for g in range(GROUPS):
            seqs = sorted(s for s, (group, _) in pending.items() if group == f"g{g}")
            assert [pending[s][1] for s in seqs] == list(range(g, 100, GROUPS))
        await a.stop()

    run(go())


def test_without_the_flag_a_grouped_push_stays_in_the_head_and_a_plain_one_writes_v2(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=False)
        await a.push("q", grouped_jobs(50))
        assert segment_objects(store) == [] and len(stored(store).jobs) == 50
        b = await started(FileStore(tmp_path / "b"), segment_push_jobs=10,
                          grouped_segments=True)
        await b.push("q", [orjson.dumps({"n": i}) for i in range(50)])
        [key] = segment_objects(b.segments.store)
        data = b.segments.store.read(key).data
        assert segment_format.read_header(data, key).version == 2 and b'"groups"' not in data
        await a.stop()
        await b.stop()

    run(go())


def test_claims_take_runs_by_group_within_the_limit_oldest_first(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        await a.create_queue("q", {"group_limit": 2})
        ids = await a.push("q", grouped_jobs(100))
        got = await a.claim("q", "w", max_jobs=50, lease_s=60)
        assert Counter(group_of(j) for j in got) == {f"g{g}": 2 for g in range(GROUPS)}
        for g in range(GROUPS):  # each group's two oldest
            assert sorted(j.id for j in got if group_of(j) == f"g{g}") == sorted(
                [ids[g], ids[g + GROUPS]])
        assert await a.claim("q", "w", max_jobs=50, lease_s=60) == []
        [ref] = stored(store).segment_refs
        # each run's prefix of 2 taken: 5 intervals, counted in taken
        assert ref.taken == 10 and ref.taken_at == tuple(
            x for g in range(GROUPS) for x in (20 * g, 2))
        await a.complete("q", [CompleteItem(j.token) for j in got])
        seen = {j.id for j in got}
        while jobs := await a.claim("q", "w", max_jobs=16, lease_s=60):
            assert not seen & {j.id for j in jobs}
            assert max(Counter(group_of(j) for j in jobs).values()) <= 2
            seen |= {j.id for j in jobs}
            await a.complete("q", [CompleteItem(j.token) for j in jobs])
        assert seen == set(ids)
        for q in a._queues.values():
            for task in list(q.target._deleting):
                await task
        assert stored(store).segment_refs == [] and segment_objects(store) == []
        await a.stop()

    run(go())


def test_a_cancel_of_a_pending_grouped_segment_job_leaves_a_hole(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        ids = await a.push("q", grouped_jobs(20))
        victim = ids[GROUPS]  # g0's second job: position 1 of run g0
        [answer] = await a.cancel("q", [victim])
        assert answer.ok
        [ref] = stored(store).segment_refs
        assert ref.taken_at == (1, 1) and ref.taken == 1
        assert stored(store).jobs[int(victim[1:])].status == "cancelled"
        assert int(victim[1:]) not in pending_in_segments(store)
        claimed = []
        while jobs := await a.claim("q", "w", max_jobs=7, lease_s=60):
            claimed += [j.id for j in jobs]
            await a.complete("q", [CompleteItem(j.token) for j in jobs])
        assert sorted(claimed) == sorted(set(ids) - {victim})
        await a.stop()

    run(go())


@pytest.mark.parametrize("fault", [LOST_REPLY, NOT_LANDED])
def test_a_commit_lost_after_a_grouped_segment_was_written(tmp_path: Path, fault: str) -> None:
    """The refs' commit is lost after the segment was written: the push is
    retried by the loop (or fails and is retried by the caller); every job is
    pending once, and the orphan (if any) is swept."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        await a.push("q", [b'{"n":-1}'])
        # the reservation's commit is the 1st write of the state, the refs' the 2nd
        store.inject("write_if_match", fault, nth=2, key_contains=QUEUE_KEY)
        ids = await a.push("q", grouped_jobs(50), request="r-1")
        assert [k for _, k, _ in store.injected] == [fault]
        pending = pending_in_segments(store)
        assert sorted(n for _, n in pending.values()) == list(range(50))
        assert [pending[int(i[1:])][1] for i in ids] == list(range(50))
        again = await a.push("q", grouped_jobs(50), request="r-1")  # a repeat: same ids
        assert again == ids
        await a.sweep_staging()
        clock.advance(601)
        await a.sweep_staging()
        assert segment_objects(store) == sorted(r.key for r in stored(store).segment_refs)
        assert sorted(n for _, n in pending_in_segments(store).values()) == list(range(50))
        await a.stop()

    run(go())


@pytest.mark.parametrize(("method", "key"), [
    ("write_if_match", QUEUE_KEY),  # the refs' commit refused, the segment written
    ("create_if_absent", "/segments/"),  # the grouped segment's write refused
])
def test_a_refused_write_of_a_grouped_push_leaves_nothing_referenced_and_a_retry_pushes_once(
        tmp_path: Path, method: str, key: str) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        await a.push("q", [b'{"n":-1}'])
        before = stored(store)
        store.inject(method, REFUSED, nth=2 if method == "write_if_match" else 1,
                     key_contains=key)
        with pytest.raises(OsqueueError):
            await a.push("q", grouped_jobs(50), request="r-1")
        assert [k for _, k, _ in store.injected] == [REFUSED]
        assert stored(store).segment_refs == [] and pending_in_segments(store) == {}
        assert len(stored(store).jobs) == len(before.jobs) == 1  # (nothing acknowledged)
        ids = await a.push("q", grouped_jobs(50), request="r-1")  # the caller's retry
        pending = pending_in_segments(store)
        assert [pending[int(i[1:])] for i in ids] == [(f"g{i % GROUPS}", i) for i in range(50)]
        await a.sweep_staging()
        clock.advance(601)
        await a.sweep_staging()  # (the refused push's segment, if written, is swept)
        assert segment_objects(store) == sorted(r.key for r in stored(store).segment_refs)
        assert len(segment_objects(store)) == 1
        await a.stop()

    run(go())


def test_a_takeover_in_the_middle_of_grouped_runs(tmp_path: Path) -> None:
    """Half drained under a limit, the owner crashes; the successor rebuilds the
    held counts from the records and the runs from ``taken_at``: the limit
    holds, and every job is claimed once."""
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, grouped_segments=True)
        await a.create_queue("q", {"group_limit": 3})
        ids = await a.push("q", grouped_jobs(100))
        done: set[str] = set()
        for _ in range(4):
            jobs = await a.claim("q", "wa", max_jobs=10, lease_s=60)
            await a.complete("q", [CompleteItem(j.token) for j in jobs])
            done |= {j.id for j in jobs}
        held = await a.claim("q", "wa", max_jobs=100, lease_s=60)
        assert Counter(group_of(j) for j in held) == {f"g{g}": 3 for g in range(GROUPS)}
        before = stored(store).segment_refs[0]
        await crash(a)
        b = await successor(store, clock)
        after = stored(store).segment_refs[0]
        assert after.taken_at == before.taken_at  # (the takeover rewrote the same runs)
        assert await b.claim("q", "wb", max_jobs=100, lease_s=60) == []  # all at the limit
        clock.advance(61)  # the held leases (restarted by B) end: back to pending
        rest: list[str] = []
        while jobs := await b.claim("q", "wb", max_jobs=16, lease_s=600):
            assert max(Counter(group_of(j) for j in jobs).values()) <= 3
            rest += [j.id for j in jobs]
            await b.complete("q", [CompleteItem(j.token) for j in jobs])
        assert len(rest) == len(set(rest)) and not done & set(rest)
        assert done | set(rest) == set(ids)
        assert stored(store).segment_refs == []
        await b.stop()

    run(go())
