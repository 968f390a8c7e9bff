"""broker.service.stored_view pages of a standby broker while the owner (a
real broker process) changes the queue between the head versions one page
reads: a purge that drops every segment, and a segment deleted behind the
brokers' backs while the owner drains others (a real loss: segment_missing,
never a short page). File store; the reader is in-process, its segment reads
hooked through a FaultyStore."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import paths
from broker.errors import SegmentMissing
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import FaultyStore
from tests.support.inprocess import run, started, stored

SEG = 5  # jobs a segment: each push of this many is one segment object

#: the owner moves claimed segment jobs into the head (the pre-1b path, which these
#: tests pin: a claim alone drains a segment, so its object goes while its jobs are
#: claimed); with held_in_records (the default) it stays until they are done
MOVED_IN = ("--no-held-in-records",)


def _fill(url: str) -> tuple[QueueClient, list[str]]:
    """20 segments, each followed by one inline job; every id."""
    client = QueueClient(url, "q")
    ids: list[str] = []
    for n in range(20):
        ids += client.push_many([{"seg": n, "i": i} for i in range(SEG)])
        ids += client.push_many([{"inline": n}])
    return client, ids


def test_stored_view_page_after_a_purge_between_head_versions(tmp_path: Path) -> None:
    """Before the reader's first segment read the owner claims 3 jobs and
    purges every pending one (its segments dropped and deleted): the page is
    the newer head's, the 3 claimed jobs, each once."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG), *MOVED_IN,
                       "--lease-s", "3600") as broker:
        client, ids = _fill(broker.url)
        files = FileStore(tmp_path)
        store = FaultyStore(files)

        def purge(key: str) -> None:
            client.claim("w", max_jobs=3, lease_s=3600)
            client.purge(["pending"])
            eventually(lambda: key not in files.list(paths.segments_prefix("q")),
                       what=f"the owner deleting {key}")

        store.inject("read", key_contains="/segments/", before=purge)

        async def main() -> list[dict]:
            reader = await started(store, url="http://standby", lease_s=3600)
            try:
                return await reader.jobs("q", None, 1000)
            finally:
                await reader.stop(5)

        page = run(main())
    assert [(job["id"], job["status"]) for job in page] == [(i, "claimed") for i in ids[:3]]


def test_stored_view_answers_segment_missing_for_a_lost_segment_while_others_drain(
        tmp_path: Path) -> None:
    """Segment 12 deleted behind the brokers' backs; the owner drains a segment
    before each of the reader's first 3 segment reads (each a re-read of the
    head). A client following next_after gets full pages, each job once, up to
    the lost segment, then segment_missing naming it."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", str(SEG), *MOVED_IN,
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
            client.claim("w", max_jobs=SEG + 1, lease_s=3600)
            eventually(lambda: key not in files.list(paths.segments_prefix("q")),
                       what=f"the owner deleting {key}")

        store.inject("read", key_contains="/segments/", times=None, before=drain)

        async def main() -> list[str]:
            reader = await started(store, url="http://standby", lease_s=3600)
            seen: list[str] = []
            try:
                with pytest.raises(SegmentMissing, match=lost):
                    after = None
                    while True:
                        page = await reader.jobs("q", None, 7, after)
                        assert len(page) == 7, "a short page while jobs follow"
                        seen += [job["id"] for job in page]
                        after = seen[-1]
            finally:
                await reader.stop(5)
            return seen

        seen = run(main())
    assert len(drained) == 3
    assert seen == ids[:len(seen)] and len(seen) >= 12 * (SEG + 1) - 7
