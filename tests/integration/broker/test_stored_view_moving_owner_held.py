"""broker.service.stored_view pages of a standby broker while the owner (a
real broker process, claims held in records: its default
``held_in_records``) changes the queue between the head versions one page
reads: a purge that drops every segment but the one a claim record holds jobs
at; a segment deleted behind the brokers' backs while the owner claims and
settles others (a real loss: segment_missing, never a short page); and the
owner killed, its successor settling the held jobs with the first owner's
tokens and deleting their segment. The twin of
``test_stored_view_moving_owner.py``, whose owner moves claimed jobs into the
head. File store; the reader is in-process, its segment reads hooked through
a FaultyStore."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from broker.errors import SegmentMissing
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import Clock, FaultyStore
from tests.support.held_views import await_archived_once, await_deleted, naming, present
from tests.support.inprocess import run, started, stored

SEG = 5  # jobs a segment: each push of this many is one segment object


def _fill(url: str) -> tuple[QueueClient, list[str]]:
    """20 segments, each followed by one inline job; every id."""
    client = QueueClient(url, "q")
    ids: list[str] = []
    for n in range(20):
        ids += client.push_many([{"seg": n, "i": i} for i in range(SEG)])
        ids += client.push_many([{"inline": n}])
    return client, ids


def test_stored_view_page_after_a_purge_between_head_versions_keeps_the_held_segment(
        tmp_path: Path) -> None:
    """Before the reader's first segment read the owner claims 3 jobs (held in
    a record at segment 0) and purges every pending one: every other segment
    is dropped and deleted, segment 0 stays while the record names it. The
    page is the newer head's, the 3 held jobs, claimed, each once; once they
    are completed segment 0 goes too, and each is archived once."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG),
                       "--lease-s", "3600") as broker:
        client, ids = _fill(broker.url)
        files = FileStore(tmp_path)
        keys = [ref.key for ref in stored(files).segment_refs]
        store = FaultyStore(files)
        held = []

        def purge(key: str) -> None:
            assert key == keys[0]
            held.extend(client.claim("w", max_jobs=3, lease_s=3600))
            client.purge(["pending"])
            for other in keys[1:]:
                await_deleted(files, other)
            assert present(files, keys[0]) and len(naming(files, keys[0])) == 1

        store.inject("read", key_contains="/segments/", before=purge)

        async def main() -> list[dict]:  # type: ignore[type-arg]
            reader = await started(store, url="http://standby", lease_s=3600)
            try:
                return await reader.jobs("q", None, 1000)
            finally:
                await reader.stop(5)

        page = run(main())
        assert [(job["id"], job["status"]) for job in page] == [(i, "claimed") for i in ids[:3]]
        assert [job.id for job in held] == ids[:3]
        assert all(a.ok for a in client.complete_many([(job.token, None) for job in held]))
        await_deleted(files, keys[0])
        await_archived_once(files, ids[:3])
        assert client.stats()["total"] == 0


def test_stored_view_answers_segment_missing_for_a_lost_segment_while_held_ones_are_settled(
        tmp_path: Path) -> None:
    """Segment 12 deleted behind the brokers' backs; before each of the
    reader's first 3 segment reads the owner claims that segment and the
    inline job after it (held: the object stays once the claim has landed),
    completes them and deletes it (each a re-read of the head). A client
    following next_after gets full pages of pending jobs, each once, up to the
    lost segment, then segment_missing naming it."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG),
                       "--lease-s", "3600") as broker:
        client, ids = _fill(broker.url)
        files = FileStore(tmp_path)
        lost = stored(files).segment_refs[12].key
        files.delete(lost)
        store = FaultyStore(files)
        drained: list[str] = []

        def drain(key: str) -> None:
            if key == lost or len(drained) >= 3:
                return
            drained.append(key)
            jobs = client.claim("w", max_jobs=SEG + 1, lease_s=3600)
            assert len(jobs) == SEG + 1
            assert present(files, key) and len(naming(files, key)) == 1  # (held: it stays)
            assert all(a.ok for a in client.complete_many([(job.token, None) for job in jobs]))
            await_deleted(files, key)

        store.inject("read", key_contains="/segments/", times=None, before=drain)

        async def main() -> list[dict]:  # type: ignore[type-arg]
            reader = await started(store, url="http://standby", lease_s=3600)
            seen: list[dict] = []  # type: ignore[type-arg]
            try:
                with pytest.raises(SegmentMissing, match=lost):
                    after = None
                    while True:
                        page = await reader.jobs("q", None, 7, after)
                        assert len(page) == 7, "a short page while jobs follow"
                        seen += page
                        after = seen[-1]["id"]
            finally:
                await reader.stop(5)
            return seen

        seen = run(main())
        assert len(drained) == 3
        first = 3 * (SEG + 1)  # (the drained ones: completed and archived, gone)
        got = [job["id"] for job in seen]
        assert got == ids[first:first + len(got)] and len(got) >= 9 * (SEG + 1) - 7
        assert {job["status"] for job in seen} == {"pending"}
        await_archived_once(files, ids[:first])


def test_stored_view_page_while_the_owner_is_killed_and_its_successor_settles_held_jobs(
        tmp_path: Path) -> None:
    """Segment 0's jobs held in a record of the first owner; before the reader
    reads them the owner is killed (SIGKILL), the second broker takes the queue
    over (the record kept, its jobs still claimed, read from the segment), and
    the worker completes them through it with the first owner's tokens: the
    segment goes once that has landed, and the reader's page is the newer
    head's, every other job pending, each once; each held job is archived
    once."""
    store_url = f"file://{tmp_path}"
    args = ("--lease-s", "2", "--segment-push-jobs", str(SEG))
    first = BrokerProcess(store_url, *args).start()
    second = BrokerProcess(store_url, *args).start()
    try:
        client = QueueClient([first.url, second.url], "q", retry_s=60)
        ids: list[str] = []
        for n in range(6):
            ids += client.push_many([{"seg": n, "i": i} for i in range(SEG)])
        files = FileStore(tmp_path)
        keys = [ref.key for ref in stored(files).segment_refs]
        jobs = client.claim("w", max_jobs=SEG, lease_s=3600)
        assert [job.id for job in jobs] == ids[:SEG] and len(naming(files, keys[0])) == 1
        owner = stored(files).broker
        assert owner is not None
        killed, survivor = (first, second) if owner.url == first.url else (second, first)
        store = FaultyStore(files)
        moved: list[str] = []

        def move_and_settle(key: str) -> None:
            moved.append(key)
            killed.stop(signal.SIGKILL)

            def taken_over() -> bool:
                client.stats()  # (a request: the survivor takes the queue over)
                record = stored(files).broker
                return record is not None and record.url == survivor.url

            eventually(taken_over, 60, "the takeover")
            assert present(files, key) and len(naming(files, key)) == 1  # (still held)
            there = QueueClient(survivor.url, "q")
            rows = there.jobs(status="claimed", limit=100)
            assert [r["id"] for r in rows] == ids[:SEG]
            assert all(r["lease"]["worker"] == "w" for r in rows)
            answers = client.complete_many([(job.token, {"id": job.id}) for job in jobs])
            assert all(a.ok for a in answers), [a for a in answers if not a.ok]
            await_deleted(files, key)

        store.inject("read", key_contains=keys[0], before=move_and_settle)

        async def main() -> tuple[list[dict], dict]:  # type: ignore[type-arg]
            # (its clock stands still: it never finds the owner quiet for a
            # lease, so it reads and never joins the takeover)
            reader = await started(store, url="http://standby", clock=Clock(), lease_s=3600)
            try:
                return await reader.jobs("q", None, 100), await reader.stats("q")
            finally:
                await reader.stop(5)

        page, stats = run(main())
        assert moved == [keys[0]]
        assert [job["id"] for job in page] == ids[SEG:]
        assert {job["status"] for job in page} == {"pending"}
        assert stats["counts"]["claimed"] == 0 and stats["total"] == len(ids) - SEG
        lines = await_archived_once(files, ids[:SEG])
        assert all(line["result"] == {"id": line["id"]} for line in lines)
        assert all(present(files, key) for key in keys[1:])
    finally:
        for proc in (first, second):
            proc.stop(signal.SIGKILL)
