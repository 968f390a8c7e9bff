"""The dashboard's views of a queue (broker.model.browse) and the keyset paging under
them (JobTable.peek, peek_before): every page, forwards and back, with and without a
status filter, on dense and sparse tables, is what a plain sort and filter gives; a
page from the middle of a dense table reads only its own jobs; the summary counts as
``stats`` does; a job's view shows no lease token."""

from __future__ import annotations

import random
from typing import Any

import pytest

from broker import paths, timefmt
from broker.errors import InvalidRequest
from broker.model import browse
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING
from broker.model.jobtable import PROBE
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    NewJob,
    Push,
)
from broker.model.state import QueueSettings, QueueState
from broker.model.views import stats
from broker.service.dashboard import Dashboard
from broker.service.history import History
from broker.storage import MemoryStore
from tests.support.inprocess import run, started
from tests.support.states import new_queue, queue_of

NOW = 1_700_000_000_000


def mixed(n: int, seed: int) -> QueueState:
    """``n`` bulk-pushed jobs, some claimed, some dead, some completed, some gone
    (runs of gaps longer than PROBE included)."""
    rng = random.Random(seed)
    state = new_queue(NOW, QueueSettings(max_attempts=1))
    T.apply(state, T.PushPayloads(tuple(b"%d" % i for i in range(n))), NOW)
    claimed = T.apply(state, Claim("w", n // 3, 60_000), NOW + 1).jobs
    tokens = list(claimed.tokens)
    rng.shuffle(tokens)
    third = len(tokens) // 3
    T.apply(state, Fail(tuple(FailItem(t, "boom") for t in tokens[:third])), NOW + 2)
    T.apply(state, Complete(tuple(CompleteItem(t) for t in tokens[third:2 * third])), NOW + 3)
    gone = [s for s in state.jobs if rng.random() < 0.2]
    start = n // 2
    gone += list(range(start, min(n, start + PROBE + 500)))  # a gap wider than PROBE
    for seq in set(gone):  # (only the table is read here: the heaps may go stale)
        entry = state.jobs.entries.get(seq)
        if entry is not None and (isinstance(entry, bytes) or entry.status == PENDING):
            del state.jobs.entries[seq]
    return state


def expected(state: QueueState, status: str | None) -> list[int]:
    return [job.seq for job in state.jobs.peek() if status in (None, job.status)]


def seqs(page: dict[str, Any]) -> list[int]:
    return [row["seq"] for row in page["rows"]]


@pytest.mark.parametrize("status", [None, PENDING, CLAIMED, DEAD, COMPLETED])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_page_forwards_and_back_is_the_plain_filtered_order(status: str | None,
                                                                 seed: int) -> None:
    state = mixed(12_000, seed)
    want = expected(state, status)
    limit = 37
    walked: list[int] = []
    page = browse.page(state, NOW, status, None, None, limit)
    assert not page["has_prev"]
    while True:
        walked += seqs(page)
        if not page["has_next"]:
            break
        page = browse.page(state, NOW, status, seqs(page)[-1], None, limit)
        assert page["has_prev"]
    assert walked == want
    back: list[int] = []
    page = browse.page(state, NOW, status, None, (want[-1] + 1) if want else 1, limit)
    while True:
        back = seqs(page) + back
        if not page["has_prev"]:
            break
        page = browse.page(state, NOW, status, None, seqs(page)[0], limit)
        assert page["has_next"]
    assert back == want
    for cursor in random.Random(seed).sample(range(0, 12_100), 30):  # any seq, held or not
        assert seqs(browse.page(state, NOW, status, cursor, None, limit)) == \
            [s for s in want if s > cursor][:limit]
        assert seqs(browse.page(state, NOW, status, None, cursor, limit)) == \
            [s for s in want if s < cursor][-limit:]


class NoScan(dict):  # type: ignore[type-arg]
    """A job table's dict that fails a test walking more than 1,000 of its entries."""

    def items(self) -> Any:
        for n, item in enumerate(super().items()):
            if n >= 1000:
                raise AssertionError("a page from the middle walked the table")
            yield item

    def values(self) -> Any:
        raise AssertionError("a page from the middle walked the table")


def test_a_middle_page_of_a_dense_table_reads_only_its_own_jobs() -> None:
    state = queue_of(200_000, NOW)
    state.jobs.entries = NoScan(state.jobs.entries)
    for after, before in [(100_000, None), (None, 150_000), (199_990, None), (None, 5)]:
        page = browse.page(state, NOW, None, after, before, 50)
        assert page["rows"] and page["has_next"] is not (after == 199_990)
    assert browse.job(state, NOW, "q", "j0000123456")["id"] == "j0000123456"  # type: ignore[index]


class CountedScans(dict):  # type: ignore[type-arg]
    """A job table's dict that counts the walks through its entries."""

    scans = 0

    def items(self) -> Any:
        CountedScans.scans += 1
        return super().items()


def test_a_first_page_filtered_on_a_status_no_job_has_walks_the_table_once() -> None:
    state = queue_of(20_000, NOW)
    state.jobs.entries = CountedScans(state.jobs.entries)
    CountedScans.scans = 0
    page = browse.page(state, NOW, CANCELLED, None, None, 50)
    assert page == {"rows": [], "has_next": False, "has_prev": False, "in_segments": 0,
                    "resume_after": None}
    assert CountedScans.scans == 1


def test_the_summary_counts_as_stats_does() -> None:
    for state in (queue_of(0, NOW), queue_of(500, NOW), mixed(3000, 7)):
        full, quick = stats(state, NOW + 5000), browse.summary(state, NOW + 5000)
        assert quick["counts"] == full["counts"]
        assert quick["total"] == full["total"]
        assert quick["oldest_pending_age_s"] == full["oldest_pending_age_s"]
        assert quick["paused"] == full["paused"]
        assert quick["counters"]["depth"] == full["total"]


def test_the_summary_counts_cancels_and_shows_the_dispatch_rate_as_stats_does() -> None:
    state = mixed(3000, 11)
    state.settings.max_claims_per_s = 50.0
    T.apply(state, Claim("w", 40, 60_000), NOW + 4)  # (40 of the burst's 50 tokens)
    claimed = [job.id for job in state.jobs.peek(-1, CLAIMED)][:3]
    pending = [job.id for job in state.jobs.peek(-1, PENDING)][:2]
    T.apply(state, Cancel(tuple(claimed + pending)), NOW + 5)
    full, quick = stats(state, NOW + 5000), browse.summary(state, NOW + 5000)
    assert quick["counts"] == full["counts"] and quick["counts"][CANCELLED] == 2
    assert quick["cancel_requested"] == full["cancel_requested"] == 3
    assert quick["counters"]["cancelled"] == full["cancelled_total"] == 5
    for name in ("claims_per_s", "claim_limit_per_s", "claim_burst", "claim_tokens"):
        assert quick[name] == full[name], name
    assert quick["claim_limit_per_s"] == 50.0 and quick["claim_burst"] == 50
    assert quick["claims_per_s"] == (1000 + 40) / 10  # the jobs claimed, over the meter's 10 s
    marked = browse.page(state, NOW, CLAIMED, None, None, 200)["rows"]
    assert {r["id"] for r in marked if r["cancel_requested"]} == set(claimed)


def test_a_job_view_shows_a_cancel_mark_and_a_cancelled_jobs_archive_object() -> None:
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b"1"), NewJob(b"2"), NewJob(b"3"))), NOW)
    (token,) = T.apply(state, Claim("worker-7", 1, 30_000), NOW + 1).jobs.tokens
    assert browse.job(state, NOW, "q", "j0000000001")["cancellable"]  # type: ignore[index]
    T.apply(state, Cancel(("j0000000001", "j0000000002")), NOW + 2)
    codec.stamp(state, "w", NOW + 2, "c-cancel")
    marked = browse.job(state, NOW, "q", "j0000000001")
    assert marked is not None and marked["status"] == CLAIMED
    assert marked["cancel_requested_at"] == timefmt.fmt(NOW + 2)
    assert not marked["cancellable"] and marked["cancelled_at"] is None
    assert marked["lease"]["worker"] == "worker-7" and token not in repr(marked)
    cancelled = browse.job(state, NOW, "q", "j0000000002")
    assert cancelled is not None and cancelled["status"] == CANCELLED
    assert cancelled["cancelled_at"] == cancelled["cancel_requested_at"] == \
        timefmt.fmt(NOW + 2)
    assert cancelled["completed_at"] is None and cancelled["result"] is None
    assert not cancelled["cancellable"] and not cancelled["redrivable"]
    seq = next(iter(state.completed))
    assert cancelled["archive_key"] == paths.archive_key("q", NOW + 2, seq, "c-cancel", 2, 2)
    assert browse.job(state, NOW, "q", "j0000000003")["cancellable"]  # type: ignore[index]


def test_the_oldest_pending_age_counts_delayed_and_retried_jobs_by_their_own_times() -> None:
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b"1", delay_ms=60_000),)), NOW)
    assert browse.summary(state, NOW + 1000)["oldest_pending_age_s"] is None
    T.apply(state, T.PushPayloads((b"2",)), NOW + 2000)
    summary = browse.summary(state, NOW + 5000)
    assert summary["oldest_pending_age_s"] == 3.0
    assert summary["next_delayed_run_at"] is not None


def test_a_job_view_shows_its_lease_holder_never_its_token_and_its_archive_object() -> None:
    state = new_queue(NOW)
    T.apply(state, Push((NewJob(b'{"big": 123456789012345678901234567890}', key="k-1"),
                         NewJob(b"[1]"))), NOW)
    claimed = T.apply(state, Claim("worker-7", 2, 30_000), NOW + 1).jobs
    job = browse.job(state, NOW, "q", "j0000000001")
    assert job is not None
    assert job["lease"]["worker"] == "worker-7" and "token" not in job["lease"]
    assert claimed.tokens[0] not in repr(job)
    assert "123456789012345678901234567890" in job["payload"]  # numbers exact
    assert browse.find(state, NOW, "k-1") == "j0000000001"
    assert browse.find(state, NOW, "j0000000002") == "j0000000002"
    assert browse.find(state, NOW, "nope") is None
    T.apply(state, Complete((CompleteItem(claimed.tokens[1], b'{"ok":1}'),)), NOW + 2)
    codec.stamp(state, "w", NOW + 2, "c-abc")
    done = browse.job(state, NOW, "q", "j0000000002")
    assert done is not None and done["status"] == COMPLETED
    seq = next(iter(state.completed))
    assert done["archive_key"] == paths.archive_key("q", NOW + 2, seq,
                                                    state.jobs[2].done_commit or "", 2, 2)
    assert browse.job(state, NOW, "q", "j0000000099") is None
    assert browse.job(state, NOW, "q", "bogus") is None


def test_a_page_refuses_a_bad_status_or_size() -> None:
    state = queue_of(3, NOW)
    with pytest.raises(InvalidRequest, match="unknown status"):
        browse.page(state, NOW, "zombie", None, None, 10)
    with pytest.raises(InvalidRequest, match="limit must be"):
        browse.page(state, NOW, None, None, None, browse.MAX_PAGE + 1)


def test_pages_and_jobs_of_a_queue_with_segments_show_the_segments_pending_jobs() -> None:
    """A broker whose bulk pushes go into segment objects: the dashboard's pages,
    forwards and back, are the API's listing (which includes the segments' jobs)
    filtered by status; a segment's job opens by id."""
    async def main() -> None:
        store = MemoryStore()
        broker = await started(store, segment_push_jobs=100)
        try:
            await broker.create_queue("q", {"max_attempts": 1})
            for n in range(3):  # three segments of 300 jobs
                await broker.push("q", [b'{"n":%d}' % (n * 300 + i) for i in range(300)])
            assert len((await broker.stats("q"))["settings"]) and \
                broker.served("q").loop.state.segment_refs  # type: ignore[union-attr]
            claimed = await broker.claim("q", "w", 40)
            await broker.fail("q", [FailItem(j.token, "boom") for j in claimed[:15]])
            listing: list[dict[str, Any]] = []
            after = None
            while True:
                got = await broker.jobs("q", None, 77, after)
                listing += got
                if len(got) < 77:
                    break
                after = got[-1]["id"]
            assert len(listing) == 900
            dash = Dashboard(broker, History(broker))
            for status in (None, PENDING, CLAIMED, DEAD):
                want = [int(j["id"][1:]) for j in listing if status in (None, j["status"])]
                walked, after_seq = [], None
                while True:
                    page = await dash.view("q", "page", status, after_seq, None, 50)
                    walked += seqs(page)
                    if not page["has_next"]:
                        break
                    after_seq = seqs(page)[-1]
                assert walked == want, status
                back, before = [], max(want, default=0) + 1
                while True:
                    page = await dash.view("q", "page", status, None, before, 50)
                    back = seqs(page) + back
                    if not page["has_prev"]:
                        break
                    before = seqs(page)[0]
                assert back == want, status
            job = await dash.view("q", "job", "q", "j0000000777")
            assert job is not None and job["status"] == PENDING and '"n": 776' in job["payload"]
            assert await dash.view("q", "find", "j0000000777") == "j0000000777"
        finally:
            await broker.stop(5)

    run(main())
