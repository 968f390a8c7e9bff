"""broker.service.queue_target.QueueTarget.prepare and SegmentWindows: a batch
whose claims (or page of jobs) reach more segments than a queue keeps windows
of (MAX_WINDOWS) still gets the jobs of the first ones, in claim (seq) order:
the windows the batch needs are never evicted by the batch's own loads.
Real file store; the store is checked afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import paths
from broker.model.state import MAX_WINDOWS
from broker.service import by_reference
from broker.storage import FileStore, store_from_url
from tests.support.inprocess import bodies, held_jobs, run, segment_objects, started, stored

#: Segment bytes that make many small segments (about 45 jobs each).
SMALL_SEGMENT_BYTES = 400



@pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])
def test_prepare_keeps_the_windows_of_a_claim_over_more_segments_than_it_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool) -> None:
    monkeypatch.setattr(by_reference, "SEGMENT_MAX_BYTES", SMALL_SEGMENT_BYTES)
    store = store_from_url(f"file://{tmp_path}")

    async def go() -> None:
        broker = await started(store, segment_push_jobs=50, held_in_records=held)
        await broker.push("q", bodies(400))
        refs = stored(store).segment_refs
        assert len(refs) > MAX_WINDOWS
        jobs = await broker.claim("q", "w", max_jobs=400, lease_s=60)
        # the jobs of the first MAX_WINDOWS segments at least, in claim order
        covered = sum(ref.count for ref in refs[:MAX_WINDOWS])
        assert len(jobs) >= covered
        assert [job.id for job in jobs] == [f"j{seq:010d}" for seq in range(1, len(jobs) + 1)]
        head = stored(store)
        # (lines of the head, or held at the claim record's segment parts)
        claimed = sorted(job.seq for job in [*head.jobs.values(), *held_jobs(store, head)]
                         if job.status == "claimed")
        assert claimed == list(range(1, len(jobs) + 1))
        assert sum(ref.remaining for ref in head.segment_refs) == 400 - len(jobs)
        assert {ref.key for ref in head.segment_refs} <= set(segment_objects(store))
        await broker.stop()

    run(go())


def test_prepare_keeps_the_windows_of_a_page_over_more_segments_than_it_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(by_reference, "SEGMENT_MAX_BYTES", SMALL_SEGMENT_BYTES)
    store = store_from_url(f"file://{tmp_path}")

    async def go() -> None:
        broker = await started(store, segment_push_jobs=50)
        await broker.push("q", bodies(400))
        assert len(stored(store).segment_refs) > MAX_WINDOWS
        before = store.read(paths.state_key("q")).data
        page = await broker.jobs("q", limit=500)
        assert page, "a page of a queue with 400 pending jobs came back empty"
        assert [job["seq"] for job in page] == list(range(1, len(page) + 1))
        assert store.read(paths.state_key("q")).data == before  # (a read writes nothing)
        await broker.stop()

    run(go())


def test_a_broker_not_serving_the_queue_shows_its_segment_jobs_in_a_page(
        tmp_path: Path) -> None:
    """A read on a broker that does not serve the queue is answered from the
    stored object (nothing is taken over): its page shows the segments'
    pending jobs too, as the owner's does."""
    store = store_from_url(f"file://{tmp_path}")

    async def go() -> None:
        owner = await started(store, segment_push_jobs=50)
        await owner.push("q", bodies(3))
        await owner.push("q", bodies(100, 3))
        other = await started(store, url="http://other", segment_push_jobs=50)
        before = store.read(paths.state_key("q")).data
        want = [job["id"] for job in await owner.jobs("q", limit=60)]
        assert len(want) == 60
        assert [job["id"] for job in await other.jobs("q", limit=60)] == want
        assert [job["id"] for job in await other.jobs("q", status="pending", limit=60,
                                                      after=want[9])] == \
            [f"j{seq:010d}" for seq in range(11, 71)]
        assert store.read(paths.state_key("q")).data == before
        assert "q" not in other._queues  # (nothing taken over)
        await owner.stop()
        await other.stop()

    run(go())


def test_a_cancel_across_more_segments_than_windows_answers_retry_then_cancels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel of one job in each of 9+ segments: the batch keeps the windows it
    loads (at most 8 for one cancel); the ids beyond are answered "retry" with
    nothing changed, and a retry cancels them."""
    monkeypatch.setattr(by_reference, "SEGMENT_MAX_BYTES", 100)  # 10 jobs a segment
    store = FileStore(tmp_path)

    async def go() -> None:
        broker = await started(store, segment_push_jobs=20)
        ids = await broker.push("q", [b'{"n":%d}' % i for i in range(100)])
        head = stored(store)
        assert len(head.segment_refs) > MAX_WINDOWS
        picks = [f"j{ref.first_seq + ref.count - 1:010d}" for ref in head.segment_refs]
        first = await broker.cancel("q", picks)
        done = [a.id for a in first if a.status == "cancelled"]
        assert len(done) < len(picks)  # (the 9th segment was not loaded for it)
        assert len(done) >= 8 and all(a.status in ("cancelled", "retry") for a in first)
        again = await broker.cancel("q", [a.id for a in first if a.status == "retry"])
        assert all(a.status == "cancelled" for a in again)
        assert (await broker.stats("q"))["cancelled_total"] == len(picks)
        assert set(ids) >= set(picks)
        await broker.stop()

    run(go())
