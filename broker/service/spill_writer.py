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
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from broker.errors import OsqueueError
from broker.model import spill_tally, spills
from broker.model.format.spill_refs import SpillRef, new_ref
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
    #: the candidates of the state last seen (``seen``: its id), counted again
    #: each commit in the blocks it changed (see :mod:`broker.model.spill_tally`)
    tally: spill_tally.Tally = field(default_factory=spill_tally.Tally)
    seen: int | None = None

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

    def release(self) -> None:
        """The commit that may reference the held objects is answered (landed,
        or given up): the sweep may judge them again, after a grace period."""
        if self.held:
            held, self.held = self.held, []
            self.segments.release(held)
