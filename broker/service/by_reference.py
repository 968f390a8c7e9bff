"""Pushes by reference: a bulk push (a Spark publish, a large push of bare
payloads) whose jobs go into segment objects instead of the queue object.

Three steps, each safe to lose (issue 20):

1. a commit :class:`~broker.model.ops.Reserve` hands out the push's seqs
   (the counter only grows, so no other job ever gets them);
2. the jobs are written as segment objects, at most
   :data:`~broker.model.segments.MAX_SEGMENT_JOBS` jobs and
   :data:`SEGMENT_MAX_BYTES` bytes each, under fresh keys;
3. a commit pushes their references (``PushPayloads.refs``): the push's
   idempotency checks (``request``, ``once``) run there, as for any push.

A crash or lost reply after 1 leaves a gap in the seqs; after 2, objects no
head references, which the sweep deletes after the grace period
(:meth:`broker.service.segment_store.SegmentStore.sweep`); a retried call
starts again at 1 and writes new objects. The push is answered only once 3
has landed, so an acknowledged job is always in a landed head or segment.
A step-3 commit that would reference a segment older than half the grace
period is not made (the sweep may be about to judge it unreferenced): the
caller is told to retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from broker.commit.loop import CommitLoop
from broker.errors import BrokerUnavailable
from broker.model.job import JobIds
from broker.model.ops import Op, PushPayloads, Reserve, Result
from broker.model.segments import MAX_SEGMENT_JOBS
from broker.model.state import QueueState, SegmentRef, Settings
from broker.service.segment_store import SegmentStore

log = logging.getLogger("osqueue.segments")

#: Most bytes of payload one segment object holds: a window the broker reads
#: is at most one object.
SEGMENT_MAX_BYTES = 16 * 1024 * 1024
#: Segment objects written at once by one push.
WRITERS = 4


def chunks(payloads: Sequence[bytes], max_jobs: int = MAX_SEGMENT_JOBS,
           max_bytes: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` slices of ``payloads`` for one segment object each: at
    most ``max_jobs`` jobs and (but for a single larger payload) ``max_bytes``
    (default :data:`SEGMENT_MAX_BYTES`)."""
    max_bytes = SEGMENT_MAX_BYTES if max_bytes is None else max_bytes
    out = []
    start, size = 0, 0
    for i, payload in enumerate(payloads):
        if i > start and (i - start >= max_jobs or size + len(payload) > max_bytes):
            out.append((start, i))
            start, size = i, 0
        size += len(payload)
    if start < len(payloads):
        out.append((start, len(payloads)))
    return out


def wanted(op: object, min_jobs: int) -> bool:
    """Whether ``op`` goes by reference: a push of at least ``min_jobs`` bare
    payloads (0: never), not already a push of refs, with no staged chunk missing."""
    return (min_jobs > 0 and isinstance(op, PushPayloads) and not op.refs
            and not op.missing and len(op.payloads) >= min_jobs)


async def push_by_reference(loop: CommitLoop[QueueState, Op, Result], segments: SegmentStore,
                            queue: str, op: PushPayloads, clock: Callable[[], int],
                            monotonic: Callable[[], float]) -> Result:
    """Push ``op``'s payloads by reference (see the module docstring); answers
    as the push would. A push already answered (its ``request`` or ``once``
    is known to the head) goes through the usual path at once, which replays
    it; so does one with a payload holding a line break (a segment line holds
    one job)."""
    state = loop.state
    if state is not None and ((op.once is not None and op.once in state.once) or (
            op.request is not None and op.request in state.receipts.requests)):
        return await loop.submit(op)
    payloads = op.payloads
    reserved = await loop.submit(Reserve(len(payloads), max(map(len, payloads))))
    assert isinstance(reserved.ids, JobIds)
    first = reserved.ids.first
    started = monotonic()
    landed = loop.state
    max_attempts = (landed.settings if landed is not None else Settings()).max_attempts
    now = clock()
    slices = chunks(payloads)
    refs: list[SegmentRef | None] = [None] * len(slices)
    gate = asyncio.Semaphore(WRITERS)

    async def write(i: int, lo: int, hi: int) -> None:
        async with gate:
            refs[i] = await segments.write(queue, first + lo, 0, now, payloads[lo:hi],
                                           max_attempts=max_attempts)

    try:
        await asyncio.gather(*(write(i, lo, hi) for i, (lo, hi) in enumerate(slices)))
    except ValueError:  # a payload with a line break: pushed into the head instead
        log.info("push of %d jobs to %s goes into the queue object (a payload holds a "
                 "line break); the seqs reserved for it stay unused", len(payloads), queue)
        return await loop.submit(op)
    if monotonic() - started > segments.grace_s / 2:
        raise BrokerUnavailable(
            f"writing the segment objects of a push to {queue!r} took "
            f"{monotonic() - started:.0f}s, too long to reference them safely; "
            "nothing was pushed: retry")
    done = [ref for ref in refs if ref is not None]
    log.debug("push of %d jobs to %s: %d segment object(s) written", len(payloads), queue,
              len(done))
    return await loop.submit(replace(op, payloads=(), refs=tuple(done)))
