"""Pushes by reference: a bulk push (a Spark publish, a push of many jobs or
of many bytes, whose jobs share their options) whose jobs go into segment
objects instead of the queue object.

Three steps, each safe to lose (what a crash after each leaves: below):

1. a commit :class:`~broker.model.ops.Reserve` hands out the push's seqs
   (the counter only grows, so no other job ever gets them);
2. the jobs are written as segment objects, at most
   :data:`~broker.model.format.segment_format.MAX_SEGMENT_JOBS` jobs and
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
import bisect
import collections
import itertools
import logging
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from broker.commit.loop import CommitLoop
from broker.errors import BrokerUnavailable, InvalidRequest
from broker.limits import MAX_ATTEMPTS, MAX_DELAY_MS, MAX_PRIORITY
from broker.model import idempotency
from broker.model.checks import StagedChunk
from broker.model.format.segment_format import MAX_SEGMENT_JOBS
from broker.model.groups.directories import GroupMajor, group_major
from broker.model.job import JobIds, PermutedJobIds, seq_of
from broker.model.ops import NewJob, Op, Push, PushPayloads, Reserve, Result, push_of
from broker.model.state import QueueState, SegmentRef
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
    (default :data:`SEGMENT_MAX_BYTES`). Runs in C but for one step a slice
    (a million payloads: ``bench/spark_bench.py``, the write row)."""
    max_bytes = SEGMENT_MAX_BYTES if max_bytes is None else max_bytes
    ends = list(itertools.accumulate(map(len, payloads)))  # bytes up to and with each
    out = []
    start, base = 0, 0
    while start < len(payloads):
        # the first payload that would pass max_bytes ends the slice (one at least)
        stop = bisect.bisect_right(ends, base + max_bytes, start + 1, len(payloads))
        stop = min(max(stop, start + 1), start + max_jobs)
        out.append((start, stop))
        base, start = ends[stop - 1], stop
    return out


_PUSHES = (Push, PushPayloads)


def wanted(op: object, min_jobs: int, min_bytes: int = 0, grouped: bool = False) -> bool:
    """Whether ``op`` goes by reference: a push (not already of refs, with no
    staged chunk missing) of at least ``min_jobs`` jobs (0: no push does) or of
    payloads of ``min_bytes`` bytes in all (0: not by size), whose jobs all have
    the same options in range and no idempotency key (a key's job stays in the
    head: the key window names it there); with groups only if ``grouped``
    (grouped segments, format 3, are written)."""
    # (a tuple, not ``Push | PushPayloads``: that makes a union object each call, and
    # every push passes here; bench/broker_bench.py, push-b1 rows)
    if min_jobs <= 0 or not isinstance(op, _PUSHES) or op.refs or op.missing:
        return False
    if isinstance(op, PushPayloads):
        payloads = op.payloads
        return len(payloads) >= min_jobs or (
            min_bytes > 0 and len(payloads) > 0 and sum(map(len, payloads)) >= min_bytes)
    jobs = op.jobs
    if not jobs or not _uniform(jobs, grouped):
        return False
    if len(jobs) >= min_jobs:
        return True
    return min_bytes > 0 and sum(len(job.payload) for job in jobs) >= min_bytes


def _uniform(jobs: Sequence[NewJob], grouped: bool = False) -> bool:
    """Whether ``jobs`` share their options, in range (else the push goes into
    the head, which refuses a bad one), with no idempotency key, and no group
    unless ``grouped`` (groups may then differ: grouped segments hold them)."""
    first = jobs[0]
    if grouped:
        common = first[1:5]  # (all but the group)
        return (first.key is None
                and -MAX_PRIORITY <= first.priority <= MAX_PRIORITY
                and 0 <= first.delay_ms <= MAX_DELAY_MS
                and (first.max_attempts is None or 1 <= first.max_attempts <= MAX_ATTEMPTS)
                and all(job[1:5] == common for job in jobs))
    options = first[1:]
    return (first.key is None and first.group is None
            and -MAX_PRIORITY <= first.priority <= MAX_PRIORITY
            and 0 <= first.delay_ms <= MAX_DELAY_MS
            and (first.max_attempts is None or 1 <= first.max_attempts <= MAX_ATTEMPTS)
            and all(job[1:] == options for job in jobs))


def grouped_layout(payloads: Sequence[bytes],
                   groups: Sequence[str | None]) -> list[tuple[int, GroupMajor]]:
    """How a grouped push lays out its jobs: per segment (``chunks`` of the
    request, in request order), its first index in the request and its jobs
    group-major (:func:`~broker.model.groups.directories.group_major`).
    Deterministic, so a repeat of the push (its receipt answers ids in seq
    order) maps its ids back the same way (:func:`request_order`)."""
    return [(lo, group_major(payloads[lo:hi], groups[lo:hi])) for lo, hi in chunks(payloads)]


def request_order(layout: Sequence[tuple[int, GroupMajor]]) -> Sequence[int] | None:
    """``offsets[i]``: the seq offset (from the push's first seq) of request job
    ``i`` under ``layout``; None when no job moved (the seqs are in request order)."""
    if all(isinstance(gm.order, range) for _, gm in layout):
        return None
    offsets = array("I", bytes(4 * sum(len(gm.order) for _, gm in layout)))
    for lo, gm in layout:
        for pos, i in enumerate(gm.order):
            offsets[lo + i] = lo + pos
    return offsets


def _permuted(result: Result, offsets: Sequence[int] | None) -> Result:
    """``result`` of a grouped push by reference with its ids in request order."""
    ids = result.ids
    if offsets is None or ids is None or len(ids) != len(offsets) or not len(ids):
        return result
    first = seq_of(ids[0])
    assert first is not None
    return replace(result, ids=PermutedJobIds(first, offsets))


Loop = CommitLoop[QueueState, Op, Result]
#: Reads one staged chunk, or None if it is gone.
Load = Callable[[], Awaitable[StagedChunk | None]]


@dataclass(frozen=True)
class StagedPublish:
    """A publish of staged chunks (not a model op: what :func:`publish_by_reference`
    turns into a few): ``loads`` read the chunks to keep, in order; ``missing``
    chunks to keep were not found; ``once`` is the publish's key."""

    loads: tuple[Load, ...]
    missing: int
    once: str | None


class _Writer:
    """Reserves seqs and writes segment objects for one push or publish."""

    def __init__(self, loop: Loop, segments: SegmentStore, queue: str,
                 clock: Callable[[], int], monotonic: Callable[[], float]) -> None:
        self.loop, self.segments, self.queue = loop, segments, queue
        self.clock, self.monotonic = clock, monotonic
        self.started = monotonic()
        self.refs: list[SegmentRef] = []
        self.held: list[str] = []  # keys written: see SegmentStore.hold
        self.released = False

    def release(self) -> None:
        """The push is answered (or failed): its objects are the sweep's to judge,
        and so is any written later (:meth:`_keep`)."""
        self.released = True
        self.segments.release(self.held)
        self.held = []

    def _keep(self, key: str) -> None:
        """Hold ``key``, just written, from the sweep until :meth:`release`; at
        once the sweep's if released already (a write that landed after the push
        was answered: no commit of this push references it)."""
        self.segments.hold([key])
        if self.released:
            self.segments.release([key])
        else:
            self.held.append(key)

    async def write(self, payloads: list[bytes], largest: int | None = None,
                    size: int | None = None, *, priority: int = 0, delay_ms: int = 0,
                    max_attempts: int | None = None,
                    layout: Sequence[tuple[int, GroupMajor]] | None = None,
                    ) -> list[NewJob | bytes]:
        """Reserve seqs for ``payloads`` and write their segments (kept in
        :attr:`refs`); return the payloads that go into the head instead: none,
        or all of them if one holds a line break (a segment line holds one job).
        ``largest`` (bytes of the largest payload) and ``size`` (of them all):
        what the caller knows already, else each is a pass over ``payloads``.
        ``priority``, ``delay_ms`` and ``max_attempts`` (None: the queue's):
        every job's options. ``layout``: a grouped push's
        (:func:`grouped_layout`): each slice written group-major as a grouped
        segment (format 3; one without groups as format 2).

        The segments are written :data:`WRITERS` at once. The first slice that
        fails stops the others (a line break: the payloads are returned; a
        storage error is raised), as a cancel does; a write already in the
        store's hands may land later, for the sweep (:meth:`_keep`). So every
        object written is referenced by this push's commit or, once
        :meth:`release` has run, left to the sweep."""
        if largest is None:
            largest = max(map(len, payloads))
        reserved = await self.loop.submit(Reserve(len(payloads), largest))
        assert isinstance(reserved.ids, JobIds) and isinstance(reserved.view, int)
        first = reserved.ids.first
        # (the landed version's: the loop's state may hold a change still in flight)
        attempts = reserved.view if max_attempts is None else max_attempts
        now = self.clock()
        if layout is not None:
            slices = [(lo, lo + len(gm.order)) for lo, gm in layout]
        else:
            slices = [(0, len(payloads))] if size is not None and size <= SEGMENT_MAX_BYTES \
                and len(payloads) <= MAX_SEGMENT_JOBS else chunks(payloads)
        refs: list[SegmentRef | None] = [None] * len(slices)
        gate = asyncio.Semaphore(WRITERS)

        async def one(i: int, lo: int, hi: int) -> None:
            part, runs = (payloads[lo:hi], None) if layout is None else (
                layout[i][1].payloads, layout[i][1].runs)
            async with gate:
                ref = refs[i] = await self.segments.write(
                    self.queue, first + lo, priority, now + delay_ms, part,
                    max_attempts=attempts, created_ms=now, groups=runs)
                self._keep(ref.key)  # (no sweep until this push is answered)

        tasks = [asyncio.ensure_future(one(i, lo, hi)) for i, (lo, hi) in enumerate(slices)]
        try:
            await asyncio.gather(*tasks)
        except ValueError:
            log.info("%d jobs pushed to %s go into the queue object (a payload holds a "
                     "line break); the seqs reserved for them stay unused",
                     len(payloads), self.queue)
            if layout is not None:  # (with their groups: position order, group-major)
                return [NewJob(payload, group=group) for _, gm in layout
                        for payload, group in zip(gm.payloads, _groups_of(gm), strict=True)]
            return list[NewJob | bytes](payloads)
        finally:  # (a failed slice fails them all: the others are stopped, not left to hold)
            for task in tasks:
                task.cancel()
        self.refs += [ref for ref in refs if ref is not None]
        return []

    async def commit(self, op: Push | PushPayloads) -> Result:
        """Push ``op`` with the segments written (refused if they took too long)."""
        took = self.monotonic() - self.started
        if self.refs and took > self.segments.grace_s / 2:
            raise BrokerUnavailable(
                f"writing the segment objects of a push to {self.queue!r} took {took:.0f}s, "
                "too long to reference them safely; nothing was pushed: retry")
        if self.refs:
            log.info("push of %d jobs to %s by reference: %d segment object(s) written",
                     sum(ref.count for ref in self.refs), self.queue, len(self.refs))
        return await self.loop.submit(replace(op, refs=tuple(self.refs)))


async def push_by_reference(loop: Loop, segments: SegmentStore, queue: str,
                            op: Push | PushPayloads, clock: Callable[[], int],
                            monotonic: Callable[[], float]) -> Result:
    """Push ``op``'s jobs by reference (see the module docstring; a ``Push``:
    jobs that share their options, as :func:`wanted` checks); answers as the
    push would. A push already answered (its ``request`` or ``once`` is known
    to the head) goes through the usual path at once, which replays it; so
    does one with a payload holding a line break."""
    layout = offsets = None
    if isinstance(op, Push) and segments.grouped and any(
            job.group is not None for job in op.jobs):
        layout = grouped_layout([job.payload for job in op.jobs],
                                [job.group for job in op.jobs])
        offsets = request_order(layout)
    state = loop.state
    if state is not None and ((op.once is not None and op.once in state.once) or (
            op.request is not None and op.request in state.receipts.requests)):
        return _permuted(await loop.submit(op), offsets)
    writer = _Writer(loop, segments, queue, clock, monotonic)
    try:
        if isinstance(op, Push):
            first = op.jobs[0]
            inline = await writer.write([job.payload for job in op.jobs],
                                        priority=first.priority, delay_ms=first.delay_ms,
                                        max_attempts=first.max_attempts, layout=layout)
        else:
            inline = await writer.write(list(op.payloads))
        if inline:
            if layout is not None and offsets is not None:
                # (a grouped push that goes into the head after all takes its seqs in
                # the layout's order too, so its answer and a repeat's, which maps
                # the receipt's ids through ``offsets``, are the same)
                assert isinstance(op, Push)
                return _permuted(await loop.submit(replace(op, jobs=tuple(
                    op.jobs[lo + i] for lo, gm in layout for i in gm.order))), offsets)
            return await loop.submit(op)
        return _permuted(await writer.commit(PushPayloads(
            (), op.once, op.request, op.missing, op.floor, digest=op.digest)), offsets)
    finally:
        writer.release()


async def publish_by_reference(loop: Loop, segments: SegmentStore, queue: str,
                               publish: StagedPublish, clock: Callable[[], int],
                               monotonic: Callable[[], float]) -> Result:
    """Publish staged chunks, their bare jobs by reference: read a few chunks
    at a time, gather their bare payloads until a segment's worth
    (:data:`~broker.model.format.segment_format.MAX_SEGMENT_JOBS` or :data:`SEGMENT_MAX_BYTES`),
    write that as segments while the next chunks are read, and push every
    reference and the jobs with options in one last commit (which checks
    ``once``). Memory: :data:`WRITERS` segments' worth of payloads and the
    chunks read ahead, whatever the size of the write. A publish smaller than
    ``segments.push_jobs`` and, in bytes of payload, ``segments.push_bytes``
    goes into the head as before, in its order."""
    state = loop.state
    once = publish.once
    if publish.missing or (once is not None and state is not None
                           and idempotency.published(state, once, clock())):
        # Answered by the head: a duplicate, or refused for the missing chunks. The
        # loop's state may hold a commit still in flight, whose key may never land:
        # ``missing`` (at least 1) makes the head refuse, not push nothing under the
        # key, if the key is not there when this applies; then publish for real.
        try:
            return await loop.submit(PushPayloads((), once=once,
                                                  missing=max(publish.missing, 1)))
        except InvalidRequest:
            if publish.missing:
                raise
    writer = _Writer(loop, segments, queue, clock, monotonic)
    writes: collections.deque[asyncio.Future[list[NewJob | bytes]]] = collections.deque()
    try:
        return await _publish(writer, segments.push_jobs, segments.push_bytes, publish,
                              writes, segments.grouped)
    finally:  # (a failed write fails the publish: the others are stopped, not left)
        for task in writes:
            task.cancel()
        writer.release()


async def _publish(writer: _Writer, push_jobs: int, push_bytes: int, publish: StagedPublish,
                   writes: collections.deque[asyncio.Future[list[NewJob | bytes]]],
                   grouped: bool = False) -> Result:
    """(``grouped``: jobs whose only option is a group go into grouped segments
    with the bare ones, group-major per segment; else into the head.)"""
    inline: list[NewJob | bytes] = []
    batch: list[bytes] = []
    groups: list[str | None] | None = None  # (the batch's, once one of its jobs has a group)
    size = largest = gone = 0
    # every job in order, until a segment is written: a small publish keeps its order
    everything: list[NewJob | bytes] | None = []

    def flush() -> None:
        nonlocal batch, groups, size, largest, everything
        layout = None if groups is None else grouped_layout(batch, groups)
        writes.append(asyncio.ensure_future(writer.write(batch, largest, size, layout=layout)))
        batch, groups, size, largest, everything = [], None, 0, 0, None

    async for chunk in _read_ahead(publish.loads):
        if chunk is None:
            gone += 1
            continue
        jobs = chunk.jobs
        if everything is not None:
            everything += jobs
        bare = cast("list[bytes]", jobs)
        named: list[str | None] | None = None
        more = chunk.bare_bytes
        top = chunk.largest
        if not chunk.all_bare:  # jobs with options go into the head
            if grouped:  # (but for a group, default options: to the segments, with it)
                plain = [job for job in jobs if isinstance(job, bytes) or _only_grouped(job)]
                inline += [job for job in jobs
                           if not isinstance(job, bytes) and not _only_grouped(job)]
                bare = [job if isinstance(job, bytes) else job.payload for job in plain]
                named = [None if isinstance(job, bytes) else job.group for job in plain]
                more += sum(len(job.payload) for job in plain if not isinstance(job, bytes))
                top = max(map(len, bare), default=0)
            else:
                bare = [job for job in jobs if isinstance(job, bytes)]
                inline += [job for job in jobs if not isinstance(job, bytes)]
        # whole chunks to a segment, within its limits (sizes known: no pass here)
        if batch and (len(batch) + len(bare) > MAX_SEGMENT_JOBS
                      or size + more > SEGMENT_MAX_BYTES):
            flush()
            while len(writes) >= WRITERS:
                inline += await writes.popleft()
        if named is not None and any(g is not None for g in named) and groups is None:
            groups = [None] * len(batch)
        if groups is not None:
            groups += named if named is not None else [None] * len(bare)
        batch += bare
        size += more
        largest = max(largest, top)
    if everything is not None and len(batch) < push_jobs and not 0 < push_bytes <= size:
        return await writer.commit(push_of(everything, publish.once, missing=gone))
    if batch:
        flush()
    while writes:
        inline += await writes.popleft()
    return await writer.commit(push_of(inline, publish.once, missing=gone))


def _groups_of(gm: GroupMajor) -> list[str | None]:
    """The group of each position of ``gm``."""
    if gm.runs is None:
        return [None] * len(gm.order)
    return [group for group, n in gm.runs for _ in range(n)]


def _only_grouped(job: NewJob) -> bool:
    """Whether ``job``'s only option is its group (a grouped segment holds it)."""
    return (job.group is not None and job.key is None and job.priority == 0
            and job.delay_ms == 0 and job.max_attempts is None)


async def _read_ahead(loads: Sequence[Load]) -> AsyncIterator[StagedChunk | None]:
    """Every chunk in order, with up to :data:`WRITERS` reads under way (so at
    most that many chunks are held besides the one being gathered)."""
    it = iter(loads)
    ahead = collections.deque(asyncio.ensure_future(load()) for load in itertools.islice(
        it, WRITERS))
    try:
        while ahead:
            jobs = await ahead.popleft()
            following = next(it, None)
            if following is not None:
                ahead.append(asyncio.ensure_future(following()))
            yield jobs
    finally:
        for task in ahead:
            task.cancel()
