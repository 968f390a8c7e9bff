"""Cancelling jobs: the rule of :class:`~broker.model.ops.Cancel`, and how a
claimed job marked for cancellation ends.

Per id, a cancel answers (:class:`~broker.wire.CancelAnswer`):

* a **pending or delayed** job: ``cancelled``. It moves to status
  ``cancelled`` in this very commit and, like a completed job, stays in the
  object until its commit's archive object (where it is one line, status
  ``cancelled``) is written, then leaves (see :mod:`broker.model.format.archive`).
  Its idempotency key stays in the window: a push with it answers the
  cancelled job's id and creates nothing.
* a **claimed** job: ``cancel_requested``. It is marked (its position in
  its claim record's ``"cancel"``, see :mod:`broker.model.claim_records`; the
  API shows it as ``cancel_requested_at``) and stays claimed under its lease,
  to end ``cancelled`` (archived so, exactly once; never completed, pending
  or dead) at the first of:

  - a heartbeat of its token: answered ``cancelled`` (ok false), not extended;
  - a complete or fail of its token: answered ``cancelled``; its result or
    error is not recorded, the failure is not counted, nothing is retried;
  - the release of its token (a claim whose caller left before the answer);
  - its lease running out: it ends cancelled rather than going back to
    pending (or dead), counted neither as failed nor as reclaimed. Nobody is
    to work on it again, and a worker that stopped heartbeating it (it was
    told, or it died) settles nothing more.

  The mark is in the object, so it holds through a takeover (the new owner
  gives the job a fresh lease, as every claimed job, and the worker's next
  heartbeat there is answered ``cancelled``). Later calls with its token are
  answered ``cancelled`` too, while the job is in the object and then while
  the receipts remember the token (``retry_ttl_s``, outcome ``cancelled``).
* a **completed, dead or cancelled** job, or one that has left the object
  (archived or purged): ``finished``, not ok, nothing changes (a cancelled
  one answers ``cancelled``, ok: a repeated cancel gets the first answer);
* an id no job ever had: ``unknown``, not ok, nothing changes.

A pending job still in a segment object (not yet in the queue object,
see :mod:`broker.model.segments.claims`) is cancelled the same way: the jobs of
its segment from the cursor up to it move into the head as pending, in their
claim order (:func:`~broker.model.segments.claims.move_in`, as a claim would
move them), and it is cancelled there; of a grouped segment (format 3) only
it moves (:func:`~broker.model.segments.claims.move_in_position`: a hole in
its group's run, kept in the ref's ``taken_at``). The broker loads those lines before
the batch applies (:func:`segments_to_load`, called by its ``prepare``); if
they are not loaded the id is answered not ok, status ``retry``, and nothing
is cancelled.

A pending job of a spill object (a dead object redriven by reference, see
:mod:`broker.model.spills`) is moved into the head alone and cancelled there,
its position taken ``out`` of the ref (:func:`~broker.model.spills.take_out`;
the broker loads the object first, else ``retry``); a dead one answers
``finished`` as a dead job in the head does.

``counters.cancelled`` counts the cancels that took (jobs cancelled, and
claimed jobs marked).

Handlers of :func:`broker.model.transitions.apply`, with its contract: no
I/O, time passed in.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.model import idempotency
from broker.model import receipts as R
from broker.model.groups.counts import left_hook
from broker.model.held import held_by_seq, mark_held_cancel
from broker.model.job import CANCELLED, CLAIMED, PENDING, Job, seq_of
from broker.model.lifecycle import mark_cancel, move
from broker.model.ops import Cancel, Result
from broker.model.segments.claims import move_in, move_in_position
from broker.model.segments.grouped import taken_out
from broker.model.segments.refs import holding
from broker.model.spills import UNLOADED, take_out
from broker.model.state import QueueState, SegmentRef
from broker.wire import CANCEL_REQUESTED, CancelAnswer, ItemResult

#: A cancel's status for a job that is done or gone, for an id of no job, and
#: for a job in a segment whose lines were not loaded (nothing changed: again).
FINISHED = "finished"
UNKNOWN = "unknown"
RETRY = "retry"


def cancel(state: QueueState, op: Cancel, now_ms: int) -> Result:
    """Cancel or mark each job of ``op.ids`` (see the module docstring);
    ``Result.view`` holds the answers, in order."""
    answers: list[CancelAnswer] = []
    changed = False
    for job_id in op.ids:
        seq = seq_of(job_id)
        job = None if seq is None else state.jobs.get(seq)
        if job is None and seq is not None and (at := holding(state.segment_refs, seq)) is not None:
            job, moved = _move_in_through(state, at, seq, now_ms)
            changed = changed or moved > 0
            if job is None:
                answers.append(CancelAnswer(job_id, False, "its segment's jobs are not "
                                            "loaded; cancel it again", RETRY))
                continue
        if job is None and seq is not None and state.spill_refs:  # (in a spill object)
            found = take_out(state, seq, now_ms)
            if found == UNLOADED:
                answers.append(CancelAnswer(job_id, False, "its spill object's jobs are not "
                                            "loaded; cancel it again", RETRY))
                continue
            job = found if isinstance(found, Job) else None
            changed = changed or (job is not None and job.status == PENDING)
        if job is None and seq is not None and (held := held_by_seq(state, seq)) is not None:
            if mark_held_cancel(held[0], held[1], now_ms):  # (it has no line: its record's mark)
                state.counters.cancelled += 1
                changed = True
            answers.append(CancelAnswer(job_id, True, None, CANCEL_REQUESTED))
            continue
        if job is None:
            if seq is not None and seq <= state.counters.enqueued:
                answers.append(CancelAnswer(job_id, False, "job is gone (completed, cancelled "
                                            "or purged, and archived)", FINISHED))
            else:
                answers.append(CancelAnswer(job_id, False, "no such job", UNKNOWN))
            continue
        if job.status == PENDING:
            job.cancel_ms = now_ms
            _finish(state, job, now_ms)
            state.counters.cancelled += 1
            changed = True
        elif job.status == CLAIMED and job.cancel_ms is None:
            mark_cancel(state, job, now_ms)
            state.counters.cancelled += 1
            changed = True
        if job.status == CANCELLED:
            answers.append(CancelAnswer(job_id, True, None, CANCELLED))
        elif job.status == CLAIMED:
            answers.append(CancelAnswer(job_id, True, None, CANCEL_REQUESTED))
        else:
            answers.append(CancelAnswer(job_id, False, f"job already finished ({job.status})",
                                        FINISHED))
    return Result(changed=changed, view=answers)


def segments_to_load(state: QueueState, ids: Iterable[str]) -> list[SegmentRef]:
    """The segments whose lines a cancel of ``ids`` needs and lacks: those
    holding one of the ids in their untaken part, not loaded up to it."""
    out: list[SegmentRef] = []
    windows = state.windows
    for job_id in ids:
        seq = seq_of(job_id)
        at = None if seq is None else holding(state.segment_refs, seq)
        if at is None or seq is None:
            continue
        ref = state.segment_refs[at]
        short = windows is None or (
            windows.line_at(ref, seq - ref.first_seq) is None if ref.groups is not None
            else windows.loaded(ref) < seq - ref.next_seq + 1)
        if short and ref not in out:
            out.append(ref)
    return out


def _move_in_through(state: QueueState, at: int, seq: int,
                     now_ms: int) -> tuple[Job | None, int]:
    """Move segment ``at``'s jobs from its cursor through ``seq`` into the head
    (pending, as a claim moves them): the job of ``seq`` (None if its line is
    not loaded; those before it that were loaded moved all the same) and how
    many moved."""
    ref = state.segment_refs[at]
    if ref.groups is not None:  # (only it moves: a hole in its run, in taken_at)
        job = move_in_position(state, at, seq - ref.first_seq)
        if job is not None:
            # (its run's cursor may have been it: the run's next takes its place)
            taken_out(state, (ref.key, ref.etag), seq - ref.first_seq, now_ms)
        return job, int(job is not None)
    want = seq - ref.next_seq + 1
    moved = move_in(state, at, want)
    return (state.jobs.get(seq) if moved == want else None), moved


def end_marked(state: QueueState, job: Job, wire: str, now_ms: int) -> ItemResult:
    """End ``job``, claimed and marked for cancellation, as cancelled in the
    commit after ``state.seq``; its token is remembered as settled cancelled.
    Returns the answer to the call of client token ``wire`` that ended it."""
    lease = job.lease
    assert lease is not None and job.cancel_ms is not None
    _finish(state, job, now_ms)
    state.receipts.record_settled(R.CANCELLED, [lease.fence], now_ms,
                                  idempotency.retry_ttl_ms(state), state.settings.retry_keys)
    return ItemResult(wire, False, idempotency.CANCELLED_REASON, CANCELLED)


def _finish(state: QueueState, job: Job, now_ms: int) -> None:
    """Move ``job`` (pending, or claimed and marked) to cancelled in the next commit."""
    left_hook(state.groups, job)  # (pending: its entry in its group's heap goes stale)
    job.done_ms = now_ms
    job.done_seq = state.seq + 1
    move(state, job, CANCELLED, now_ms)
