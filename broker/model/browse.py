"""Reads for the dashboard (:mod:`broker.http.ui`): what a person looking at a
queue sees, each cheap at a million jobs. Pure: no I/O, the time passed in.

The :class:`~broker.model.ops.Inspect` op names one of :data:`VIEWS` and its
arguments; :func:`read` answers it (through the commit loop, so a view sees
committed state only, as ``stats`` and ``jobs`` do). A view changes nothing.

* ``counters``: O(1) figures for the history's samples (totals and depth);
* ``summary``: counts by status and the oldest pending age, in one pass over
  the head's jobs (:meth:`~broker.model.jobtable.JobTable.tally`; about 40 ms
  at a million jobs) where ``stats`` reads every line;
* ``page``: a page of the job browser by seq cursor, each page costing what it
  reads (:meth:`~broker.model.jobtable.JobTable.peek`);
* ``job``: one job by id, or by its idempotency key while the key is kept;
  :func:`archived` shows one the archive holds the same way;
* ``lookup``: one job by id as the API answers it (``GET /v1/queues/{queue}/jobs/{id}``;
  the archive is searched by :mod:`broker.service.lookup`).

Lease tokens are never shown: a token lets its holder complete the job.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from broker import paths, timefmt, wire
from broker.errors import InvalidRequest, shown
from broker.model.format.archive import Found
from broker.model.format.segment_format import segment_job
from broker.model.held import done_entries, held_by_seq, held_seqs_before, page_held, view_at
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING, Job, seq_of
from broker.model.ops import Inspect, Result
from broker.model.segments.claims import page_refs
from broker.model.segments.refs import (
    holding,
    next_untaken,
    next_wakeup,
    oldest_due,
    segment_counts,
    untaken_spans,
)
from broker.model.spills import first_spilled_after, pending_times, spilled_before, spilled_job
from broker.model.state import QueueState, SegmentRef
from broker.model.views import check_status, jobs_after

#: Most jobs on one page of the job browser.
MAX_PAGE = 200
#: Characters of a payload shown in a page's row, and of an error.
PREVIEW_CHARS = 100
#: Bytes of a payload or result shown pretty-printed on a job's page.
MAX_PRETTY_BYTES = 256 * 1024


def counters(state: QueueState, now_ms: int) -> dict[str, Any]:
    """Totals since the queue began and its depth now (jobs not finished:
    pending, claimed or dead, in the head, its segments or its spill objects),
    in O(1) (O(spill refs))."""
    c = state.counters
    # completed or cancelled, unarchived
    awaiting = sum(len(seqs) for seqs in state.completed.values())
    return {"seq": state.seq, "enqueued": c.enqueued, "completed": c.completed,
            "failed": c.failed, "dead": c.dead, "reclaimed": c.reclaimed,
            "cancelled": c.cancelled,
            "depth": len(state.jobs) + segment_counts(state.segment_refs) - awaiting
            + sum(ref.live for ref in state.spill_refs) + state.held_by_status()[0],
            "paused": state.paused}


def summary(state: QueueState, now_ms: int) -> dict[str, Any]:
    """Counts by status (completed, cancelled: done, awaiting the archive), the
    claimed jobs marked for cancellation, the age of the oldest due pending job
    (s), when the next delayed one is due, the owner's record, totals, settings
    and the dispatch rate (``claims_per_s``, ``claim_limit_per_s``,
    ``claim_burst``, ``claim_tokens``: as ``stats`` gives them, this broker's):
    one pass over the head's jobs."""
    tally = state.jobs.tally(now_ms)
    counts = tally.counts
    held, done = state.held_by_status()  # (held at records' segment parts: no line)
    counts[CLAIMED] += held
    counts[COMPLETED] += done
    refs = state.segment_refs
    oldest, later = tally.oldest_due_created_ms, tally.next_run_ms
    in_segments = segment_counts(refs)
    if refs:
        counts[PENDING] += in_segments
        due = oldest_due(refs)
        if due is not None and due <= now_ms:
            oldest = due if oldest is None else min(oldest, due)
        wake = next_wakeup(refs, now_ms)
        if wake is not None:
            later = wake if later is None else min(later, wake)
    for spill in state.spill_refs:  # (jobs of spill objects: counted from their refs)
        counts[PENDING if spill.kind == PENDING else DEAD] += spill.live
    for due, created in pending_times(state) if state.spill_refs else ():
        if due <= now_ms:
            oldest = created if oldest is None else min(oldest, created)
    record = state.broker
    return {
        "counts": counts,
        "total": sum(counts.values()) - counts[COMPLETED] - counts[CANCELLED],
        "in_segments": in_segments,
        "cancel_requested": tally.marked + state.held_marked(),
        "oldest_pending_age_s": None if oldest is None else max(0, now_ms - oldest) / 1000,
        "next_delayed_run_at": None if later is None else timefmt.fmt(later),
        "paused": state.paused,
        "broker": None if record is None else {
            "id": record.id, "url": record.url,
            "lease_expires_at": timefmt.fmt(record.expires_ms)},
        "counters": counters(state, now_ms),
        "approx_state_bytes": state.size_estimate(),
        "settings": state.settings.shown(),
        **state.claims.figures(state.settings, now_ms),
    }


def page(state: QueueState, now_ms: int, status: str | None, after_seq: int | None,
         before_seq: int | None, limit: int) -> dict[str, Any]:
    """Up to ``limit`` jobs in seq order (optionally of ``status``): after
    ``after_seq``, or the last ones before ``before_seq``, or the first ones
    (with both: the first ones after ``after_seq`` and below ``before_seq``);
    the pending jobs of segment objects among them (from the windows the
    broker loaded first: :func:`segments_to_load`). ``has_next`` /
    ``has_prev`` say whether more jobs lie beyond either end.
    ``resume_after`` is None, or the page was cut short before a segment line
    the broker had not loaded (it holds every job before it): the seq whose
    page (with the same ``before_seq``, ``limit`` less the rows) is the rest
    of it once that line is loaded. Costs what the page reads, not its
    position (see the module docstring)."""
    check_status(status)
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be 1..{MAX_PAGE}, got {shown(limit)}")
    start = page_start(state, status, after_seq, before_seq, limit)
    ahead, cut = jobs_after(state, status, start, limit + 1)
    jobs = ahead[:limit]
    if before_seq is not None:
        jobs = [job for job in jobs if job.seq < before_seq]
        has_next = _first_seq(state, status, jobs[-1].seq if jobs else before_seq - 1) \
            is not None
        short = cut is not None and cut < before_seq and len(jobs) < limit
    else:  # (a cut is a pending job of a segment: one follows)
        has_next = len(ahead) > limit or cut is not None
        short = cut is not None and len(jobs) < limit
    # (a page from the start has nothing before it: no second pass over a table
    # that holds no job of a rare status)
    first = None if start < 0 else _first_seq(state, status, -1)
    has_prev = first is not None and first < (jobs[0].seq if jobs else start + 1)
    return {"rows": [row(job) for job in jobs], "has_next": has_next, "has_prev": has_prev,
            "in_segments": segment_counts(state.segment_refs),
            "resume_after": cut - 1 if short and cut is not None else None}


def page_start(state: QueueState, status: str | None, after_seq: int | None,
               before_seq: int | None, limit: int) -> int:
    """The seq a page starts after: ``after_seq`` (with or without
    ``before_seq``); for the last ``limit`` jobs before ``before_seq``, one
    below the lowest of them (counted back through the head's jobs, the
    segments' seq ranges and the loaded spill objects' jobs: not below one
    not loaded, :func:`~broker.model.spills.spilled_before`); else -1."""
    if after_seq is not None:
        return after_seq
    if before_seq is None:
        return -1
    inline = (job.seq for job in state.jobs.peek_before(before_seq, status))
    seqs: Iterator[int] = inline
    if state.segment_refs and status in (None, PENDING):
        seqs = heapq.merge(inline, _segment_seqs_before(state.segment_refs, before_seq),
                           reverse=True)
    held = held_seqs_before(state, before_seq, limit, status)
    if held:  # (jobs of claim records' segment parts)
        seqs = heapq.merge(seqs, held, reverse=True)
    floor = -1
    if state.spill_refs and status in (None, DEAD, PENDING):  # (of the loaded spill objects)
        spilled, floor = spilled_before(state, status, before_seq, limit)
        seqs = heapq.merge(seqs, spilled, reverse=True)
    # (not below an unloaded spill object's jobs: the page then ends short, has_prev set)
    back = list(itertools.islice(itertools.takewhile(lambda seq: seq > floor, seqs), limit))
    return max((back[-1] if back else before_seq) - 1, floor)


def _segment_seqs_before(refs: Sequence[SegmentRef], before_seq: int) -> Iterator[int]:
    """The seqs of the segments' pending jobs below ``before_seq``, descending."""
    for ref in reversed(refs):  # (refs ascend by first_seq, their ranges disjoint)
        top = min(before_seq, ref.first_seq + ref.count) - 1
        if ref.groups is not None:  # (a grouped one's taken positions are not pending)
            if top >= ref.first_seq:
                for lo, hi in reversed(untaken_spans(ref, 0, top - ref.first_seq + 1)):
                    yield from range(ref.first_seq + hi - 1, ref.first_seq + lo - 1, -1)
            continue
        yield from range(top, ref.next_seq - 1, -1)


def _first_seq(state: QueueState, status: str | None, after_seq: int) -> int | None:
    """The seq of the first job after ``after_seq`` (of ``status``), head,
    segment or spill object (an unloaded one's: the lowest it may hold)."""
    found = next(state.jobs.peek(after_seq, status), None)
    seqs = [] if found is None else [found.seq]
    if status in (None, PENDING):
        for ref in state.segment_refs:
            start = max(ref.next_seq, after_seq + 1)
            if ref.groups is not None:  # (its first untaken position from there)
                start = ref.first_seq + next_untaken(
                    ref, min(ref.count, max(0, after_seq + 1 - ref.first_seq)))
            if start < ref.first_seq + ref.count:
                seqs.append(start)
    if state.seg_names and status in (None, CLAIMED, COMPLETED):  # (in claim records)
        seqs += [seq for seq, _, _, _ in page_held(state, after_seq, 1, status)]
    if state.spill_refs and status in (None, DEAD, PENDING):  # (in spill objects)
        spilled = first_spilled_after(state, status, after_seq)
        seqs += [] if spilled is None else [spilled]
    return min(seqs, default=None)


def segments_to_load(state: QueueState, op: Inspect) -> list[SegmentRef]:
    """The segments whose lines an :class:`~broker.model.ops.Inspect` op reads
    and the broker has not loaded (it loads them before the op applies): a
    page's, or the one that holds a job asked for by id."""
    refs, windows = state.segment_refs, state.windows
    if not refs or windows is None:
        return []
    if op.view == "page":
        status, after_seq, before_seq, limit = op.args
        if status not in (None, PENDING):
            return []
        after = page_start(state, status, after_seq, before_seq, limit)
        return [ref for ref in page_refs(state, after, limit + 1)
                if windows.peek(ref, max(ref.taken, after + 1 - ref.first_seq), 1) is None]
    if op.view in ("job", "find", "lookup"):
        seq = seq_of(op.args[-1])
        ref = None if seq is None else _holder(refs, seq)
        if seq is not None and ref is not None and \
                windows.peek(ref, seq - ref.first_seq, 1) is None:
            return [ref]
    return []


def _holder(refs: Sequence[SegmentRef], seq: int) -> SegmentRef | None:
    """The segment whose pending jobs include ``seq``, if any."""
    at = holding(refs, seq)
    return None if at is None else refs[at]


def _segment_job(state: QueueState, seq: int) -> Job | None:
    """The pending job ``seq`` of a segment, if the segment's line is loaded."""
    ref = _holder(state.segment_refs, seq)
    if ref is None or state.windows is None:
        return None
    lines = state.windows.peek(ref, seq - ref.first_seq, 1)
    return segment_job(seq, lines[0], ref) if lines else None


def row(job: Job) -> dict[str, Any]:
    """A job as one row of the job browser (no payload beyond a preview)."""
    preview = job.payload[:PREVIEW_CHARS * 4].decode("utf-8", "replace")
    return {
        "id": job.id, "seq": job.seq, "status": job.status, "priority": job.priority,
        "attempts": job.attempts, "max_attempts": job.max_attempts,
        "run_at": timefmt.fmt(job.run_at_ms), "created_at": timefmt.fmt(job.created_ms),
        "group": job.group,
        "worker": job.lease_worker if job.lease_token is not None else None,
        "cancel_requested": job.status == CLAIMED and job.cancel_ms is not None,
        # pending (or delayed), or claimed and not marked yet
        "cancellable": job.status == PENDING or (job.status == CLAIMED and job.cancel_ms is None),
        "last_error": None if job.last_error is None else job.last_error[:PREVIEW_CHARS],
        "preview": preview[:PREVIEW_CHARS] + ("…" if len(preview) > PREVIEW_CHARS else ""),
    }


def find(state: QueueState, now_ms: int, text: str) -> str | None:
    """The id of the job whose id or idempotency key is ``text``, if the queue
    holds it (a key only while the dedup window keeps it)."""
    seq = seq_of(text)
    if seq is not None and (seq in state.jobs or _holder(state.segment_refs, seq)
                            or spilled_job(state, seq) is not None):
        return text
    # (a key's job is never in a segment, keys are inline; but a dead one may be spilled)
    entry = state.keys.get(text)
    if entry is None:
        return None
    keyed = seq_of(entry.job_id)
    if keyed is not None and (keyed in state.jobs or spilled_job(state, keyed) is not None):
        return entry.job_id
    return None


def job(state: QueueState, now_ms: int, queue: str, job_id: str) -> dict[str, Any] | None:
    """One job in full for its page, or None if the queue does not hold it:
    payload and result pretty-printed, the lease without its token, when its
    cancel was asked for (a claimed job marked, or a cancelled one), and for
    a completed or cancelled job when it ended and the archive object it is
    (or is about to be) in; ``errors`` its error history, oldest first
    (:meth:`~broker.model.job.Job.errors_view`). ``cancellable``: pending (or
    delayed), or claimed and not marked yet; ``redrivable``: dead."""
    seq = seq_of(job_id)
    if seq is None:
        return None
    if seq in state.jobs:
        found: Job | None = next(state.jobs.peek(seq - 1))  # (a line: a throwaway Job)
    else:
        found = _segment_job(state, seq) or spilled_job(state, seq)
    if found is None:
        return None
    out = row(found)
    out.update(key=found.key, last_error=found.last_error, errors=found.errors_view(),
               payload=pretty(found.payload),
               payload_bytes=len(found.payload), lease=None, archive_key=None,
               completed_at=None, cancelled_at=None, result=None,
               cancel_requested_at=None if found.cancel_ms is None
               else timefmt.fmt(found.cancel_ms))
    if found.status == CLAIMED and found.lease_token is not None:
        out["lease"] = {"worker": found.lease_worker, "lease_s": found.lease_ms / 1000,
                        "expires_at": timefmt.fmt(found.lease_expires_ms),
                        "heartbeat_at": timefmt.fmt(found.lease_heartbeat_ms)}
    if found.done_ms is not None:
        if found.status == CANCELLED:  # (no result: its worker's was not recorded)
            out["cancelled_at"] = timefmt.fmt(found.done_ms)
        else:
            out["completed_at"] = timefmt.fmt(found.done_ms)
            out["result"] = pretty(found.result or b"null")
        if found.done_seq is not None and found.done_commit is not None:
            seqs = [*state.completed.get(found.done_seq, ()), *(
                r.seqs[p] for r, e in done_entries(state, found.done_seq) for p in e.pos)] \
                or [found.seq]  # (its commit's jobs)
            out["archive_key"] = paths.archive_key(queue, found.done_ms, found.done_seq,
                                                   found.done_commit, min(seqs), max(seqs))
    out["redrivable"] = found.status == DEAD
    return out


def lookup(state: QueueState, now_ms: int, queue: str, job_id: str) -> dict[str, Any]:
    """``{"job": ..., "enqueued": n}``: job ``job_id`` as the queue object holds
    it (or would, for a pending job of a segment whose line is loaded), its
    lease without its token, its error history ``errors`` (``[]``: it never
    failed), with ``location`` (``"queue"`` or ``"segment"``)
    and, finished and awaiting its archive object, ``archive_key``; None if
    neither the head nor a loaded segment line holds it. ``enqueued``: the
    seq counter (no job has a larger seq). ``InvalidRequest`` for a text that
    is not a job id."""
    seq = seq_of(job_id)
    if seq is None:
        raise InvalidRequest(f"not a job id: {shown(job_id)} (ids are j and ten or more digits)")
    out: dict[str, Any] | None = None
    if seq in state.jobs:
        found: Job | None = next(state.jobs.peek(seq - 1))
        where = "queue"
    elif (held := held_by_seq(state, seq, done=True)) is not None:  # (in a claim record)
        found = view_at(state, *held)
        where = "spill" if held[0].spills and held[0].spill_span(held[1]) else "segment"
    else:
        found, where = _segment_job(state, seq), "segment"
        if found is None:
            found, where = spilled_job(state, seq), "spill"
    if found is not None:
        out = found.to_dict()
        out.setdefault("errors", [])  # (never failed: the line leaves it out, the views say [])
        if "lease" in out:
            del out["lease"]["token"]  # (it settles the job: never shown here)
        out["location"] = where
        if found.done_ms is not None and found.done_seq is not None \
                and found.done_commit is not None:
            seqs = state.completed.get(found.done_seq) or [found.seq]
            out["archive_key"] = paths.archive_key(queue, found.done_ms,
                                                   found.done_seq, found.done_commit,
                                                   min(seqs), max(seqs))
    return {"job": out, "enqueued": state.counters.enqueued}


def archived(found: Found) -> dict[str, Any]:
    """A job the archive holds (:func:`broker.model.format.archive.find_job`) as
    :func:`job` shows one, its token left out: finished, so neither
    cancellable nor redrivable; ``errors`` None (an archive line keeps
    ``last_error`` alone)."""
    record, payload = found.record, found.payload
    preview = payload[:PREVIEW_CHARS * 4].decode("utf-8", "replace")
    return {
        "id": record.get("id"), "seq": record.get("seq"), "status": record.get("status"),
        "priority": record.get("priority"), "attempts": record.get("attempts"),
        "max_attempts": record.get("max_attempts"), "run_at": record.get("run_at"),
        "created_at": record.get("created_at"), "group": record.get("group"),
        "worker": record.get("worker"),
        "cancel_requested": False, "cancellable": False, "redrivable": False,
        "last_error": record.get("last_error"),
        "preview": preview[:PREVIEW_CHARS] + ("…" if len(preview) > PREVIEW_CHARS else ""),
        "key": None, "errors": None, "payload": pretty(payload),
        "payload_bytes": len(payload), "lease": None,
        "archive_key": found.key, "completed_at": record.get("completed_at"),
        "cancelled_at": record.get("cancelled_at"),
        "result": None if record.get("status") == CANCELLED else pretty(found.result),
        "cancel_requested_at": record.get("cancel_requested_at"),
    }


def pretty(data: bytes) -> str:
    """JSON ``data`` indented, numbers exact; the text as it is when it is past
    :data:`MAX_PRETTY_BYTES` or cannot be re-written (a number past a double's range)."""
    text = data[:MAX_PRETTY_BYTES].decode("utf-8", "replace")
    if len(data) > MAX_PRETTY_BYTES:
        return text + f"\n… ({len(data)} bytes in all)"
    try:
        return wire.dumps(wire.loads(data), option=orjson.OPT_INDENT_2).decode()
    except (ValueError, TypeError):
        return text


VIEWS: dict[str, Callable[..., Any]] = {
    "counters": counters, "summary": summary, "page": page, "find": find, "job": job,
    "lookup": lookup,
}


def read(state: QueueState, op: Inspect, now_ms: int) -> Result:
    """Answer an :class:`~broker.model.ops.Inspect` op: the view it names, of ``state``."""
    view = VIEWS.get(op.view)
    if view is None:
        raise InvalidRequest(f"no view {shown(op.view)}")
    return Result(view=view(state, now_ms, *op.args))
