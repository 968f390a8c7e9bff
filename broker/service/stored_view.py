"""Reads answered from a stored queue object, by a broker that does not serve
the queue (a read never moves a queue: see :mod:`broker.service.coordinator`).

The served path loads the segment lines a page of jobs shows before the page
is read (:meth:`broker.service.queue_model.QueueModel.prepare`); this is the
same for a stored version, read once: without it a page of a deep queue
would end before its first segment, empty while the queue holds jobs.
"""

from __future__ import annotations

from typing import Any

from broker.model import transitions
from broker.model.ops import JobsView, ReadJobs, ReadStats
from broker.model.state import QueueState, SegmentWindows
from broker.model.views import page_segments
from broker.service.job_pages import full_page
from broker.service.segment_store import SegmentStore


async def stored_view(state: QueueState, op: ReadStats | ReadJobs, segments: SegmentStore,
                      now_ms: int) -> Any:
    """What ``op`` reads of ``state``, a stored version (decoded, not served
    here): a page of jobs (a :class:`~broker.model.ops.JobsView`, never cut
    short) shows the pending jobs of its segments, read from the store at
    most :data:`~broker.model.state.MAX_WINDOWS` of them at a time (each step
    of :func:`~broker.service.job_pages.full_page` over the same version
    drops the windows of the one before). Raises ``SegmentMissing`` naming a
    segment object that is missing or changed (the queue may have moved on
    since ``state`` was read: read again), ``InvalidRequest`` for a bad page,
    and the store's errors. Changes nothing in the store."""
    if not isinstance(op, ReadJobs):
        return transitions.apply(state, op, now_ms).view

    async def step(part: ReadJobs) -> JobsView:
        windows = state.windows = SegmentWindows()
        for ref in page_segments(state, part.status, part.after, part.limit):
            windows.put(ref, ref.taken, await segments.read_window(ref))
        got: JobsView = transitions.apply(state, part, now_ms).view
        return got

    return JobsView(await full_page(step, op))
