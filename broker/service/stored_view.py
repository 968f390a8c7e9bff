"""Reads answered from a stored queue object, by a broker that does not serve
the queue (a read never moves a queue: see :mod:`broker.service.broker`).

The served path loads the segment lines a page of jobs shows before the page
is read (:meth:`broker.service.queue_target.QueueTarget.prepare`); this is the
same for a stored version: without it a page of a deep queue would end
before its first segment, empty while the queue holds jobs.

The queue's owner moves on meanwhile: it takes segments empty, drops their
references and deletes their objects once the commit that dropped them has
landed. So the version read may reference a segment that is gone by the time
its lines are read. That is no loss: a newer version no longer references
it (its jobs moved into the head, with their seqs), so the step is read again
from the newer version, after the same last job, as the owner's own steps may
each see a later version (see :mod:`broker.service.job_pages`). Only a
segment that a version read after the miss still references, and the store
lacks, is lost: ``SegmentMissing``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.errors import BrokerUnavailable, SegmentMissing, UnknownQueue
from broker.model import transitions
from broker.model.ops import JobsView, ReadJobs, ReadStats
from broker.model.segments.claims import held_loads, held_spill_loads
from broker.model.spills import spill_loads, window_name
from broker.model.state import QueueState, SegmentRef, SegmentWindows, SpillRefLike
from broker.model.views import page_segments
from broker.service.job_pages import full_page
from broker.service.segment_store import SegmentStore

#: Newer versions of the head one step of a page reads, one after another,
#: when each in turn references a segment dropped and deleted since: then the
#: page is refused as retryable (the queue moved on faster than it was read).
REREADS = 3

#: A stored version of a queue object and its etag.
Head = tuple[QueueState, str]


async def stored_view(read_head: Callable[[], Awaitable[Head | None]], queue: str,
                      op: ReadStats | ReadJobs, segments: SegmentStore, now_ms: int) -> Any:
    """What ``op`` reads of queue ``queue``'s stored object, which ``read_head``
    reads (None: there is none): stats of the version read, or a page of jobs
    (a :class:`~broker.model.ops.JobsView`, never cut short) that shows the
    pending jobs of its segments, read from the store at most
    :data:`~broker.model.state.MAX_WINDOWS` of them at a time (each step of
    :func:`~broker.service.job_pages.full_page` drops the windows of the one
    before). A step that finds a referenced segment gone is read again from a
    newer version (see the module docstring), at most :data:`REREADS` times
    in a row.

    Raises ``UnknownQueue`` if the queue has no object; ``SegmentMissing``
    naming a segment object that is missing or changed while a version read
    after that still references it (deleted or rewritten behind the brokers'
    backs); ``BrokerUnavailable`` (retryable) past :data:`REREADS`;
    ``InvalidRequest`` for a bad page; and the store's errors. Changes
    nothing in the store."""
    head = await _read(read_head, queue)
    if not isinstance(op, ReadJobs):
        return transitions.apply(head[0], op, now_ms).view
    rereads = 0

    async def step(part: ReadJobs) -> JobsView:
        nonlocal head, rereads
        while True:
            got = await _step(head[0], part, segments, now_ms)
            if isinstance(got, JobsView):
                rereads = 0
                return got
            lost, error = got
            newer = await _read(read_head, queue)
            named = {(ref.key, ref.etag) for ref in newer[0].segment_refs} \
                | {(ref.key, ref.etag) for ref in newer[0].spill_refs}
            if (lost.key, lost.etag) in named:
                raise error  # the newest version needs it, and it is gone: lost
            if rereads >= REREADS:
                raise BrokerUnavailable(
                    f"queue {queue!r} moved on {REREADS} times while a page of its jobs "
                    "was read (its segments were taken and deleted); try again")
            rereads += 1
            head = newer

    return JobsView(await full_page(step, op))


async def _read(read_head: Callable[[], Awaitable[Head | None]], queue: str) -> Head:
    got = await read_head()
    if got is None:
        raise UnknownQueue(f"queue {queue!r} does not exist (it is created by its first push)")
    return got


async def _step(state: QueueState, part: ReadJobs, segments: SegmentStore, now_ms: int
                ) -> JobsView | tuple[SegmentRef | SpillRefLike, SegmentMissing]:
    """One step of a page over ``state``, or the first segment (or spill
    object: dead jobs) it needs that the store lacks (at ``state``'s etag) and
    the error saying so."""
    windows = state.windows = SegmentWindows()
    for ref in page_segments(state, part.status, part.after, part.limit):
        try:
            # (a grouped segment's window is the whole object: see read_window)
            windows.put(ref, ref.taken if ref.groups is None else 0,
                        await segments.read_window(ref))
        except SegmentMissing as missing:
            return ref, missing
    for ref, fence, span in held_loads(state, [part], now_ms):  # (jobs held at records' parts)
        try:
            lines = await segments.read_window(ref, span[3], span[3] + span[1])
        except SegmentMissing as missing:
            return ref, missing
        state.held.put(fence, span, ref, lines)
    for spill, fence, span in held_spill_loads(state, [part], now_ms):  # (at spill parts)
        try:
            jobs = await segments.read_spill(spill)
        except SegmentMissing as missing:
            return spill, missing
        state.held.put_spilled(fence, span, spill, jobs[span[3]:span[3] + span[1]])
    for spill in spill_loads(state, part, now_ms):  # (jobs in spill objects)
        try:
            state.spill_windows[window_name(spill)] = await segments.read_spill(spill)
        except SegmentMissing as missing:
            return spill, missing
    got: JobsView = transitions.apply(state, part, now_ms).view
    return got
