"""Reads of a queue this broker does not serve (broker.service.stored_view)
while its owner drains segments: the head version read may
reference a segment the owner has since taken empty, dropped and deleted.
The read re-reads the head and answers from the newer version; only a
segment the newest head still references and the store lacks (deleted behind
the brokers' backs) is ``segment_missing``.

Deterministic: the owner is a real broker process over a file store; the
reader is an in-process broker over the same files through a
:class:`~tests.support.faults.FaultyStore` whose hook, just before the
reader's read of a segment, has the owner claim that segment's jobs (which
drops the reference and deletes the object) and waits until the object is
gone.
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
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import FaultyStore
from tests.support.inprocess import run, started, stored

#: Jobs per segment: each push of this many goes into one segment object.
SEG = 5
#: Segments pushed.
SEGMENTS = 6

#: the owner moves claimed segment jobs into the head (the pre-1b path, which these
#: tests pin: a claim alone drains a segment, so its object goes while its jobs are
#: claimed); with held_in_records (the default) it stays until they are done
MOVED_IN = ("--no-held-in-records",)


@pytest.fixture()
def owner(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[str]]]:
    """A broker process serving queue ``q`` of SEGMENTS one-push segments
    (nothing inline: a claim of SEG jobs takes exactly the first segment left);
    every job id."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG), *MOVED_IN,
                       "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        ids: list[str] = []
        for n in range(SEGMENTS):
            ids += client.push_many([{"seg": n, "i": i} for i in range(SEG)])
        assert len(stored(FileStore(tmp_path)).segment_refs) == SEGMENTS
        yield broker, ids


def _drainer(tmp_path: Path, url: str) -> Callable[[str], None]:
    """A hook that has the owner claim the jobs of segment ``key`` (the first
    one left) and waits until the owner has deleted its object."""
    client = QueueClient(url, "q")
    files = FileStore(tmp_path)

    def drain(key: str) -> None:
        jobs = client.claim("w", max_jobs=SEG, lease_s=3600)
        assert len(jobs) == SEG and key.startswith(paths.segments_prefix("q"))
        eventually(lambda: key not in files.list(paths.segments_prefix("q")),
                   what=f"the owner deleting {key}")
    return drain


def test_stored_view_answers_a_page_from_a_newer_head_when_its_segment_was_dropped(
        tmp_path: Path, owner: tuple[BrokerProcess, list[str]]) -> None:
    broker, ids = owner
    store = FaultyStore(FileStore(tmp_path))
    store.inject("read", key_contains="/segments/", before=_drainer(tmp_path, broker.url))

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            page = await reader.jobs("q", None, 100)
            stats = await reader.stats("q")
        finally:
            await reader.stop(5)
        assert [job["id"] for job in page] == ids  # each once, in seq order
        assert [job["status"] for job in page] == ["claimed"] * SEG + ["pending"] * (
            len(ids) - SEG)
        assert stats["counts"]["claimed"] == SEG and stats["total"] == len(ids)
        assert stats["served_by_this_broker"] is False

    run(main())
    assert len(store.injected) == 1  # (the hook ran: one segment went)


def test_stored_view_gives_up_retryably_while_every_newer_head_lost_its_segment_too(
        tmp_path: Path, owner: tuple[BrokerProcess, list[str]]) -> None:
    """The owner drains the next segment before every read of one: after
    REREADS newer heads the read is refused as retryable (the queue is moving,
    nothing is lost), not ``segment_missing``."""
    broker, _ = owner
    store = FaultyStore(FileStore(tmp_path))
    store.inject("read", key_contains="/segments/", times=None,
                 before=_drainer(tmp_path, broker.url))

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            with pytest.raises(BrokerUnavailable, match="moved on") as refused:
                await reader.jobs("q", None, 100)
        finally:
            await reader.stop(5)
        assert refused.value.retryable

    run(main())
    assert len(store.injected) == 1 + REREADS < SEGMENTS


def test_stored_view_answers_segment_missing_for_a_segment_deleted_behind_the_owner(
        tmp_path: Path, owner: tuple[BrokerProcess, list[str]]) -> None:
    """A segment the newest head still references, gone from the store: a real
    loss, answered ``segment_missing`` naming it (after one more head read),
    and the store is left as it was."""
    files = FileStore(tmp_path)
    lost = stored(files).segment_refs[2].key
    files.delete(lost)
    before = {key: files.get(key) for key in files.list("")}
    store = FaultyStore(files)

    async def main() -> None:
        reader = await started(store, url="http://standby", lease_s=3600)
        try:
            with pytest.raises(SegmentMissing, match=lost) as missing:
                await reader.jobs("q", None, 100)
        finally:
            await reader.stop(5)
        assert missing.value.code == "segment_missing"

    run(main())
    assert {key: files.get(key) for key in files.list("")} == before


@pytest.mark.parametrize("seed", range(3))
def test_stored_view_pages_and_stats_of_a_standby_process_while_the_owner_drains_segments(
        tmp_path: Path, seed: int) -> None:
    """A standby broker process answers ``iter_jobs`` pages and stats while a
    worker on the owner process claims and completes whole segments between
    (and during) them: every page answers, each job shows once, in seq order,
    and every job not yet claimed when a listing ended is in it; the
    stats' total never grows. On the code before the re-read this failed with
    ``segment_missing`` in most seeds."""
    rnd = random.Random(seed)
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG), *MOVED_IN,
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
        worker.start()
        try:
            while worker.is_alive():
                seen = []
                for job in reader.iter_jobs(page=rnd.choice([3, 7, 20])):
                    seen.append(job["id"])
                    if len(seen) % 10 == 0:
                        totals.append(reader.stats()["total"])
                assert seen == sorted(set(seen))
                assert set(ids) - set(claimed) <= set(seen)  # pending all along: listed
        finally:
            stop.set()
            worker.join(60)
        assert sorted(claimed) == ids and not worker.is_alive()
        assert totals == sorted(totals, reverse=True) and len(totals) > 5
