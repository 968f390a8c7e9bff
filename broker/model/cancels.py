"""Cancelling jobs: the rule of :class:`~broker.model.ops.Cancel`, and how a
claimed job marked for cancellation ends.

Per id, a cancel answers (:class:`~broker.wire.CancelAnswer`):

* a **pending or delayed** job: ``cancelled``. It moves to status
  ``cancelled`` in this very commit and, like a completed job, stays in the
  object until its commit's archive object (where it is one line, status
  ``cancelled``) is written, then leaves (see :mod:`broker.model.archive`).
  Its idempotency key stays in the window: a push with it answers the
  cancelled job's id and creates nothing.
* a **claimed** job: ``cancel_requested``. It is marked
  (``"cancel_requested_at"`` in its line) and stays claimed under its lease,
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

``counters.cancelled`` counts the cancels that took (jobs cancelled, and
claimed jobs marked). Jobs in segment objects (issue 20) are not looked up
here yet: the broker refuses objects that have them.

Handlers of :func:`broker.model.transitions.apply`, with its contract: no
I/O, time passed in.
"""

from __future__ import annotations

from broker.model import idempotency
from broker.model import receipts as R
from broker.model.job import CANCELLED, CLAIMED, PENDING, Job, seq_of
from broker.model.lifecycle import mark_cancel, move
from broker.model.ops import Cancel, Result
from broker.model.state import QueueState
from broker.wire import CANCEL_REQUESTED, CancelAnswer, ItemResult

#: A cancel's status for a job that is done or gone, and for an id of no job.
FINISHED = "finished"
UNKNOWN = "unknown"


def cancel(state: QueueState, op: Cancel, now_ms: int) -> Result:
    """Cancel or mark each job of ``op.ids`` (see the module docstring);
    ``Result.view`` holds the answers, in order."""
    answers: list[CancelAnswer] = []
    changed = False
    for job_id in op.ids:
        seq = seq_of(job_id)
        job = None if seq is None else state.jobs.get(seq)
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


def end_marked(state: QueueState, job: Job, wire: str, now_ms: int) -> ItemResult:
    """End ``job``, claimed and marked for cancellation, as cancelled in the
    commit after ``state.seq``; its token is remembered as settled cancelled.
    Returns the answer to the call of client token ``wire`` that ended it."""
    token = job.lease_token
    assert token is not None and job.cancel_ms is not None
    _finish(state, job, now_ms)
    state.receipts.record_settled(R.CANCELLED, [int(token.rpartition(".")[2])], now_ms,
                                  idempotency.retry_ttl_ms(state), state.settings.retry_keys)
    return ItemResult(wire, False, idempotency.CANCELLED_REASON, CANCELLED)


def _finish(state: QueueState, job: Job, now_ms: int) -> None:
    """Move ``job`` (pending, or claimed and marked) to cancelled in the next commit."""
    job.done_ms = now_ms
    job.done_seq = state.seq + 1
    move(state, job, CANCELLED, now_ms)
