"""Held counts per group, derived from the claim records, and the groups'
ready jobs: what a claim of a queue that uses groups works on.

The head never stores a count: every held job is a position of a claim
record (:mod:`broker.model.claim_records`), and its group is on its line. So
:func:`held_by_group` rebuilds the counts exactly from any head, and a
:class:`GroupState` built on load (or after a takeover) starts from what the
landed head holds: a limit holds across takeovers. From then on the counts
move with the claims (:meth:`~broker.model.groups.dispatch.Dispatch.served`) and with the one settle
function (:func:`broker.model.lifecycle.settle` calls :func:`settle_hook`),
so no path that ends a claim can forget its count.

The ready jobs of each group are a heap of ready-heap keys
(:func:`broker.model.indexes.ready_key`: priority desc, run-at, seq) per gid,
filled from the queue's ready heap by the claim (the segments layer,
:mod:`broker.model.segments.grouped`); entries go stale as the ready heap's
do and are checked on use.

Pure: no I/O, time passed in. Imports the claim records and the job table
(below it), never the state.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.limits import MAX_PRIORITY
from broker.model.claim_records import ClaimRecord
from broker.model.groups.buckets import GroupBuckets
from broker.model.groups.directories import Directory
from broker.model.groups.dispatch import AT_LIMIT, Dispatch, Head
from broker.model.groups.names import NO_GROUP, GroupNames
from broker.model.groups.settings import GroupSettings
from broker.model.job import DEAD, PENDING, Job
from broker.model.jobtable import JobTable

# The priority's place in a ready-heap key (broker.model.indexes: 48 bits of seq,
# 48 of time; this module may not import the indexes, which import the state).
_PRIORITY_SHIFT = 96
_TIME_SHIFT = 48


def ready_key_of(priority: int, run_at_ms: int, seq: int) -> int:
    """:func:`broker.model.indexes.ready_key` (priority desc, run-at, seq), here
    for the reason above; ``tests/unit/broker/model/groups`` holds them equal."""
    return ((MAX_PRIORITY - priority) << _PRIORITY_SHIFT) | (run_at_ms << _TIME_SHIFT) | seq


def source_key(fifo: bool, gid: int, priority: int, run_at_ms: int, seq: int) -> int:
    """The key of a job (or of a grouped segment run's next job) in its group's
    heap: in fifo order (``fifo``, a group other than 0) its seq, so a group's
    head is its oldest pending job whether due or not; else its ready key
    (priority desc, run-at, seq), due jobs only. Either way ``key & SEQ_MASK``
    is the seq and a run's consecutive positions have consecutive keys. The one
    place the choice is made (claims, grouped segment runs, the fifo hook)."""
    if fifo and gid != NO_GROUP:
        return seq
    return ready_key_of(priority, run_at_ms, seq)


def priority_of(key: int) -> int:
    """The priority of a ready-heap key."""
    return MAX_PRIORITY - (key >> _PRIORITY_SHIFT)


def held_by_group(records: Iterable[ClaimRecord], jobs: JobTable) -> dict[str | None, int]:
    """How many claimed positions each group holds (None: jobs without a group),
    from the claim records and the claimed jobs' lines: O(held positions).
    Groups holding none are left out. ``KeyError`` if a record names a job the
    table does not hold as a claimed :class:`Job` (a corrupt head: decode refuses it)."""
    out: dict[str | None, int] = {}
    for record in records:
        seqs = record.seqs
        for pos in record.unsettled():
            job = jobs.get(seqs[pos])
            if job is None and record.held_span(pos) is not None:  # (ungrouped)
                out[None] = out.get(None, 0) + 1
                continue
            if not isinstance(job, Job):
                raise KeyError(f"claim record {record.fence} names job seq {seqs[pos]}, "
                               "which is not a claimed job of the head")
            out[job.group] = out.get(job.group, 0) + 1
    return out


class GroupState:
    """One queue's groups while it uses them: names, fair dispatch (with the
    held counts) and each group's ready jobs. Derived, never stored."""

    __slots__ = ("dead", "dirs", "dispatch", "early", "heaps", "names", "now_ms", "pushed",
                 "refresh", "seen_ms", "settings", "stale", "twice", "untold", "untold_ms")

    def __init__(self, settings: GroupSettings, held: dict[str | None, int],
                 now_ms: int, kept: tuple[GroupNames, GroupBuckets] | None = None) -> None:
        self.settings = settings
        self.names = GroupNames() if kept is None else kept[0]
        self.dispatch = Dispatch(settings, self.names)
        if kept is not None and settings.rate is not None:
            # (the buckets of the structures this one replaces on the same broker: a
            # rebuild grants no fresh burst; a new rate or burst caps what is left)
            buckets = kept[1]
            buckets.reconfigure(settings.rate, now_ms)
            self.dispatch.buckets = buckets
        # gid -> its jobs' keys (source_key; fair: the due ones, fifo: every pending one)
        self.heaps: dict[int, list[int]] = {}
        # gid -> its dead jobs in the head (fifo order only: group_dead "hold" stops on them)
        self.dead: dict[int, int] = {}
        # the latest time a claim or change was seen at: a settlement's (the settle
        # function is not told the time; a group parked a little early is woken by the
        # next pick, which advances the clock: never served early)
        self.now_ms = now_ms
        # the latest time a claim (or a stats read) was made at: one at an earlier time (the
        # owner's clock stepped back) rebuilds these (broker.model.segments.grouped)
        self.seen_ms = now_ms
        # fifo order: sets group gid's head (and dead count) from its heap top, checked
        # live against the state (set by broker.model.segments.grouped, which knows it)
        self.refresh: Callable[[int, int], None] | None = None
        # (key, etag) -> the directory of a grouped segment whose runs are in the heaps
        # (each run by the ready key of its next untaken position: broker.model.segments.grouped)
        self.dirs: dict[tuple[str, str], Directory] = {}
        # of those, the ones not yet due (fifo order): their group 0 runs go in when due
        self.early: set[tuple[str, str]] = set()
        # gid -> its heap's top before the first bulk push since the last claim filled
        # it (None: no heap), dispatch not yet told
        # (broker.model.segments.group_heaps.take_pushed); the entries those pushes
        # added, and the latest time they were made at (ms)
        self.untold: dict[int, int | None] = {}
        self.pushed: list[int] = []
        self.untold_ms = 0
        # gids whose heaps may hold entries of jobs that left pending other than by a
        # claim (cancelled, purged, spilled), and (fifo order) gids whose heaps may
        # hold a seq twice (a job's move to pending and its ready entry both push it):
        # what the next stats read drops (broker.model.segments.grouped.group_stats)
        self.stale: set[int] = set()
        self.twice: set[int] = set()
        for name, n in held.items():
            self.dispatch.hold(self.names.gid(name), n, now_ms)

    def head_of(self, gid: int, now_ms: int) -> None:
        """Tell dispatch group ``gid``'s head: the top of its heap (which the
        caller has checked is live), or none."""
        heap = self.heaps.get(gid)
        if heap:
            key = heap[0]
            self.dispatch.set_head(gid, Head(priority_of(key), key, 0), now_ms)
        else:
            self.heaps.pop(gid, None)
            self.dispatch.set_head(gid, None, now_ms)

    def held(self, name: str | None) -> int:
        """How many jobs of group ``name`` are claimed now."""
        gid = self.names.find(name)
        view = None if gid is None else self.dispatch.view(gid)
        return 0 if view is None else view.held

    def runnable(self, now_ms: int) -> bool:
        """Whether a claim at ``now_ms`` would find a group to serve (or jobs a
        push put in their groups' heaps, not yet told: as jobs in the ready heap)."""
        return bool(self.untold) or self.dispatch.pick(now_ms) is not None

    def stats(self, busiest: int = 10, more: Mapping[int, int] | None = None) -> dict[str, Any]:
        """The groups as stats show them: how many have a record (pending ready
        jobs or held ones), the jobs held in all, the ready jobs held back by a
        limit (``held_back``: jobs, groups at their limit), and the ``busiest``
        groups by (claimed, ready pending). O(groups in memory), never O(jobs).
        A group's count is its heap's length: exact once the entries of jobs
        cancelled or purged since (:attr:`stale`) and a fifo heap's repeated
        seqs (:attr:`twice`) are dropped, which
        :func:`broker.model.segments.grouped.group_stats` does first (a read of
        the :class:`GroupState` alone, as the metrics make, may count them).
        ``more``: gid -> pending jobs its heap does not count one by one (those
        of grouped segments' runs)."""
        dispatch, heaps, names = self.dispatch, self.heaps, self.names
        more = more or {}
        rows = []
        claimed = back = at_limit = 0
        for gid in dispatch.gids():
            view = dispatch.view(gid)
            assert view is not None
            pending = len(heaps.get(gid, ())) + more.get(gid, 0)
            claimed += view.held
            if view.state == AT_LIMIT:
                at_limit += 1
                back += pending
            rows.append((view.held, pending, gid, view))
        top = heapq.nlargest(busiest, rows, key=lambda row: (row[0], row[1], -row[2]))
        return {
            "known": len(rows), "claimed": claimed,
            "held_back": {"jobs": back, "groups_at_limit": at_limit},
            "busiest": [{"group": names.name(gid), "claimed": held, "pending": pending,
                         "limit": view.limit, "weight": view.weight, "state": view.state}
                        for held, pending, gid, view in top],
        }

    def settle(self, name: str | None) -> None:
        """A held job of group ``name`` was settled (see :func:`settle_hook`)."""
        # (names.find(), inlined: once a settled job, bench/groups_cpu_bench.py)
        gid = NO_GROUP if name is None else self.names.ids.get(name)
        if gid is None:
            raise ValueError(f"a job of group {name!r:.60} was settled, but none is held")
        self.dispatch.settled_one(gid, self.now_ms)

    def settle_many(self, names: list[str | None]) -> None:
        """:meth:`settle` of each of ``names`` in turn (one call an operation for
        all its settled jobs: ``groups_model_bench --instructions``). ``ValueError``
        for a name none of whose jobs is held (those before it are settled)."""
        try:  # (in C; a KeyError for None, never a key, or a name not interned)
            gids = list(map(self.names.ids.__getitem__, names))  # type: ignore[arg-type]
        except KeyError:  # (then one by one: settle() looks each up, refusing as it says)
            for name in names:
                self.settle(name)
            return
        self.dispatch.settled_many(gids, self.now_ms)

    def left(self, name: str | None) -> None:
        """A pending job of group ``name`` left pending other than by a claim
        (cancelled, purged, spilled; see :func:`left_hook`): its entry in the
        group's heap, if any, is stale (dropped by the next stats read)."""
        gid = self.names.find(name)
        if gid is not None:
            self.stale.add(gid)

    def moved(self, job: Job, frm: str, to: str, now_ms: int) -> None:
        """Grouped ``job`` moved from status ``frm`` to ``to`` at ``now_ms`` (see
        :func:`moved_hook`). In fifo order its group's heap gets it when it is
        pending (due or not: a retry-waiting job is the head and holds its group),
        the group's dead count follows it, and its head is set again; in fair
        order nothing (due jobs reach their groups through the ready heap)."""
        if not self.settings.fifo or job.group is None:
            return
        self.now_ms = max(self.now_ms, now_ms)
        gid = self.names.gid(job.group)
        if to == DEAD or frm == DEAD:
            n = self.dead.get(gid, 0) + (1 if to == DEAD else -1)
            if n > 0:
                self.dead[gid] = n
            else:
                self.dead.pop(gid, None)
        if to == PENDING:
            heapq.heappush(self.heaps.setdefault(gid, []), job.seq)
        if self.refresh is not None:
            self.refresh(gid, now_ms)


def settle_hook(groups: GroupState | None, job: Job) -> None:
    """``job`` leaves claimed (completed, failed, released, cancelled at its end,
    reclaimed, purged): its group holds one fewer. A no-op without groups."""
    if groups is not None:
        groups.settle(job.group)


def left_hook(groups: GroupState | None, job: Job) -> None:
    """``job`` leaves pending other than by a claim (cancelled, spilled out of
    the head; a purge of pending jobs marks every group at once): its group's
    heap may count it until the next stats read drops it
    (:meth:`GroupState.left`). A no-op without groups or for a job not pending."""
    if groups is not None and job.status == PENDING:
        groups.left(job.group)


def moved_hook(groups: GroupState | None, job: Job, frm: str, to: str, now_ms: int) -> None:
    """``job`` (with a group) moved from ``frm`` to ``to`` (a push: from ``"new"``)
    at ``now_ms``: what a fifo group's head and dead count follow
    (:meth:`GroupState.moved`). A no-op without groups."""
    if groups is not None:
        groups.moved(job, frm, to, now_ms)


__all__ = ["NO_GROUP", "GroupState", "held_by_group", "left_hook", "moved_hook", "priority_of",
           "ready_key_of", "settle_hook", "source_key"]
