"""The spill rule's I/O half: in a commit's ``before_write`` (after its batch
applied, before its CAS), write the spill objects the pure rule plans
(:func:`broker.model.spills.plan_dead`) and reference them in the state
(:func:`broker.model.spills.attach`), all in that one commit attempt.

Crash-safe as segments are (:mod:`broker.service.segment_store`): each object is
created under a fresh salted key (``create_if_absent``) before the head that
references it is written, and held from the sweep until the commit is
answered (:meth:`SpillWriter.release`). An object whose commit never lands (a
CAS conflict, a crash before the write, a lost reply resolved as not landed)
is referenced by no head and swept after the grace period; the batch applied
to the re-read head spills again, into new objects.

A spill whose write fails leaves the state as the batch left it (the dead jobs
inline: valid, only larger) and is tried again by a later commit; the
failure is logged (queue, jobs, error), never raised: answers do not change.

**Compaction** (:meth:`SpillWriter.compact`): each spill adds one dead ref to
the head, which every commit writes; once more than
:data:`~broker.model.spill_compaction.COMPACT_REFS` small ones pile up, their objects
are merged into one (or a few) ordinary dead spill objects, so every reader
(pages, lookups, ``spark.read``, the jq recipe, redrive and purge by
reference) works on them unchanged. The merge (read, merge, write: 6 s for
65,536 jobs at a load of 25 on 2 cores; a merge takes at most 16,384) runs in
a task off the commit path; a later commit swaps the refs in, a cheap checked
edit, with the segments' rules: the merged objects are written (and held) before a head references
them, the old ones deleted only once that commit landed, an unreferenced
one swept.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from broker.errors import OsqueueError
from broker.model import spill_compaction, spill_tally, spills
from broker.model.format.spill_format import SpilledJob
from broker.model.format.spill_refs import SpillRef, new_ref
from broker.model.job import DEAD
from broker.model.state import QueueState
from broker.service.segment_store import SegmentStore

log = logging.getLogger(__name__)

#: Spill objects one commit writes at once (as pushes by reference do).
WRITERS = 4


@dataclass(slots=True)
class SpillWriter:
    """One queue's spill writer: ``spill_jobs`` and ``spill_bytes`` are the
    rule's thresholds (``spill_jobs`` 0: never spill, nothing scanned). Keeps
    the keys it wrote and holds from the sweep until :meth:`release`."""

    queue: str
    segments: SegmentStore
    spill_jobs: int = 0
    spill_bytes: int = 256 * 1024
    pending: bool = False  # (pending job objects too: retry-waiting, released)
    held: list[str] = field(default_factory=list)
    #: what it has done, for stats and tests: objects written, jobs they took,
    #: spills that failed (their jobs left inline)
    written: int = 0
    jobs: int = 0
    failures: int = 0
    #: merges of dead refs (:meth:`compact`): landed, failed
    compactions: int = 0
    compaction_failures: int = 0
    #: keys of dead objects whose merge made no fewer objects (big jobs): not merged again
    unmergeable: set[str] = field(default_factory=set)
    #: the background merge (:meth:`compact`), and once written its (old refs,
    #: new refs), whose objects' keys are held until a commit landed it
    merging: asyncio.Task[None] | None = None
    ready: tuple[tuple[SpillRef, ...], tuple[SpillRef, ...]] | None = None
    merge_held: list[str] = field(default_factory=list)
    #: bumped by :meth:`lost`: a merge started before is stale (see there)
    generation: int = 0
    #: the candidates of the state last seen (``seen``: its id), counted again
    #: each commit in the blocks it changed (see :mod:`broker.model.spill_tally`)
    tally: spill_tally.Tally = field(default_factory=spill_tally.Tally)
    seen: int | None = None

    def forget(self) -> None:
        """A new state object is coming (decoded, or empty): count the next one
        whole, whatever its ``id`` (an id is reused once its object is freed)."""
        self.seen = None

    def lost(self) -> None:
        """Another broker has held the queue: give up the merge, ready or under
        way. Its objects are held only by this broker's sweep, so the other
        owner's sweep may have deleted them; swapped in once this broker took
        the queue back, the head would name missing objects."""
        self.generation += 1
        if self.ready is not None:
            self._give_up()

    def _may_spill(self, state: QueueState) -> bool:
        """Whether the rule may spill ``state``'s candidates, by the tally: a
        state not seen before (loaded, re-read) is counted whole, a state seen
        at its last commit only in the blocks changed since (its dirty blocks:
        this runs before the encode clears them)."""
        if id(state) != self.seen:
            self.seen = id(state)
            self.tally = spill_tally.tally(state, self.pending)
        else:
            spill_tally.count_blocks(state, state.dirty_blocks, self.pending, self.tally)
        return self.tally.over(self.spill_jobs, self.spill_bytes)

    async def spill(self, state: QueueState, now_ms: int) -> None:
        """Spill ``state``'s dead jobs if the rule says so: write their objects
        (at most :data:`WRITERS` at once), then attach them, the commit's last
        change. All or nothing: if any object's write fails, none is attached
        (those written are left to the sweep) and the jobs stay inline. Raises
        only what is not a storage error (a bug)."""
        if not self._may_spill(state):
            return
        plan = spills.plan_dead(state, self.queue, self.spill_jobs, self.spill_bytes, now_ms,
                                self.pending)
        if not plan.objects:  # (the tally counted too many: blocks of an older state)
            self.tally = spill_tally.tally(state, self.pending)
            return
        commit_seq = state.seq + 1  # (the version that first references them)
        gate = asyncio.Semaphore(WRITERS)

        async def write(data: bytes, kind: str) -> tuple[str, str]:
            async with gate:
                return await self.segments.write_spill(self.queue, kind, commit_seq, data)

        got = await asyncio.gather(*(write(obj.data, obj.kind) for obj in plan.objects),
                                   return_exceptions=True)
        for outcome in got:
            if isinstance(outcome, tuple):
                self.held.append(outcome[0])
        failed = [exc for exc in got if isinstance(exc, BaseException)]
        for exc in failed:
            if not isinstance(exc, (OsqueueError, OSError)):
                raise exc
        if failed:
            self.failures += 1
            log.warning("queue %s: spilling %d job(s) failed (%s); they stay in the "
                        "queue object and a later commit tries again", self.queue,
                        len(plan.seqs), failed[0])
            return
        names = [outcome for outcome in got if isinstance(outcome, tuple)]
        refs: list[SpillRef] = [new_ref(obj, key, etag) for obj, (key, etag)
                                in zip(plan.objects, names, strict=True)]
        spills.attach(state, plan, refs, now_ms)
        self.tally = spill_tally.Tally()  # (every candidate went)
        self.written += len(refs)
        self.jobs += len(plan.seqs)
        log.info("queue %s: %d job(s) moved into %d spill object(s)", self.queue,
                 len(plan.seqs), len(refs))

    def compact(self, state: QueueState) -> None:
        """Merge the head's small dead spill objects once they pile up
        (:func:`broker.model.spill_compaction.to_compact`), off the commit path: the
        first commit that sees them starts a task (:meth:`_merge`) that reads
        them and writes the merged objects under fresh keys, held from the
        sweep; a later commit puts their refs in place of the old ones
        (:func:`broker.model.spill_compaction.compact`), which it drops (deleted only
        once it landed). A merge whose old refs changed meanwhile (a job taken
        out, a purge, a redrive by reference) is given up: its objects are
        released to the sweep. Until a commit carrying the merge has landed
        (:meth:`landed`), every commit attempt puts it in (a CAS conflict's
        retry too). Never raises for a valid state: a failed merge is logged
        and tried again by a later commit."""
        if self.ready is not None:
            olds, news = self.ready
            try:
                spill_compaction.compact(state, olds, news)
            except ValueError:  # (the old refs are no longer the head's as they were)
                log.info("queue %s: a merge of %d dead spill object(s) is given up: they "
                         "changed meanwhile", self.queue, len(olds))
                self._give_up()
            return
        if self.merging is not None and not self.merging.done():
            return
        small = spill_compaction.to_compact(state, frozenset(self.unmergeable))
        if small:
            self.merging = asyncio.get_running_loop().create_task(
                self._merge(tuple(small), state.seq + 1))

    async def _merge(self, olds: tuple[SpillRef, ...], commit_seq: int) -> None:
        """Read ``olds`` (at most :data:`WRITERS` at once), merge their live jobs
        (in a thread: tens of thousands of lines) and write the merged objects,
        held; then they are :attr:`ready` for a commit. A storage error is
        logged and counted (the written objects released to the sweep); a
        merge that makes no fewer objects is not made, and those objects are
        not tried again."""
        gate = asyncio.Semaphore(WRITERS)
        generation = self.generation

        async def read(ref: SpillRef) -> list[SpilledJob]:
            async with gate:
                return await self.segments.read_spill(ref)

        written: list[str] = []

        async def write(data: bytes) -> tuple[str, str]:
            async with gate:
                key, etag = await self.segments.write_spill(self.queue, DEAD, commit_seq, data)
            written.append(key)
            return key, etag

        try:
            jobs = await asyncio.gather(*(read(ref) for ref in olds))
            objects = await asyncio.to_thread(spill_compaction.merged, self.queue, olds, jobs)
            if len(objects) >= len(olds):
                self.unmergeable.update(ref.key for ref in olds)
                return
            names = await asyncio.gather(*(write(obj.data) for obj in objects))
        except (OsqueueError, OSError) as exc:
            self.compaction_failures += 1
            self.segments.release(written)
            log.warning("queue %s: merging %d dead spill object(s) failed (%s); they stay "
                        "as they are and a later commit tries again", self.queue,
                        len(olds), exc)
            return
        if generation != self.generation:  # (the queue was another's meanwhile: see lost)
            self.segments.release(written)
            return
        self.merge_held = written
        self.ready = (olds, tuple(new_ref(obj, key, etag)
                                  for obj, (key, etag) in zip(objects, names, strict=True)))

    def landed(self, state: QueueState) -> None:
        """Version ``state`` of the head landed: if it carries the ready merge,
        the merge is done (its objects referenced by a landed head: released
        from the hold)."""
        if self.ready is not None and all(ref in state.spill_refs for ref in self.ready[1]):
            olds, news = self.ready
            self.compactions += 1
            log.info("queue %s: %d dead spill object(s) merged into %d", self.queue,
                     len(olds), len(news))
            self._give_up()

    def _give_up(self) -> None:
        self.ready = None
        held, self.merge_held = self.merge_held, []
        self.segments.release(held)

    def release(self) -> None:
        """The commit that may reference the held objects is answered (landed,
        or given up): the sweep may judge them again, after a grace period."""
        if self.held:
            held, self.held = self.held, []
            self.segments.release(held)
