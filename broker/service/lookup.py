"""One job by id, wherever it is: the queue object, a segment object it
references, or the archive (``GET /v1/queues/{queue}/jobs/{id}``,
``QueueClient.job``, ``osqueue job``, the dashboard's job page).

**Where a job is.** A pending, claimed or dead job is in the head, or pending
in a segment, or dead in a spill object (one GET of each whose seq bounds
hold it); a completed or cancelled one stays in the head until its
archive object and index entries are written, then only in the archive. A
lookup reads the head first (through the queue's commit loop on the owner,
from the stored object on any other broker: a read never moves a queue),
and the archive only when the head holds the job no more. A job that left
the head was archived before it left (:mod:`broker.service.archiver`), so
the archive, listed after the head was read, holds it.

**Cost.** The head: the owner's committed state (free), or one GET of the
stored object; a pending job of a segment: one GET of that segment (the
head again, at most :data:`~broker.service.stored_view.REREADS` times, if
the owner took it and deleted its object meanwhile). The archive
(:func:`broker.model.format.archive.find_job`): one LIST of the job's block of the
index, one LIST per hour in which jobs of that block were archived (in
order, until found: most jobs end within an hour or two of their
neighbours), and a GET of each archive object of those hours whose job range
holds the job; never the whole archive. A job whose seq was never handed out
is answered at once.

**Not found** (``JobNotFound``, 404 ``job_not_found``): no job had that id (a
seq a push reserved and never used), or the job was purged: a purge deletes
jobs without archiving them, so nothing of them is left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from broker.errors import (
    BrokerUnavailable,
    InvalidRequest,
    JobNotFound,
    SegmentMissing,
    UnknownQueue,
    shown,
)
from broker.model import browse
from broker.model.format import archive
from broker.model.job import CANCELLED, seq_of
from broker.model.ops import Inspect
from broker.model.segments.claims import held_loads, held_spill_loads
from broker.model.segments.refs import holding
from broker.model.spills import holders as spill_holders
from broker.model.spills import window_name
from broker.model.state import QueueState, SegmentWindows
from broker.service.segment_store import SegmentStore
from broker.service.stored_view import REREADS, Head
from broker.storage import ObjectStore

#: What the head says of a job: ``{"job": dict | None, "enqueued": n}``
#: (:func:`broker.model.browse.lookup`).
View = dict[str, Any]
#: Runs a blocking store call off the event loop.
IO = Callable[..., Awaitable[Any]]


def check_id(job_id: str) -> int:
    """The seq of ``job_id``; ``InvalidRequest`` if it is not a job id."""
    seq = seq_of(job_id) if isinstance(job_id, str) else None
    if seq is None:
        raise InvalidRequest(f"not a job id: {shown(job_id)} (a job id is j and ten digits, "
                             "such as j0000000042)")
    return seq


async def find(view: Callable[[], Awaitable[View]], store: ObjectStore, io: IO, queue: str,
               job_id: str) -> dict[str, Any]:
    """Job ``job_id`` of ``queue`` as the API answers it: the job's fields as the
    queue object holds them (an archived one: its archive line), never a lease
    token, with ``location`` (``queue``, ``segment`` or ``archive``) and, for a
    finished one, ``archive_key`` (the object it is in, or will be).

    ``view`` reads what the head holds of it (see the module docstring).
    Raises ``InvalidRequest`` for a bad id, ``UnknownQueue`` for a queue that
    does not exist, ``JobNotFound`` if no job has that id, and the store's
    errors. Reads only."""
    seq = check_id(job_id)
    seen = await view()
    job: dict[str, Any] | None = seen["job"]
    if job is not None:
        return job
    if seq <= seen["enqueued"]:
        found = await io(archive.find_job, store, queue, seq)
        if found is not None:
            return answer(found)
    raise JobNotFound(f"no job {job_id} in queue {queue!r}: it is not in the queue, its "
                      "segments or its archive (no job had that id, or it was purged: a purge "
                      "keeps nothing of the jobs it deletes)", queue=queue, id=job_id)


def answer(found: archive.Found) -> dict[str, Any]:
    """An archived job as :func:`find` answers it: its archive line without the
    token, payload and result as written, ``errors`` null (the line keeps
    ``last_error`` alone: the history is not known)."""
    out = {k: v for k, v in found.record.items() if k != "token"}
    out.setdefault("errors", None)
    out["payload"] = orjson.Fragment(found.payload)
    out["result"] = None if out.get("status") == CANCELLED else orjson.Fragment(found.result)
    out["location"] = "archive"
    out["archive_key"] = found.key
    return out


async def stored(read_head: Callable[[], Awaitable[Head | None]], queue: str, job_id: str,
                 segments: SegmentStore, now_ms: int) -> View:
    """What the stored head of ``queue`` (which ``read_head`` reads) holds of
    ``job_id``, a pending job of a segment read from its object: for a broker
    that does not serve the queue. A segment gone by the time it is read
    (the owner took its jobs and deleted it) is looked for again in a newer
    head, :data:`~broker.service.stored_view.REREADS` times at most.

    Raises ``UnknownQueue`` if the queue has no object, ``SegmentMissing`` if
    a head read after the miss still references the missing object,
    ``BrokerUnavailable`` (retryable) past the rereads, and the store's errors."""
    seq = check_id(job_id)
    missing: SegmentMissing | None = None
    lost: tuple[str, str] | None = None
    for _ in range(REREADS + 1):
        state = await _head(read_head, queue)
        at = holding(state.segment_refs, seq)
        if at is not None:
            ref = state.segment_refs[at]
            if missing is not None and lost == (ref.key, ref.etag):
                raise missing  # (still referenced, and gone: lost)
            pos = seq - ref.first_seq
            try:
                lines = await segments.read_window(ref, pos, pos + 1)
            except SegmentMissing as exc:
                missing, lost = exc, (ref.key, ref.etag)
                continue
            state.windows = SegmentWindows()
            state.windows.put(ref, pos, lines)
        held = held_loads(state, [Inspect("lookup", (queue, job_id))], now_ms)
        if held:  # (held at a claim record's segment part: its line from the segment)
            ref, fence, span = held[0]
            if missing is not None and lost == (ref.key, ref.etag):
                raise missing
            try:
                lines = await segments.read_window(ref, span[3], span[3] + span[1])
            except SegmentMissing as exc:
                missing, lost = exc, (ref.key, ref.etag)
                continue
            state.held.put(fence, span, ref, lines)
        spill_held = held_spill_loads(state, [Inspect("lookup", (queue, job_id))], now_ms)
        try:  # (held at a claim record's spill part: its job from the spill object)
            for spill, fence, span in spill_held:
                if missing is not None and lost == (spill.key, spill.etag):
                    raise missing
                lost = (spill.key, spill.etag)
                jobs = await segments.read_spill(spill)
                state.held.put_spilled(fence, span, spill, jobs[span[3]:span[3] + span[1]])
        except SegmentMissing as exc:
            if exc is missing:
                raise
            missing = exc
            continue
        try:  # (dead in a spill object: read the ones whose seq bounds hold it)
            for spill in spill_holders(state, seq):
                if missing is not None and lost == (spill.key, spill.etag):
                    raise missing
                lost = (spill.key, spill.etag)
                state.spill_windows[window_name(spill)] = await segments.read_spill(spill)
        except SegmentMissing as exc:
            if exc is missing:
                raise
            missing = exc
            continue
        view: View = browse.lookup(state, now_ms, queue, job_id)
        return view
    raise BrokerUnavailable(f"queue {queue!r} moved on {REREADS} times while job {job_id} "
                            "was read from its segment (taken and deleted); try again")


async def _head(read_head: Callable[[], Awaitable[Head | None]], queue: str) -> QueueState:
    got = await read_head()
    if got is None:
        raise UnknownQueue(f"queue {queue!r} does not exist (it is created by its first push)")
    return got[0]
