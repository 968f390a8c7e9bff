"""Writes the archive objects of committed completions, then lets a commit drop them.

For every commit seq that the last committed version shows completed jobs
for, one background task writes that commit's archive object (see
:mod:`broker.model.format.archive`), retrying with backoff while storage fails. Once it
landed, :meth:`Archiver.to_drop` names the seq and the queue's next commit
drops those jobs. The object is a function of the committed jobs, so a write
repeated by this broker or another one after a takeover changes nothing.

Before the object go its index entries (an empty object per seq block and
hour) and, before this archiver's first object, the index's start marker
unless one is there: so when the jobs leave the queue object, a lookup by id
finds them (:func:`broker.model.format.archive.find_job`). Each of these writes is
repeated identically after a failure or a takeover; the object is written
only once its entries landed, and the jobs are dropped only once it landed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

from broker import paths
from broker.commit.offloop import run_io
from broker.errors import CorruptState, OsqueueError
from broker.model import held
from broker.model.claim_records import ClaimRecord, Done
from broker.model.format import archive
from broker.model.format.archive import Archived
from broker.model.format.spill_format import SpilledJob
from broker.model.format.spill_refs import SpillRef
from broker.model.job import Job
from broker.model.state import QueueState, SegmentRef, Span
from broker.retry import backoff_delays
from broker.service.segment_store import SegmentStore
from broker.storage import ObjectStore

log = logging.getLogger("osqueue.archive")



def write_commit(store: ObjectStore, queue: str, jobs: Sequence[Job],
                 indexed: set[str] | None = None, archived: Sequence[Archived] = ()) -> str:
    """Write (or rewrite, identically) the index entries, then the archive object
    of one commit's completions (``jobs``, and ``archived``: lines made already);
    return its key. ``indexed``: entries known to be written already (skipped;
    those written are added). Raises the store's errors (the object is not
    written unless every entry was)."""
    key, data = archive.commit_object(queue, jobs, archived)
    for entry in archive.index_keys(queue, jobs, archived):
        if indexed is None or entry not in indexed:
            store.put(entry, b"")
            if indexed is not None:
                indexed.add(entry)
    store.put(key, data)
    return key


def write_start(store: ObjectStore, queue: str, now_ms: int, legacy: bool) -> None:
    """Write the index's start marker (see :mod:`broker.model.format.archive`) unless
    one is there. Raises the store's errors."""
    if not store.list(paths.archive_start_prefix(queue)):
        store.put(archive.start_key(queue, now_ms, legacy), b"")


#: How soon an idle queue writes the commit that drops archived jobs (s).
DROP_DELAY_S = 1.0


class Archiver:
    """Archive writes of one queue. ``poke`` wakes the queue's commit loop."""

    def __init__(self, store: ObjectStore, queue: str, executor: Executor,
                 poke: Callable[[], None], *, monotonic: Callable[[], float],
                 segments: SegmentStore | None = None) -> None:
        self.store = store
        self.segments = segments  # reads the lines of completions held in claim records
        self.queue = queue
        self._executor = executor
        self._poke = poke
        self._monotonic = monotonic
        self._writing: dict[int, asyncio.Task[None]] = {}
        self._written: dict[int, float] = {}  # commit seq -> when its object landed
        self.failures = 0
        self.last_error: str | None = None
        self._indexed: set[str] = set()  # index entries written (a few an hour)
        # None until the start marker is known to be there; else whether jobs may
        # have been archived before the index (as the first committed state says)
        self._legacy: bool | None = None
        self._started = False

    def committed(self, state: QueueState) -> None:
        """``state`` is committed: archive each of its commits with completions
        that is not archived or being archived yet."""
        self._forget_dropped(state)
        if self._legacy is None and (state.completed or state.done_commits):
            # more jobs finished than await their object: some were archived before
            c = state.counters
            self._legacy = c.completed + c.cancelled > sum(
                map(len, state.completed.values())) + held.done_count(state)
        for seq in [*state.completed, *state.done_commits]:
            if seq in self._writing or seq in self._written:
                continue
            jobs = [state.jobs[s] for s in state.completed.get(seq, ())]
            done = held.done_entries(state, seq) if state.done_commits else []
            self._writing[seq] = asyncio.get_running_loop().create_task(
                self._write(seq, jobs, done, state), name=f"archive {self.queue} {seq}")

    async def _done_jobs(self, done: list[tuple[ClaimRecord, Done]],
                         state: QueueState) -> list[Archived]:
        """The archive lines of the completions of ``done`` (records' done entries,
        :func:`broker.model.held.done_lines`), from their source lines in the
        held-jobs cache or, when it lacks them (after a takeover), read from
        their segments: the same lines, so the same archive bytes, either way.
        Raises the store's errors, ``SegmentMissing``, and ``CorruptState`` when a
        record's done entry names a position or a segment the head does not hold
        (the write is then retried with backoff, counted in ``failures``, as any
        other failed archive write, rather than ending its task unseen)."""
        refs = {ref.key: ref for ref in state.segment_refs}
        out: list[Archived] = []
        read: dict[tuple[int, Span], list[bytes]] = {}
        spilled: dict[str, list[SpilledJob]] = {}  # (spill objects read, by key)
        for record, entry in done:
            lines: list[tuple[SegmentRef, bytes] | SpilledJob] = []
            span: Span | None = None
            part: list[bytes] = []
            for pos in entry.pos:
                if record.spills and (spill := record.spill_span(pos)) is not None:
                    job = state.held.spilled_job(record.fence, spill, pos - spill[0])
                    if job is None:
                        job = (await self._read_spill(record, spill, state, spilled))[
                            spill[3] + pos - spill[0]]
                    lines.append(job)
                    continue
                if span is None or not span[0] <= pos < span[0] + span[1]:
                    # (positions ascend: a span's run at a time)
                    span = record.seg_span(pos)
                    if span is None:
                        raise CorruptState(f"claim {record.fence} completed position {pos}, "
                                           "which is not held at a segment part")
                    got = state.held.lines(record.fence, span)
                    if got is None or len(got[1]) != span[1]:
                        got = await self._read_part(record, span, refs, read)
                    ref, part = got
                lines.append((ref, part[pos - span[0]]))
            out.append(held.done_lines(record, entry, lines))
        return out

    async def _read_spill(self, record: ClaimRecord, span: Span, state: QueueState,
                          spilled: dict[str, list[SpilledJob]]) -> list[SpilledJob]:
        """Every job of the spill object ``record``'s spill part ``span`` names, as
        its ref shows them, read (once, kept in ``spilled``) for a held-jobs
        cache that lacks them (after a takeover). Raises as :meth:`_done_jobs`."""
        jobs = spilled.get(span[2])
        if jobs is None:
            ref = next((r for r in state.spill_refs
                        if isinstance(r, SpillRef) and r.key == span[2]), None)
            if ref is None:
                raise CorruptState(f"claim {record.fence} holds jobs of spill object "
                                   f"{span[2]}, which the queue does not reference")
            if self.segments is None:
                raise CorruptState("no segment store to read completions from")
            jobs = spilled[span[2]] = await self.segments.read_spill(ref)
        return jobs

    async def _read_part(self, record: ClaimRecord, span: Span, refs: dict[str, SegmentRef],
                         read: dict[tuple[int, Span], list[bytes]]
                         ) -> tuple[SegmentRef, list[bytes]]:
        """The ref and lines of ``record``'s segment part ``span`` read from its
        segment (kept in ``read``), for a cache that lacks them. Raises as
        :meth:`_done_jobs` does."""
        ref = refs.get(span[2])
        if ref is None:
            raise CorruptState(f"claim {record.fence} holds jobs of segment "
                               f"{span[2]}, which the queue does not reference")
        lines = read.get((record.fence, span))
        if lines is None:
            if self.segments is None:
                raise CorruptState("no segment store to read completions from")
            lines = read[(record.fence, span)] = await self.segments.read_window(
                ref, span[3], span[3] + span[1])
        return ref, lines

    async def _write(self, seq: int, jobs: list[Job],
                     done: list[tuple[ClaimRecord, Done]], state: QueueState) -> None:
        delays = backoff_delays(first_s=0.1, cap_s=30.0)
        if len(self._indexed) > 4096:  # (old hours: written long ago)
            self._indexed.clear()
        archived: list[Archived] = []
        try:
            while True:
                try:
                    if done:  # (completions held in claim records: their lines first)
                        archived, done = await self._done_jobs(done, state), []
                    if not self._started:
                        first = jobs[0] if jobs else archived[0]
                        await run_io(self._executor, write_start, self.store, self.queue,
                                     first.done_ms or 0, bool(self._legacy))
                        self._started = True
                    await run_io(self._executor, write_commit, self.store, self.queue, jobs,
                                 self._indexed, archived)
                    break
                except (OsqueueError, OSError) as exc:
                    self.failures += 1
                    self.last_error = str(exc)
                    delay = next(delays)
                    log.warning("archive object of %s commit %d not written (%s); "
                                "retrying in %.1fs", self.queue, seq, exc, delay)
                    await asyncio.sleep(delay)
            self._written[seq] = self._monotonic()
            self.last_error = None
            self._poke()
        finally:
            self._writing.pop(seq, None)

    def _forget_dropped(self, state: QueueState) -> None:
        for seq in [s for s in self._written
                    if s not in state.completed and s not in state.done_commits]:
            del self._written[seq]

    def to_drop(self, state: QueueState) -> tuple[int, ...]:
        """Commit seqs of ``state`` whose archive objects landed: their jobs may leave."""
        self._forget_dropped(state)
        return tuple(self._written)

    def drop_in_s(self, state: QueueState) -> float | None:
        """Seconds until an idle queue should drop archived jobs of ``state``
        (None: nothing to drop)."""
        self._forget_dropped(state)
        if not self._written:
            return None
        return max(0.0, min(self._written.values()) + DROP_DELAY_S - self._monotonic())

    async def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the archive writes under way."""
        tasks = list(self._writing.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

    def pending(self) -> int:
        return len(self._writing)

    def cancel(self) -> None:
        """Stop writing (the broker stops; the next owner writes what is left)."""
        for task in list(self._writing.values()):
            task.cancel()
