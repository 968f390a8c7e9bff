"""How a queue object plugs into the generic commit loop (:mod:`broker.commit.loop`).

Each state it reads or makes is bound to the queue's token key (see
:mod:`broker.model.tokens`; a new queue, or an object from before tokens were
tagged, gets a fresh one).

Business rules that run on every commit live here, not in the loop: take the
queue over when this broker may (which grants every claimed job a fresh
lease on this broker's clock, before anything is reclaimed), renew the
broker record when :func:`broker.service.ownership.renew_due` says so, reclaim expired leases,
drop completed jobs whose archive object is written; and after each
committed version, start writing the archive objects it calls for.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Sequence

from broker.errors import NotTheBroker, OsqueueError
from broker.model import browse, cancels, tokens, transitions
from broker.model import receipts as R
from broker.model import state as S
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.format.spill_format import SpilledJob
from broker.model.job import job_id_for
from broker.model.ops import (
    Cancel,
    Claim,
    DropArchived,
    Inspect,
    Op,
    ReadJobs,
    Reclaim,
    RenewBroker,
    Result,
    TakeOver,
)
from broker.model.segments.claims import claim_refs, held_missing, held_wanted, plan_windows
from broker.model.segments.grouped import carry_buckets
from broker.model.segments.planning import claim_sources, directories_wanted
from broker.model.spill_parts import spill_missing
from broker.model.spills import claim_refs as spill_claim_refs
from broker.model.spills import spill_loads, window_name
from broker.model.state import MAX_WINDOWS, SegmentWindows
from broker.model.views import next_wakeup_ms, page_segments
from broker.service.archiver import Archiver
from broker.service.ownership import Ownership, renew_at_ms, renew_due
from broker.service.segment_store import SegmentStore
from broker.service.spill_writer import SpillWriter
from broker.storage import Data

#: How far ahead of now a batch plans its segment windows (ms).
PLAN_AHEAD_MS = 1_000
#: Spill objects whose existence prepare checks at once (one HEAD each).
SPILL_CHECKS = 16
#: Grouped segments whose directories prepare reads at once (each read is of
#: the whole object, its lines dropped: this bounds the memory it takes).
DIRECTORY_READS = 4


#: how many of the latest attempts' dropped refs are kept for a reply that is lost
_DROPS_KEPT = 8


class QueueTarget:
    """The :class:`broker.commit.target.CommitTarget` of one queue: ``QueueState`` changed by
    ``Op`` answering ``Result``."""

    def __init__(self, queue: str, broker_id: str, url: str, lease_ms: int,
                 settings: S.QueueSettings, ownership: Ownership, archiver: Archiver,
                 where: str, segments: SegmentStore,
                 random_bytes: Callable[[int], bytes] = secrets.token_bytes,
                 held_in_records: bool = False, held_cache_bytes: int = 256 << 20,
                 spill: tuple[int, int, bool] = (0, 0, False)) -> None:
        self.queue = queue
        self.broker_id = broker_id
        self.url = url
        self.lease_ms = lease_ms
        self.settings = settings
        self.ownership = ownership
        self.archiver = archiver
        self.where = where
        self.random_bytes = random_bytes  # for the key of the queue's tokens (broker.model.tokens)
        self.retiring = False  # set while shutting down: never take the queue (back) over
        self.segments = segments
        self.windows = SegmentWindows()  # (shared by every state of this queue)
        self.spill_windows: dict[tuple[str, str], list[SpilledJob]] = {}  # (likewise)
        self.held = S.HeldJobs(held_cache_bytes)  # (likewise: jobs held at segment parts)
        self.held_in_records = held_in_records
        self._checked: set[tuple[str, str]] = set()  # refs whose object was seen at its etag
        self._deleting: set[asyncio.Task[int]] = set()
        # commit id -> the refs its state dropped, for a write that landed but whose
        # reply was lost: the loop then reports the state it re-read, which knows
        # nothing of them (a few of the latest attempts only)
        self._drops: dict[str, list[S.SegmentRef | S.SpillRefLike]] = {}
        # dead (and pending) jobs off the head (spill_jobs, spill_bytes, spill_pending)
        self.spills = SpillWriter(queue, segments, *spill)

    def decode(self, data: bytes) -> S.QueueState:
        self.spills.forget()
        state = decode_state(data, where=self.where)
        if state.broker is not None and state.broker.id != self.broker_id:
            self.spills.lost()  # (its sweep may have deleted a ready merge's objects)
        tokens.bind(state, self.queue, self.random_bytes)  # (an older object: a key now)
        state.windows, state.spill_windows = self.windows, self.spill_windows
        state.held, state.held_in_records = self.held, self.held_in_records
        return state

    def empty(self, now_ms: int) -> S.QueueState:
        self.spills.forget()
        state = transitions.new_state(now_ms, self.settings)
        tokens.bind(state, self.queue, self.random_bytes)
        state.windows, state.spill_windows = self.windows, self.spill_windows
        state.held, state.held_in_records = self.held, self.held_in_records
        return state

    async def prepare(self, state: S.QueueState, ops: Sequence[Op], now_ms: int) -> None:
        """Before ``ops`` apply to ``state``: check that every segment it
        references exists at its etag (once per reference: what a takeover
        asks, without reading a segment), and load the segment lines the
        batch's claims may take (:func:`~broker.model.segments.claims.claim_refs`, of them
        those :func:`~broker.model.segments.claims.plan_windows` says are short; of
        grouped segments, the directory of every due one and the lines of those
        :func:`~broker.model.segments.planning.claim_sources` plans).
        Raises ``SegmentMissing`` naming a missing or changed object (a
        segment or a spill object), and the store's errors."""
        self.spills.release()  # (the batch of the last before_write is answered)
        await self._check_spills(state)
        await self._load_spills(state, ops, now_ms)
        if state.seg_names:  # jobs held at claim records' parts the batch may settle
            await self._load_held(state, ops, now_ms)
        refs = state.segment_refs
        if not refs:
            return
        for ref in refs:
            if (ref.key, ref.etag) not in self._checked:
                await self.segments.check(ref)
                self._checked.add((ref.key, ref.etag))
        self.windows.keep_only(refs)
        budget = sum(op.max_jobs for op in ops if isinstance(op, Claim))
        # (a segment falling due while the batch lingers is planned for too)
        ahead = now_ms + PLAN_AHEAD_MS
        claims = claim_refs(state, budget, ahead)
        # grouped segments: every due one's directory (claims and stats), once; the
        # lines of those the batch's claims may reach, whole
        dirs = directories_wanted(state, ahead)
        for at in range(0, len(dirs), DIRECTORY_READS):  # (a few whole reads at a time)
            some = dirs[at:at + DIRECTORY_READS]
            got = await asyncio.gather(*(self.segments.read_directory(ref) for ref in some))
            for ref, runs in zip(some, got, strict=True):
                self.windows.put_directory(ref, runs)
        claims += [(ref, ref.remaining) for ref in claim_sources(state, budget, now_ms)]
        needed = [ref for ref, _ in claims]
        wanted = [ref for ref, _ in plan_windows(state.windows, claims)]
        for op in ops:  # a page of jobs shows the segments' too (ending before an unloaded one)
            if isinstance(op, ReadJobs):
                paged = page_segments(state, op.status, op.after, op.limit)
                needed += paged
                # (a window holds the whole untaken rest of its segment)
                wanted += [ref for ref in paged if self.windows.loaded(ref) < ref.remaining]
        for op in ops:  # the dashboard's reads; a cancel (its job moves into the head)
            more = browse.segments_to_load(state, op) if isinstance(op, Inspect) else \
                cancels.segments_to_load(state, op.ids) if isinstance(op, Cancel) else []
            needed += more[:MAX_WINDOWS]  # (ids beyond: answered "retry", nothing changed)
            wanted += more[:MAX_WINDOWS]
        # every window the batch needs stays while the others are read; the
        # least lately needed go first beyond MAX_WINDOWS
        keep = {(ref.key, ref.etag) for ref in needed}
        self.windows.touch(needed)
        for ref in dict.fromkeys(wanted):  # (each once, in order)
            if ref.groups is not None:  # (whole, with its directory: claims take by run)
                lines, runs = await self.segments.read_grouped(ref)
                self.windows.put_grouped(ref, lines, runs, keep)
                continue
            self.windows.put(ref, ref.taken, await self.segments.read_window(ref), keep)

    async def _load_held(self, state: S.QueueState, ops: Sequence[Op], now_ms: int) -> None:
        """Load the jobs held at claim records' segment and spill parts that the
        batch may settle (:func:`~broker.model.segments.claims.held_wanted`) and
        the held-jobs cache lacks: a segment part's lines, a spill part's jobs
        (its object read once, as its ref shows them). Pins those records'."""
        pages = [_as_page(state, op) for op in ops if isinstance(op, Inspect)]
        # (with the housekeeping's Reclaim: every batch reclaims, named by no op)
        holding = held_wanted(state, [*ops, Reclaim(), *filter(None, pages)],
                              now_ms + PLAN_AHEAD_MS)
        self.held.pinned = set(holding)  # (loaded or not: a load must not push one out)
        for ref, fence, span in held_missing(state, holding):
            lines = await self.segments.read_window(ref, span[3], span[3] + span[1])
            self.held.put(fence, span, ref, lines)
        read: dict[tuple[str, str], list[SpilledJob]] = {}
        for spill, fence, span in spill_missing(state, holding):
            name = window_name(spill)
            jobs = self.spill_windows.get(name) or read.get(name)
            if jobs is None or len(jobs) != spill.count:
                jobs = read[name] = await self.segments.read_spill(spill)
            self.held.put_spilled(fence, span, spill, jobs[span[3]:span[3] + span[1]])

    async def _check_spills(self, state: S.QueueState) -> None:
        """Check that every spill object ``state`` references and this target
        has not seen at its etag exists at it: one metadata lookup each, at
        most :data:`SPILL_CHECKS` at once (a takeover of a queue with many
        dead objects waits for the slowest few, not their sum). Raises
        ``SegmentMissing`` naming the first missing or changed one in the
        head's order (those found are remembered), and the store's errors."""
        todo = [ref for ref in state.spill_refs if (ref.key, ref.etag) not in self._checked]
        if not todo:
            return
        gate = asyncio.Semaphore(SPILL_CHECKS)

        async def check(ref: S.SpillRefLike) -> None:
            async with gate:
                await self.segments.check_spill(ref)

        got = await asyncio.gather(*(check(ref) for ref in todo), return_exceptions=True)
        self._checked.update((ref.key, ref.etag) for ref, outcome in zip(todo, got, strict=True)
                             if outcome is None)
        for outcome in got:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _load_spills(self, state: S.QueueState, ops: Sequence[Op], now_ms: int) -> None:
        """Read the jobs of the spill objects the batch's claims take from, its
        redrives by id copy back and its pages and lookups show
        (:func:`~broker.model.spills.spill_loads`), forgetting the others."""
        pages = [_as_page(state, op) for op in ops if isinstance(op, Inspect)]
        ahead = now_ms + PLAN_AHEAD_MS
        wanted = [ref for op in [*ops, *filter(None, pages)]
                  for ref in spill_loads(state, op, ahead)] if state.spill_refs else []
        # (kept too: the windows the next claims take from, as segment windows are)
        names = {window_name(ref) for ref in [*wanted, *spill_claim_refs(state, ahead)]}
        for name in [name for name in self.spill_windows if name not in names]:
            del self.spill_windows[name]
        for ref in dict.fromkeys(wanted):
            if window_name(ref) not in self.spill_windows:
                self.spill_windows[window_name(ref)] = await self.segments.read_spill(ref)

    async def before_write(self, state: S.QueueState, now_ms: int) -> None:
        """Past the broker's ``spill_jobs`` (or ``spill_bytes``), write the
        head's dead jobs into spill objects and reference them instead
        (:class:`~broker.service.spill_writer.SpillWriter`: a failed write
        leaves them inline, logged); first, merge the small dead spill objects
        once they pile up (:meth:`~broker.service.spill_writer.SpillWriter.compact`).
        Nothing with ``spill_jobs`` 0."""
        if not self.spills.spill_jobs:
            return
        self.spills.compact(state)  # (before the spill: only landed objects merge)
        await self.spills.spill(state, now_ms)
        # (every ref is checked by now, or was written by this commit)
        self._checked.update((ref.key, ref.etag) for ref in state.spill_refs)

    def apply(self, state: S.QueueState, op: Op,
              now_ms: int) -> tuple[Result | OsqueueError, bool]:
        result = transitions.apply(state, op, now_ms)
        if result.error is not None:  # a refusal that is written: raised once it landed
            return result.error, result.changed
        return result, result.changed

    def housekeeping(self, state: S.QueueState, now_ms: int,
                     exists: bool) -> list[Op]:
        ops: list[Op] = []
        record = state.broker
        if not self.retiring:
            if record is None or record.id != self.broker_id or record.url != self.url:
                # first: fresh leases on our clock, so the reclaim below reclaims nothing early
                ops.append(TakeOver(self.broker_id, self.url, self.lease_ms))
            elif renew_due(record, self.lease_ms, now_ms):
                ops.append(RenewBroker(self.broker_id, self.url, self.lease_ms))
        ops.append(Reclaim())
        archived = self.archiver.to_drop(state)
        if archived:
            ops.append(DropArchived(archived))
        return ops

    def encode(self, state: S.QueueState, writer: str, now_ms: int, commit: str) -> Data:
        codec.stamp(state, writer, now_ms, commit)
        if state.dropped_refs:
            if len(self._drops) >= _DROPS_KEPT:
                del self._drops[next(iter(self._drops))]
            self._drops[commit] = list(state.dropped_refs)
        return codec.encode_parts(state)

    def identity(self, state: S.QueueState) -> tuple[str | None, Sequence[str]]:
        return state.commit, state.lineage

    def seq(self, state: S.QueueState) -> int:
        return state.seq

    def may_write(self, state: S.QueueState, owned: bool) -> OsqueueError | None:
        record = state.broker
        if record is None or record.id == self.broker_id:
            return None
        if owned or self.retiring or not self.ownership.may_take(self.queue, record):
            return self.not_owner(state)
        return None

    def not_owner(self, state: S.QueueState) -> OsqueueError:
        url = state.broker.url if state.broker is not None else None
        return NotTheBroker(
            f"this broker does not serve queue {self.queue!r}"
            + (f"; it is served by {url}" if url else ""),
            url=url,
            queue=self.queue,
        )

    def carry(self, dropped: S.QueueState, fresh: S.QueueState, now_ms: int) -> None:
        fresh.receipts.carry_unwritten(dropped.receipts, now_ms)
        fresh.claims = dropped.claims  # this broker's rate limit bucket and claim rate
        carry_buckets(dropped, fresh)  # and its groups' token buckets
        # A claim's repeat that handed its jobs out again is marked in memory only;
        # without the mark the first attempt's release would take them back from the
        # client holding them (transitions._release). One too many only leaves jobs
        # to their leases.
        requests = fresh.receipts.requests
        for key, old in dropped.receipts.requests.items():
            mine = requests.get(key)
            if old.replayed and mine is not None and mine.kind == R.CLAIM:
                mine.replayed = True

    def committed(self, state: S.QueueState) -> None:
        self.spills.release()
        self.spills.landed(state)
        # The objects the landed commits dropped may go: this state's own, and those
        # of an attempt of ours in its lineage (a landed write whose reply was lost;
        # without this they waited for the sweep's grace).
        gone = {ref.key: ref for ref in state.dropped_refs}
        state.dropped_refs = []
        landed = set(state.lineage).intersection(self._drops) if self._drops else ()
        if landed:
            for commit in landed:
                gone.update((ref.key, ref) for ref in self._drops.pop(commit))
            for key in [*(r.key for r in state.segment_refs), *(r.key for r in state.spill_refs),
                        *state.seg_names]:
                gone.pop(key, None)  # (never one the head still references or a record names)
        if gone:
            dropped = list(gone.values())
            self._checked.difference_update((ref.key, ref.etag) for ref in dropped)
            task = asyncio.get_running_loop().create_task(self.segments.delete_dropped(dropped))
            self._deleting.add(task)
            task.add_done_callback(self._deleting.discard)
        if self.ownership.is_self(state.broker) or state.broker is None:
            self.archiver.committed(state)

    def next_timer_ms(self, state: S.QueueState, now_ms: int) -> int | None:
        times = []
        wake = next_wakeup_ms(state, now_ms)
        if wake is not None:
            times.append(wake)
        record = state.broker
        if record is not None and record.id == self.broker_id and not self.retiring:
            times.append(renew_at_ms(record, self.lease_ms))
        drop_in = self.archiver.drop_in_s(state)
        if drop_in is not None:
            times.append(now_ms + round(drop_in * 1000))
        return min(times) if times else None


def _as_page(state: S.QueueState, op: Inspect) -> ReadJobs | None:
    """The page of jobs the dashboard's page view ``op`` reads (for planning its
    loads), or None (another view, or one the view itself refuses)."""
    if op.view != "page":
        return None
    try:
        status, _, _, limit = op.args
        start = browse.page_start(state, *op.args)
    except (OsqueueError, TypeError, ValueError):
        return None
    return ReadJobs(status, limit + 1, job_id_for(max(0, start)))
