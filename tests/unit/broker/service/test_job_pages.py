"""Pages of jobs over segment objects: broker.model.views.jobs_after
says where a page was cut short (a segment line not loaded), browse.page says
where to read on and that a job follows; broker.service.job_pages completes
such a page in steps, so the API's pages and the dashboard's are full unless
they are the last. Pure tests of the model (segments made with
encode_segment and "loaded" by hand), of the step helpers with a scripted
read, and the dashboard over an in-process broker with a memory store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.errors import BrokerUnavailable
from broker.model import browse
from broker.model import transitions as T
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import JobsView, PushPayloads, ReadJobs
from broker.model.state import MAX_WINDOWS, QueueState, SegmentRef, SegmentWindows
from broker.model.views import Page, jobs_after, list_page
from broker.paths import segment_key, segment_name
from broker.service import job_pages
from broker.service.dashboard import Dashboard
from broker.service.history import History
from broker.storage import MemoryStore
from tests.support.inprocess import run, started
from tests.support.states import new_queue

NOW = 1_767_225_600_000


def _segment(state: QueueState, n: int, load: int | None) -> None:
    """Reserve n seqs, "write" their segment, reference it; load its first
    ``load`` lines (all: None; none: 0)."""
    first = state.counters.enqueued + 1
    data = encode_segment("q", first, 0, NOW, [b'{"n":%d}' % (first + i) for i in range(n)],
                          max_attempts=3)
    ref = SegmentRef(segment_key("q", segment_name(first, "0123abcd")), f'"e{first}"',
                     first, n, 0, NOW)
    state.counters.enqueued += n
    state.segment_refs.append(ref)
    lines = segment_lines(data, ref)
    if load != 0:
        assert state.windows is not None
        state.windows.put(ref, 0, lines if load is None else lines[:load])


def _queue(first_load: int | None = None) -> QueueState:
    """seqs 1-2 inline, 3-7 a segment (its first ``first_load`` lines loaded),
    8 inline, 9-13 a segment not loaded, 14 inline, 15-19 a segment loaded."""
    state = new_queue(NOW)
    state.windows = SegmentWindows()
    T.apply(state, PushPayloads((b"1", b"2")), NOW)
    _segment(state, 5, first_load)
    T.apply(state, PushPayloads((b"8",)), NOW)
    _segment(state, 5, 0)
    T.apply(state, PushPayloads((b"14",)), NOW)
    _segment(state, 5, None)
    return state


def _seqs(page: Page) -> tuple[list[int], int | None]:
    return [job.seq for job in page.jobs], page.cut


def test_jobs_after_tells_where_a_page_is_cut_short_and_only_then() -> None:
    state = _queue()
    assert _seqs(jobs_after(state, None, -1, 100)) == (list(range(1, 9)), 9)
    assert _seqs(jobs_after(state, PENDING, -1, 100)) == (list(range(1, 9)), 9)
    assert _seqs(jobs_after(state, None, -1, 5)) == (list(range(1, 6)), None)  # (full)
    assert _seqs(jobs_after(state, None, -1, 8)) == (list(range(1, 9)), None)
    assert _seqs(jobs_after(state, None, 8, 100)) == ([], 9)  # (nothing loaded after)
    assert _seqs(jobs_after(state, None, 13, 100)) == (list(range(14, 20)), None)  # (last)
    assert _seqs(jobs_after(state, CLAIMED, -1, 100)) == ([], None)  # (no segment job)
    # a window holding part of its segment: cut at its first line not loaded
    assert _seqs(jobs_after(_queue(first_load=3), None, -1, 100)) == ([1, 2, 3, 4, 5], 6)
    page = list_page(state, None, 100, "j0000000002")
    assert _seqs(page) == ([3, 4, 5, 6, 7, 8], 9)


def test_read_jobs_answers_where_to_read_on() -> None:
    state = _queue()
    got = T.apply(state, ReadJobs(None, 100, "j3"), NOW).view
    assert isinstance(got, JobsView)
    assert [row["id"] for row in got.rows] == [f"j{s:010d}" for s in range(4, 9)]
    assert got.resume_after == 8
    full = T.apply(state, ReadJobs(None, 2, "j3"), NOW).view
    assert len(full.rows) == 2 and full.resume_after is None


def test_browse_page_cut_short_says_where_to_read_on_and_that_jobs_follow() -> None:
    state = _queue()

    def page(after: int | None, before: int | None, limit: int) -> tuple[Any, ...]:
        got = browse.page(state, NOW, None, after, before, limit)
        return [r["seq"] for r in got["rows"]], got["has_next"], got["resume_after"]

    assert page(None, None, 10) == (list(range(1, 9)), True, 8)
    # a full page whose look-ahead is cut: complete, and a job follows
    assert page(None, None, 8) == (list(range(1, 9)), True, None)
    assert page(8, None, 10) == ([], True, 8)
    assert page(13, None, 10) == (list(range(14, 20)), False, None)
    # the last 3 before 12 are 9-11, not loaded: read on after 8, below 12
    assert page(None, 12, 3) == ([], True, 8)
    # after and before both: those between
    assert page(2, 8, 50) == ([3, 4, 5, 6, 7], True, None)
    assert page(5, 9, 50) == ([6, 7, 8], True, None)  # (cut at 9: not below 9)


def _scripted(answers: list[JobsView]) -> tuple[list[ReadJobs], Any]:
    asked: list[ReadJobs] = []

    async def read(op: ReadJobs) -> JobsView:
        asked.append(op)
        return answers.pop(0)
    return asked, read


def _rows(*seqs: int) -> list[dict[str, Any]]:
    return [{"id": f"j{s:010d}"} for s in seqs]


def test_full_page_reads_on_after_each_cut_until_full_or_last() -> None:
    asked, read = _scripted([JobsView(_rows(1, 2), 4), JobsView([], 6),
                             JobsView(_rows(7), 7), JobsView(_rows(8, 9, 10), None)])
    got = asyncio.run(job_pages.full_page(read, ReadJobs(PENDING, 10, "j0", raw=True)))
    assert [row["id"] for row in got] == [f"j{s:010d}" for s in (1, 2, 7, 8, 9, 10)]
    assert [(op.after, op.limit) for op in asked] == [
        ("j0", 10), ("j0000000004", 8), ("j0000000006", 8), ("j0000000007", 7)]
    assert all(op.status == PENDING and op.raw for op in asked)
    asked, read = _scripted([JobsView(_rows(1, 2), 3), JobsView(_rows(4), None)])
    assert len(asyncio.run(job_pages.full_page(read, ReadJobs(None, 3)))) == 3
    assert len(asked) == 2


def test_full_page_refuses_retryably_when_steps_stop_making_progress() -> None:
    stuck = [JobsView(_rows(1), 5)] + [JobsView([], 5)] * (job_pages.MAX_STALLS + 1)
    asked, read = _scripted(stuck)
    with pytest.raises(BrokerUnavailable, match="no progress") as err:
        asyncio.run(job_pages.full_page(read, ReadJobs(None, 10)))
    assert err.value.retryable and len(asked) == job_pages.MAX_STALLS + 2


def test_the_dashboards_pages_of_a_queue_over_many_segments_are_full_until_the_last() -> None:
    """A page of the job browser spans more segments than a batch loads: it is
    still full, ``has_next`` holds until the last, and walking forwards and
    back shows the API's listing (itself full pages) filtered by status."""
    async def main() -> None:
        broker = await started(MemoryStore(), segment_push_jobs=5)
        try:
            ids = await broker.push("q", [b'"inline"'])
            for n in range(4 * MAX_WINDOWS):  # a segment of 5 jobs each
                ids += await broker.push("q", [b'{"n":%d}' % (5 * n + i) for i in range(5)])
                if n % 7 == 3:
                    ids += await broker.push("q", [b'"a"', b'"b"'])
            state = broker.served("q").loop.state  # type: ignore[union-attr]
            assert len(state.segment_refs) >= 4 * MAX_WINDOWS - 1
            await broker.claim("q", "w", 3)
            limit = 2 * MAX_WINDOWS * 5
            listing, after = [], None
            while page := await broker.jobs("q", None, limit, after):
                assert len(listing) + len(page) == len(ids) or len(page) == limit
                listing += page
                after = page[-1]["id"]
            assert [job["id"] for job in listing] == ids
            dash = Dashboard(broker, History(broker))
            for status in (None, PENDING, CLAIMED):
                want = [int(j["id"][1:]) for j in listing if status in (None, j["status"])]
                walked, after_seq, pages = [], None, 0
                while True:
                    got = await dash.view("q", "page", status, after_seq, None, limit)
                    assert got["resume_after"] is None
                    seqs = [r["seq"] for r in got["rows"]]
                    walked += seqs
                    pages += 1
                    if not got["has_next"]:
                        break
                    assert len(seqs) == limit
                    after_seq = seqs[-1]
                assert walked == want, status
                assert pages == max(1, -(-len(want) // limit)), status
                back, before = [], max(want, default=0) + 1
                while True:
                    got = await dash.view("q", "page", status, None, before, limit)
                    seqs = [r["seq"] for r in got["rows"]]
                    back = seqs + back
                    if not got["has_prev"]:
                        break
                    assert len(seqs) == limit
                    before = seqs[0]
                assert back == want, status
        finally:
            await broker.stop(5)

    run(main())
