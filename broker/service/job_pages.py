"""Pages of jobs that are full or the last, for the API and the dashboard.

The model answers a page from the segment lines the broker has loaded, and
ends it before the first one it has not (:class:`broker.model.views.Page`).
A batch loads at most :data:`~broker.model.state.MAX_WINDOWS` segments for a
page (:meth:`broker.service.queue_target.QueueTarget.prepare`), so a page that
spans more of them comes back cut short, saying where to read on. Here such a
page is completed in steps, each a read of the rest after the last job seen:
each step loads the next segments (the queue's usual windows, at most
``MAX_WINDOWS`` at a time, so memory stays bounded) and goes through the
commit loop on its own, so other batches run between the steps and none
waits for more than one step's reads. A page of ``limit`` jobs takes at most
one step per ``MAX_WINDOWS`` segments it spans. A step may see a later
version of the queue than the one before: as consecutive pages do, which a
client reading after an id already copes with.

Without this a page could be shorter than ``limit`` while more jobs follow,
and a client following ``next_after`` (null when a page is short) would stop
early.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from broker.errors import BrokerUnavailable
from broker.model.job import job_id_for
from broker.model.ops import JobsView, ReadJobs

#: Steps in a row that may bring no job and no progress before a page is
#: refused (retryable). One is possible (a segment attached in the very batch
#: of the step, past what its loads planned); several in a row are not.
MAX_STALLS = 3


def _stalled(stalls: int, what: str) -> int:
    """``stalls`` + 1, or ``BrokerUnavailable`` once past :data:`MAX_STALLS`."""
    if stalls + 1 > MAX_STALLS:
        raise BrokerUnavailable(f"{what} made no progress over the queue's segments; "
                                "try again")
    return stalls + 1


async def full_page(read: Callable[[ReadJobs], Awaitable[JobsView]],
                    op: ReadJobs) -> list[dict[str, Any]]:
    """The page of jobs ``op`` asks for, full (``op.limit`` rows) unless it is
    the last: ``read`` answers one step (:class:`~broker.model.ops.JobsView`)
    and is called again, after the last job seen, while a step says it was
    cut short. Raises what ``read`` raises (``InvalidRequest`` for a bad page,
    on the first step), and ``BrokerUnavailable`` (retryable) if steps stop
    making progress (see :data:`MAX_STALLS`)."""
    rows: list[dict[str, Any]] = []
    limit, stalls, last = op.limit, 0, None
    while True:
        got = await read(op)
        rows += got.rows
        if got.resume_after is None or len(rows) >= limit:
            return rows
        stalls = 0 if got.rows or got.resume_after != last else \
            _stalled(stalls, "a page of jobs")
        last = got.resume_after
        op = dataclasses.replace(op, limit=limit - len(rows), after=job_id_for(last))


async def full_browse_page(read: Callable[[tuple[Any, ...]], Awaitable[dict[str, Any]]],
                           status: str | None, after_seq: int | None,
                           before_seq: int | None, limit: int) -> dict[str, Any]:
    """The dashboard's page (:func:`broker.model.browse.page` with these
    arguments), full unless it is the last before either end: ``read`` answers
    the view for one step's arguments, and is called again for the rest while
    a step says it was cut short (``resume_after``). ``has_prev`` is the first
    step's, ``has_next`` the last's; the answer's ``resume_after`` is None.
    Raises what ``read`` raises, and ``BrokerUnavailable`` as :func:`full_page`."""
    first = got = await read((status, after_seq, before_seq, limit))
    rows = list(got["rows"])
    stalls, last = 0, None
    while got["resume_after"] is not None and len(rows) < limit:
        stalls = 0 if got["rows"] or got["resume_after"] != last else \
            _stalled(stalls, "a page of the job browser")
        last = got["resume_after"]
        got = await read((status, last, before_seq, limit - len(rows)))
        rows += got["rows"]
    return {**got, "rows": rows, "has_prev": first["has_prev"], "resume_after": None}
