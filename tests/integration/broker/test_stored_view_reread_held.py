"""Reads of a queue this broker does not serve (broker.service.stored_view)
while its owner works, with claims held in records (the owner's default
``held_in_records``): a claim from a segment writes no job line, its record
names the segment, and the object stays until the commit that settles the
last job it holds has landed, then goes. So the version a reader read may
hold jobs at a segment the owner has since settled, dropped and deleted: the
read re-reads the head and answers from the newer version. The twin of
``test_stored_view_reread.py``, whose owner moves claimed jobs into the head.

Deterministic: the owner is a real broker process over a file store; the
reader is an in-process broker over the same files through a
:class:`~tests.support.faults.FaultyStore` whose hook, just before the
reader's read of a held segment, has the owner settle the jobs held there
(which drops the reference and deletes the object) and waits until the
object is gone; the standby of the last test is a second broker process.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker import paths
from broker.errors import BrokerUnavailable, SegmentMissing
from broker.service.stored_view import REREADS
from broker.storage import FileStore
from osqueue_spark import QueueClient
from osqueue_spark.bodies import ClaimedJob
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import FaultyStore
from tests.support.held_views import await_archived_once, await_deleted, naming, present
from tests.support.inprocess import run, started, stored

#: Jobs per segment: each push of this many goes into one segment object.
SEG = 5
#: Segments pushed.
SEGMENTS = 6

Owner = tuple[BrokerProcess, QueueClient, list[str], list[str]]


@pytest.fixture()
def owner(tmp_path: Path) -> Iterator[Owner]:
    """A broker process (held_in_records: its default) serving queue ``q`` of
    SEGMENTS one-push segments (nothing inline: a claim of SEG jobs takes
    exactly the first segment left); a client of it, every job id and the
    segments' keys in push order."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG),
                       "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        ids: list[str] = []
        for n in range(SEGMENTS):
            ids += client.push_many([{"seg": n, "i": i} for i in range(SEG)])
        keys = [ref.key for ref in stored(FileStore(tmp_path)).segment_refs]
        assert len(keys) == SEGMENTS
        yield broker, client, ids, keys


def _claim_held(files: FileStore, client: QueueClient, key: str) -> list[ClaimedJob]:
    """Claim the SEG jobs of segment ``key`` (the first left) and check they
    are held in a record: no job line in the head, the record names the
    segment, and its object stays."""
    jobs = client.claim("w", max_jobs=SEG, lease_s=3600)
    assert len(jobs) == SEG
    head = stored(files)
    assert not list(head.jobs.touched()), "a held claim wrote job lines"
    assert len(naming(files, key)) == 1 and present(files, key)
    return jobs


def _settler(files: FileStore, client: QueueClient, held: dict[str, list[ClaimedJob]],
             then_claim: list[str] | None = None) -> tuple[Callable[[str], None], list[str]]:
    """A hook that, before a read of a segment whose jobs ``held`` holds, has
    the owner complete them (the object must stay until that lands), claims
    the segment ``then_claim`` names next (if any: held too) and waits until
    the owner has deleted the settled segment's object. Does nothing before a
    read of another segment. With the keys it settled, in order."""
    settled: list[str] = []

    def settle(key: str) -> None:
        jobs = held.pop(key, None)
        if jobs is None:
            return
        settled.append(key)
        answers = client.complete_many([(job.token, {"id": job.id}) for job in jobs])
        assert all(answer.ok for answer in answers)
        if then_claim:
            nxt = then_claim.pop(0)
            held[nxt] = _claim_held(files, client, nxt)
        await_deleted(files, key)

    return settle, settled


def test_stored_view_answers_a_page_from_a_newer_head_when_its_held_segment_was_dropped(
        tmp_path: Path, owner: Owner) -> None:
    """The version read holds segment 0's jobs in a record; before the reader
    reads them the owner completes them, drops the segment and deletes it:
    the page is the newer head's (every other job, pending, each once), and
    each completed job is archived once."""
    _, client, ids, keys = owner
    files = FileStore(tmp_path)
    held = {keys[0]: _claim_held(files, client, keys[0])}
    settle, settled = _settler(files, client, held)
    store = FaultyStore(files)
    store.inject("read", key_contains=keys[0], before=settle)

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            page = await reader.jobs("q", None, 100)
            stats = await reader.stats("q")
        finally:
            await reader.stop(5)
        assert [job["id"] for job in page] == ids[SEG:]  # each once, in seq order
        assert [job["status"] for job in page] == ["pending"] * (len(ids) - SEG)
        assert stats["counts"]["claimed"] == 0 and stats["counts"]["pending"] == len(ids) - SEG
        assert stats["served_by_this_broker"] is False

    run(main())
    assert settled == [keys[0]] and len(store.injected) == 1
    lines = await_archived_once(files, ids[:SEG])
    assert all(line["status"] == "completed" and line["result"] == {"id": line["id"]}
               for line in lines)
    assert not present(files, keys[0]) and all(present(files, key) for key in keys[1:])


def test_stored_view_shows_held_jobs_as_claimed_before_their_segment_is_settled(
        tmp_path: Path, owner: Owner) -> None:
    """The same read with the hook settling nothing: the held jobs are read
    from their segment, which stays while the record names it, and show as
    claimed, with their lease; the stats count them claimed."""
    _, client, ids, keys = owner
    files = FileStore(tmp_path)
    _claim_held(files, client, keys[0])
    store = FaultyStore(files)
    reads: list[str] = []
    store.inject("read", key_contains=keys[0], times=None, before=reads.append)

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            page = await reader.jobs("q", None, 100)
            claimed = await reader.jobs("q", "claimed", 100)
            stats = await reader.stats("q")
        finally:
            await reader.stop(5)
        assert [job["id"] for job in page] == ids
        assert [job["status"] for job in page] == ["claimed"] * SEG + ["pending"] * (
            len(ids) - SEG)
        assert [job["id"] for job in claimed] == ids[:SEG]
        assert all(job["lease"]["worker"] == "w" for job in claimed)
        assert [job["payload"] for job in claimed] == [{"seg": 0, "i": i} for i in range(SEG)]
        assert stats["counts"]["claimed"] == SEG and stats["total"] == len(ids)

    run(main())
    assert reads and set(reads) == {keys[0]}  # (the held lines came from the segment)
    assert present(files, keys[0]) and len(naming(files, keys[0])) == 1


def test_stored_view_gives_up_retryably_while_every_newer_head_settled_its_held_segment_too(
        tmp_path: Path, owner: Owner) -> None:
    """Before every read of a held segment the owner settles it and claims the
    next: after REREADS newer heads the read is refused as retryable (the
    queue is moving, nothing is lost), not ``segment_missing``."""
    _, client, ids, keys = owner
    files = FileStore(tmp_path)
    held = {keys[0]: _claim_held(files, client, keys[0])}
    settle, settled = _settler(files, client, held, then_claim=list(keys[1:]))
    store = FaultyStore(files)
    store.inject("read", key_contains="/segments/", times=None, before=settle)

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            with pytest.raises(BrokerUnavailable, match="moved on") as refused:
                await reader.jobs("q", None, 100)
        finally:
            await reader.stop(5)
        assert refused.value.retryable

    run(main())
    assert settled == keys[:1 + REREADS] and 1 + REREADS < SEGMENTS
    await_archived_once(files, ids[:SEG * len(settled)])
    still = keys[len(settled)]  # (claimed by the last settle, held: it stays)
    assert present(files, still) and len(naming(files, still)) == 1


def test_stored_view_answers_segment_missing_for_a_held_segment_deleted_behind_the_owner(
        tmp_path: Path, owner: Owner) -> None:
    """A segment a claim record holds jobs at, gone from the store: a real loss,
    answered ``segment_missing`` naming it (after one more head read), and
    the store is left as it was."""
    _, client, _, keys = owner
    files = FileStore(tmp_path)
    _claim_held(files, client, keys[0])
    files.delete(keys[0])
    before = {key: files.get(key) for key in files.list("")}
    store = FaultyStore(files)

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            with pytest.raises(SegmentMissing, match=keys[0]) as missing:
                await reader.jobs("q", None, 100)
        finally:
            await reader.stop(5)
        assert missing.value.code == "segment_missing"

    run(main())
    assert {key: files.get(key) for key in files.list("")} == before


@pytest.mark.parametrize("seed", range(3))
def test_stored_view_pages_and_stats_of_a_standby_process_while_the_owner_settles_held_segments(
        tmp_path: Path, seed: int) -> None:
    """A standby broker process answers ``iter_jobs`` pages and stats while a
    worker on the owner process claims whole segments (held in records) and
    completes them between (and during) them: every page answers, each job
    shows once, in seq order, and every job not yet claimed when a listing
    ended is in it; a job a page shows as claimed was claimed; the stats'
    total never grows. Once drained, each job is archived once and no segment
    object is left."""
    rnd = random.Random(seed)
    files = FileStore(tmp_path)
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG),
                       "--lease-s", "3600") as broker, \
            BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as standby:
        client = QueueClient(broker.url, "q")
        ids: list[str] = []
        for n in range(60):
            ids += client.push_many([{"seg": n, "i": i} for i in range(SEG)])
            if n % 9 == 4:
                ids += client.push_many([{"inline": n}])
        claimed: list[str] = []  # (before it is completed, archived and gone)
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                jobs = client.claim("w", max_jobs=SEG, lease_s=3600)
                if not jobs:
                    return
                claimed.extend(job.id for job in jobs)
                client.complete_many([(job.token, None) for job in jobs])

        worker = threading.Thread(target=drain, daemon=True)
        reader = QueueClient(standby.url, "q")
        totals: list[int] = []
        shown_claimed: set[str] = set()
        worker.start()
        try:
            while worker.is_alive():
                seen = []
                for job in reader.iter_jobs(page=rnd.choice([3, 7, 20])):
                    seen.append(job["id"])
                    if job["status"] == "claimed":
                        shown_claimed.add(job["id"])
                    if len(seen) % 10 == 0:
                        totals.append(reader.stats()["total"])
                assert seen == sorted(set(seen))
                assert set(ids) - set(claimed) <= set(seen)  # pending all along: listed
        finally:
            stop.set()
            worker.join(60)
        assert sorted(claimed) == ids and not worker.is_alive()
        assert totals == sorted(totals, reverse=True) and len(totals) > 5
        assert shown_claimed <= set(claimed)
        await_archived_once(files, ids)

        def drained() -> bool:
            head = stored(files)
            return not head.segment_refs and not head.claim_records and not files.list(
                paths.segments_prefix("q"))

        eventually(drained, 30, what="every segment dropped and deleted")
        assert reader.stats()["total"] == 0
