"""Read-only views of a queue state: stats, pages of jobs, the next wake-up.

No I/O and no clock; nothing here changes the state.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, NamedTuple

from broker import timefmt
from broker.errors import InvalidRequest, shown
from broker.limits import MAX_JOB_ID_CHARS, MAX_PAGE_JOBS
from broker.model import receipts as R
from broker.model.held import held_page
from broker.model.indexes import key_time, lease_time
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING, STATUSES, Job
from broker.model.segments.claims import page_refs, segment_page
from broker.model.segments.grouped import group_stats
from broker.model.segments.refs import next_wakeup, oldest_due
from broker.model.spills import next_due_ms, pending_times, spill_figures, spill_page
from broker.model.state import MAX_WINDOWS, QueueState, SegmentRef


def stats(state: QueueState, now_ms: int) -> dict[str, Any]:
    """Counts by status and figures a person watching the queue wants: the head's
    jobs and the pending jobs of its segments (whose jobs are created when due,
    so their age is their due time's)."""
    counts = state.count_by_status()  # "completed": done, awaiting the archive
    refs = state.segment_refs  # (their jobs are in the pending count)
    oldest: int | None = None
    next_run: int | None = None
    pending: list[tuple[int, int]] = []
    marked = 0  # claimed jobs marked for cancellation
    for job in state.jobs.touched():
        if job.status == PENDING:
            pending.append((job.run_at_ms, job.created_ms))
        elif job.cancel_ms is not None and job.status == CLAIMED:
            marked += 1
    marked += state.held_marked()  # (jobs held at records' segment parts: marked in their record)
    # untouched bulk-pushed jobs (see broker.model.jobtable) were created when due
    pending += [(at, at) for at in state.jobs.untouched_due_times()]
    if refs:
        due, later = oldest_due(refs), next_wakeup(refs, now_ms)
        pending += [(at, at) for at in (due, later) if at is not None]
    pending += pending_times(state) if state.spill_refs else []
    for run_at, created in pending:
        if run_at <= now_ms:
            oldest = created if oldest is None else min(oldest, created)
        else:
            next_run = run_at if next_run is None else min(next_run, run_at)
    return {
        "counts": counts,
        # completed and cancelled ones only await the archive
        # (counts has the segments', spill objects' and records' held jobs too)
        "total": sum(counts.values()) - counts[COMPLETED] - counts[CANCELLED],
        "paused": state.paused,
        "oldest_pending_age_s": None if oldest is None else (now_ms - oldest) / 1000,
        "next_delayed_run_at": None if next_run is None else timefmt.fmt(next_run),
        "enqueued_total": state.counters.enqueued - state.counters.reserved,
        "completed_total": state.counters.completed,
        "failed_total": state.counters.failed,
        "dead_total": state.counters.dead,
        "reclaimed_total": state.counters.reclaimed,
        "cancelled_total": state.counters.cancelled,
        "cancel_requested": marked,
        **spill_figures(state),
        "seq": state.seq,
        "approx_state_bytes": state.size_estimate(),
        "dedup_keys": len(state.keys),
        "receipts": len(state.receipts.requests),
        "settled_runs": state.receipts.settled_runs,
        "broker": None
        if state.broker is None
        else {
            "id": state.broker.id,
            "url": state.broker.url,
            "lease_s": state.broker.lease_ms / 1000,
            "lease_expires_at": timefmt.fmt(state.broker.expires_ms),
        },
        "settings": state.settings.shown(),
        # the dispatch rate limit: claims_per_s, claim_limit_per_s, claim_burst, claim_tokens
        **state.claims.figures(state.settings, now_ms),
        **_groups(state, now_ms),
    }


def _groups(state: QueueState, now_ms: int) -> dict[str, Any]:
    """``{"groups": ...}`` while the queue uses groups (see
    :func:`broker.model.segments.grouped.group_stats`), else nothing."""
    block = group_stats(state, now_ms)
    return {} if block is None else {"groups": block}


def _after_seq(after: str | None) -> int:
    """The seq of job id ``after`` (-1 for None); ``InvalidRequest`` if it is not one."""
    if after is None:
        return -1
    # any "j" and digits, padded or not: a person may type "j42"
    if not (after.startswith("j") and after[1:].isdecimal() and len(after) <= MAX_JOB_ID_CHARS):
        raise InvalidRequest(f"after must be a job id, got {after[:40]!r}")
    return int(after[1:])


def page_segments(state: QueueState, status: str | None, after: str | None,
                  limit: int) -> list[SegmentRef]:
    """The segments whose lines a page of :func:`list_jobs` (``status``,
    ``limit``, ``after``) shows jobs of, in seq order and at most
    :data:`~broker.model.state.MAX_WINDOWS` of them (the page ends before the
    next): what the broker loads before reading it. None for a page of
    another status, or one :func:`list_jobs` refuses."""
    if not state.segment_refs or status not in (None, PENDING):
        return []
    try:
        after_seq = _after_seq(after)
    except InvalidRequest:
        return []  # (the page itself is refused)
    return page_refs(state, after_seq, limit)[:MAX_WINDOWS]


def list_page(state: QueueState, status: str | None = None, limit: int = 100,
              after: str | None = None) -> Page:
    """A page of jobs in enqueue order, after job id ``after``, optionally by status:
    to read, not to change (jobs kept as lines are read into throwaway ``Job``
    objects, see :mod:`broker.model.jobtable`), and whether it was cut short
    (see :class:`Page`). ``InvalidRequest`` for a bad status, limit or id."""
    check_status(status)
    if not 1 <= limit <= MAX_PAGE_JOBS:
        raise InvalidRequest(f"limit must be 1..{MAX_PAGE_JOBS}, got {shown(limit)}")
    return jobs_after(state, status, _after_seq(after), limit)


def list_jobs(state: QueueState, status: str | None = None, limit: int = 100,
              after: str | None = None) -> list[Job]:
    """The jobs of :func:`list_page` (of a queue whose segment lines are all
    loaded, or without segments, a page shorter than ``limit`` is the last)."""
    return list_page(state, status, limit, after).jobs


def check_status(status: str | None) -> str | None:
    """``status`` if it is a job status or None; ``InvalidRequest`` otherwise."""
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"unknown status {shown(status)}; use pending, claimed, dead, "
                             "completed or cancelled")
    return status


class Page(NamedTuple):
    """Jobs in seq order, and ``cut``: None if the page is complete (as many
    jobs as asked, or every one after its start), else the seq of the first
    job it leaves out because that job's segment line is not loaded (a pending
    job: more follow). A cut page holds every job before ``cut``: the next
    one starts after seq ``cut - 1`` once the broker has loaded its line."""

    jobs: list[Job]
    cut: int | None = None


def jobs_after(state: QueueState, status: str | None, after_seq: int, n: int) -> Page:
    """Up to ``n`` jobs (of ``status``) after seq ``after_seq``, in seq order: the
    head's, the segments' pending ones and the spill objects' (dead, or
    pending once redriven by reference), up to
    the first whose line is not loaded (the page is cut there: see :class:`Page`)."""
    page = _jobs_after(state, status, after_seq, n)
    if not state.spill_refs or status not in (None, DEAD, PENDING):
        return page
    spilled, cut = spill_page(state, status, after_seq, n)
    if page.cut is not None:
        cut = page.cut if cut is None else min(cut, page.cut)
    merged = heapq.merge(page.jobs, spilled, key=lambda job: job.seq)
    jobs = [job for job in itertools.islice(merged, n) if cut is None or job.seq < cut]
    return Page(jobs, cut if len(jobs) < n else None)


def _jobs_after(state: QueueState, status: str | None, after_seq: int, n: int) -> Page:
    inline = state.jobs.peek(after_seq, status)
    held = state.seg_names and status in (None, CLAIMED, COMPLETED)  # (in claim records)
    if not held and (not state.segment_refs or status not in (None, PENDING)):
        return Page(list(itertools.islice(inline, n)))
    from_segments, unloaded = segment_page(state, after_seq, n) \
        if status in (None, PENDING) else ([], None)
    if held:
        from_records, cut = held_page(state, after_seq, n, status)
        from_segments = list(heapq.merge(from_segments, from_records, key=lambda job: job.seq))
        if cut is not None:
            unloaded = cut if unloaded is None else min(unloaded, cut)
    merged = heapq.merge(inline, from_segments, key=lambda job: job.seq)
    jobs = [job for job in itertools.islice(merged, n)
            if unloaded is None or job.seq < unloaded]
    return Page(jobs, unloaded if len(jobs) < n else None)


def next_wakeup_ms(state: QueueState, now_ms: int) -> int | None:
    """When the earliest lease expires or delayed job (inline, or of a segment:
    after ``now_ms``) becomes due, lazily kept receipts are to be written, or
    (ready jobs held back by the dispatch rate limit) the next token comes, or
    a group parked by its own rate gets its next token (never before
    ``now_ms + 1``): the commit loop's idle timer, whose due commit wakes the
    long polls."""
    times = []
    later = next_wakeup(state.segment_refs, now_ms) if state.segment_refs else None
    if later is not None:
        times.append(later)
    due = next_due_ms(state, now_ms) if state.spill_refs else None  # (pending spill objects)
    if due is not None:
        times.append(due)
    if state.receipts.unwritten_since is not None and state.seq > 0:  # (no object: nothing)
        times.append(state.receipts.unwritten_since + R.LAZY_WRITE_MS)
    if state.leases:
        times.append(lease_time(state.leases[0]))
    if state.delayed:
        times.append(key_time(state.delayed[0]))
    if state.groups is not None and not state.paused:  # (a fifo head due, a group's token)
        wake = state.groups.dispatch.next_wakeup_ms()
        if wake is not None:
            times.append(max(wake, now_ms + 1))
    if (state.ready or state.segment_refs or (
            state.groups is not None and state.groups.runnable(now_ms))) and not state.paused:
        token = state.claims.wakeup_ms(state.settings, now_ms)
        if token is not None:
            times.append(token)
    return min(times) if times else None
