"""Fair dispatch between groups: which group a claim serves next.

Independent of where jobs live: the caller (the claim, in the segments layer)
keeps each group's jobs and tells this structure each group's **head**, the
job the group would hand out next (:class:`Head`: its priority, an opaque
order key, and when it is due), and what happens to the group (jobs claimed,
:meth:`Dispatch.served`; claimed jobs settled, :meth:`Dispatch.settled`; dead
jobs counted for ``group_dead: "hold"``). It answers :meth:`Dispatch.pick`:
the group to serve next, and how many of its jobs this turn may take.

**Order.** Priority first: a group's turn is at its head's priority. Among
groups at one priority, stride scheduling (start-time fair queueing with
integer passes): the group with the smallest *pass* is served, ties broken
by the head's order key (the oldest job first), then by gid; serving ``n``
jobs of a group advances its pass by ``n * (STRIDE // weight)``, and the
priority's virtual time (``vtime``) becomes the pass the group was served at.
A group that becomes ready (a head after none, a settlement below its
limit, a due time, tokens, a head at another priority) takes
``pass = max(pass, vtime[priority])``: no group banks turns while idle or
parked. So over any stretch in which two groups are both ready at one
priority, their served jobs stay in the ratio of their weights within one
turn. A group's record (and pass) is dropped when it has no head, no held
and no dead job: it comes back as a newcomer at the current virtual time.

**Parking.** A group that may not be served is not in the heap, so skipping
it costs nothing and its head stays its head. States, first match wins:

- ``EMPTY``: no head;
- ``AT_LIMIT``: ``held >= limit`` (fifo: ``limit = min(1, configured)``);
  :meth:`Dispatch.settled` below the limit makes it ready again;
- ``DEAD_HELD``: fifo order with ``group_dead: "hold"`` and a dead job;
- ``NOT_DUE``: its head is due later (a fifo head waiting for its retry or
  delay): woken at the head's due time;
- ``NO_TOKENS``: out of per-group rate tokens: woken at its next token;
- ``READY``: in the heap.

Group 0 (no group) takes part like any group, with weight 1, no limit, no
rate, never fifo.

**Cost.** :meth:`~Dispatch.pick` and every change of a group cost O(log G)
(G: ready groups), plus the stale heap entries they pop (entries are not
removed from the heap but go stale when their group's key changes, as the job
heaps' do; a heap grown past twice its live entries is rebuilt from the live
ones). Nothing is O(groups) per claim; :meth:`~Dispatch.reconfigure` is
O(groups with a record). Without per-group rates a claim's turns run in one
call (:meth:`~Dispatch.serve_turns`) and the heads of the groups its new jobs
reached are told at once (:meth:`~Dispatch.set_heads`): the same turns and
states as :meth:`~Dispatch.pick`, :meth:`~Dispatch.served` and
:meth:`~Dispatch.set_head` one by one, a few calls a job fewer.

**Quantum.** A claim that wants ``w`` jobs while fewer than ``w`` groups are
ready at the top priority takes up to ``q = min(ceil(w / ready), QUANTUM,
limit - held, tokens)`` jobs of the picked group in one turn (its pass
advances by ``q`` turns, so fairness holds).

Derived, never stored; pure: no I/O, no clock (``now_ms`` is passed in).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple

from broker.limits import MAX_PRIORITY
from broker.model.groups.buckets import GroupBuckets
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import GroupSettings

#: A weight-1 group's pass advances by this much a job (a weight-``w`` group's
#: by ``STRIDE // w``); large, so the rounding is below a turn in 2**30 turns.
STRIDE = 1 << 40
#: The most jobs one turn of a group may take.
QUANTUM = 16

EMPTY = "empty"
AT_LIMIT = "at_limit"
DEAD_HELD = "dead_held"
NOT_DUE = "not_due"
NO_TOKENS = "no_tokens"
READY = "ready"
#: The parked states that end at a time (the ``timed`` heap).
TIMED = frozenset({NOT_DUE, NO_TOKENS})

# A heap entry: priority (turned: higher first), pass, order key, gid, in one int.
_GID_BITS = 32
_ORDER_BITS = 128
_PASS_BITS = 96
_ORDER_SHIFT = _GID_BITS
_PASS_SHIFT = _ORDER_SHIFT + _ORDER_BITS
_PRIORITY_SHIFT = _PASS_SHIFT + _PASS_BITS
_GID_MASK = (1 << _GID_BITS) - 1
#: The order keys a head may carry: ``0 <= order < ORDER_LIMIT``.
ORDER_LIMIT = 1 << _ORDER_BITS


class Head(NamedTuple):
    """A group's next job as its caller sees it: its ``priority`` (higher first),
    an ``order`` key (an int in ``[0, ORDER_LIMIT)``, smaller first: e.g.
    :func:`broker.model.indexes.ready_key`, or the seq in fifo order), and
    when it is due (ms; a head due later parks its group until then)."""

    priority: int
    order: int
    due_ms: int


#: :meth:`Dispatch.settled` leaves the head as it was.
KEEP: Head = Head(0, -1, 0)


class GroupView(NamedTuple):
    """One group as :meth:`Dispatch.view` shows it (for stats and tests)."""

    state: str
    held: int
    dead: int
    pass_: int
    weight: int
    limit: int | None
    head: Head | None
    wake_ms: int | None


def _smallest(heap: list[int], n: int, below: int | None) -> Iterator[int]:
    """The entries of ``heap`` in ascending order (those below ``below``, if
    given), read without changing it: a best-first walk from the root. The
    caller stops it; each entry costs O(log) of the entries met."""
    if n <= 0 or not heap:
        return
    frontier = [(heap[0], 0)]
    size = len(heap)
    while frontier:
        key, i = heapq.heappop(frontier)
        if below is not None and key >= below:
            return
        yield key
        for child in (2 * i + 1, 2 * i + 2):  # (a stale entry's children may be live)
            if child < size:
                heapq.heappush(frontier, (heap[child], child))


# The layout of a job's ready key (broker.model.indexes.ready_key: priority turned,
# run-at, seq), for JobHeaps only: this module may not import the indexes (they
# import the state); tests/unit/broker/model/groups holds these to the indexes'.
_SEQ_MASK = (1 << 48) - 1
_TIME_SHIFT = 48
_TIME_MASK = (1 << 48) - 1
_KEY_PRIORITY_SHIFT = 96


class JobHeaps(NamedTuple):
    """What :meth:`Dispatch.serve_turns` takes a turn's jobs from when no ``take``
    is given: the speed trick of a fair claim's turns (every ready group's head
    the top of its heap here, as ``Head(priority of key, key, 0)``), kept to this
    one structure and the loop that reads it: a call and a ``Head`` fewer a turn
    (``bench/groups_model_bench.py --instructions`` counts what that saves: about
    a fiftieth of a grouped job, with the other changes of its pass).

    ``heaps``: gid -> the ready keys of its jobs (a heap; a group whose heap
    empties is dropped from it); ``entries``: seq -> the job, or its line
    (``bytes``) while untouched since its bulk push: a key whose entry is a line
    and whose run-at is due is live as it stands; ``live(heap)``: any other top's
    live check (stale entries popped; the heap's first live, due key, or None);
    ``chosen``: where the taken keys are appended. A turn takes as the
    segments' ``take`` did: up to ``q`` jobs of the head's priority, from the
    head on, and none if the live top is no longer the head."""

    heaps: dict[int, list[int]]
    entries: Mapping[int, object]
    live: Callable[[list[int]], int | None]
    chosen: list[int]


class _Group:
    __slots__ = ("at_p", "dead", "gid", "head", "held", "key", "limit", "pass_", "state",
                 "wake", "weight")

    def __init__(self, gid: int, weight: int, limit: int | None) -> None:
        self.gid = gid
        self.weight = weight
        self.limit = limit
        self.held = 0
        self.dead = 0
        self.pass_ = 0
        self.head: Head | None = None
        self.state = EMPTY
        self.key = -1  # its live heap entry while READY
        self.at_p = 0  # the priority it is counted at in Dispatch._ready_at while READY
        self.wake: int | None = None  # its wake time while NOT_DUE or NO_TOKENS


class Dispatch:
    """The ready structure of one queue's groups (see the module's docstring).

    ``names`` maps gids to names for the settings; gids must be below
    ``2**32``, and a gid this holds (:meth:`holds`) must not be released.
    Only :meth:`pick` and :meth:`advance` wake parked groups whose time has
    come; a change (:meth:`set_head`, :meth:`settled`...) derives the group it
    names at its ``now_ms``. So a caller changes the heads that fell due (its
    ``promote_due``) before it picks: a group's state then depends on its head
    at ``now_ms``, not on the order of the wake-ups within one commit.
    Misuse (serving a group that is not ready, more jobs than its limit or
    tokens allow, settling more than it holds) raises ``ValueError`` and
    changes nothing.
    """

    __slots__ = ("_groups", "_heap", "_parked", "_ready", "_ready_at", "_timed", "_vtime",
                 "buckets", "names", "settings")

    def __init__(self, settings: GroupSettings, names: GroupNames) -> None:
        self.settings = settings
        self.names = names
        rate = settings.rate
        self.buckets: GroupBuckets | None = None if rate is None else GroupBuckets(rate)
        self._groups: dict[int, _Group] = {}
        self._heap: list[int] = []  # READY groups' keys (and stale ones)
        self._ready: set[int] = set()  # gids READY
        self._ready_at: dict[int, int] = {}  # priority -> READY groups there
        self._timed: list[int] = []  # wake_ms << 32 | gid of NOT_DUE, NO_TOKENS (and stale)
        self._parked: set[int] = set()  # gids NOT_DUE or NO_TOKENS with a wake time
        self._vtime: dict[int, int] = {}  # priority -> pass of the last group served there

    # -- reading ---------------------------------------------------------------------

    def view(self, gid: int) -> GroupView | None:
        """Group ``gid``'s record, or None if it has none (no head, held or dead job)."""
        g = self._groups.get(gid)
        if g is None:
            return None
        return GroupView(g.state, g.held, g.dead, g.pass_, g.weight, g.limit, g.head, g.wake)

    def head(self, gid: int) -> Head | None:
        """Group ``gid``'s head as told (None: none, or no record): :meth:`view`'s
        ``head`` without building the view, once a claim's turn
        (``bench/groups_cpu_bench.py``)."""
        g = self._groups.get(gid)
        return None if g is None else g.head

    def gids(self) -> Iterator[int]:
        """The groups with a record (O(groups): for stats and tests, never a claim)."""
        return iter(list(self._groups))

    def holds(self, gid: int) -> bool:
        """Whether ``gid`` is in use here (a record or a token bucket): its name
        must not be released while it is."""
        return gid in self._groups or (self.buckets is not None and gid in self.buckets)

    def in_use(self) -> set[int]:
        """Every gid in use here (:meth:`holds`: a record or a bucket; and any gid
        ready or parked, which has a record): O(those groups), for the sweep of
        unreferenced names (:func:`broker.model.groups.sweep.release_unused`)."""
        used = set(self._groups)
        used.update(self._ready)
        used.update(self._parked)
        if self.buckets is not None:
            used.update(self.buckets)
        return used

    def ready_at(self, priority: int) -> int:
        """How many groups are ready at ``priority``."""
        return self._ready_at.get(priority, 0)

    def next_wakeup_ms(self) -> int | None:
        """When the first parked group wakes (a head falls due, a token comes),
        or None. Drops stale entries from the top of its heap (no other change)."""
        timed = self._timed
        while timed:
            top = timed[0]
            g = self._groups.get(top & _GID_MASK)
            if g is not None and g.state in TIMED and g.wake == top >> _GID_BITS:
                return top >> _GID_BITS
            heapq.heappop(timed)
        return None

    def peek(self, n: int, now_ms: int | None = None) -> list[int]:
        """The gids of the first ``n`` ready groups in pick order, as they stand
        (changes nothing), after, given ``now_ms``, the parked groups a pick at
        ``now_ms`` would wake (their place among the others is not foreseen).
        Best-first walks of the heaps from their roots with a small heap of
        candidates: O(n log n) plus the stale entries met, never O(groups).
        For planning which sources a batch of claims may reach (each group
        once: a group served again in the batch is not foreseen)."""
        groups = self._groups
        out: list[int] = []
        seen: set[int] = set()  # (a head changed and back leaves its key twice)
        if now_ms is not None:
            for key in _smallest(self._timed, n, (now_ms + 1) << _GID_BITS):
                if len(out) >= n:
                    break
                g = groups.get(key & _GID_MASK)
                if g is not None and g.state in TIMED and g.wake == key >> _GID_BITS \
                        and g.gid not in seen:
                    seen.add(g.gid)
                    out.append(g.gid)
        for key in _smallest(self._heap, n, None):
            if len(out) >= n:
                break
            g = groups.get(key & _GID_MASK)
            if g is not None and g.state == READY and g.key == key and g.gid not in seen:
                seen.add(g.gid)
                out.append(g.gid)
        return out

    # -- changes -----------------------------------------------------------------------

    def advance(self, now_ms: int) -> None:
        """Wake the parked groups due at ``now_ms`` (amortized O(log) each)."""
        timed = self._timed
        while timed and timed[0] >> _GID_BITS <= now_ms:
            top = heapq.heappop(timed)
            g = self._groups.get(top & _GID_MASK)
            if g is not None and g.state in TIMED and g.wake == top >> _GID_BITS:
                self._derive(g, now_ms)

    def pick(self, now_ms: int, want: int = 1) -> tuple[int, int] | None:
        """The group to serve next at ``now_ms`` and how many of its jobs this
        turn may take (at least 1; see the quantum), for a claim that wants
        ``want`` more jobs; None if no group is ready. Changes nothing but
        waking due groups, parking a ready one whose head is not due at
        ``now_ms`` (the clock stepped back since) and dropping stale entries:
        the caller then calls :meth:`served` (with 0 jobs if it took none)."""
        self.advance(now_ms)
        heap, groups = self._heap, self._groups
        while heap:
            top = heap[0]
            g = groups.get(top & _GID_MASK)
            if g is None or g.state != READY or g.key != top:
                heapq.heappop(heap)
                continue
            assert g.head is not None  # (READY)
            if g.head.due_ms > now_ms:  # (made ready at a later time: the clock stepped back)
                heapq.heappop(heap)
                self._derive(g, now_ms)  # (parked until its head is due)
                continue
            return g.gid, self._quantum(g, want, now_ms)
        return None

    def _quantum(self, g: _Group, want: int, now_ms: int) -> int:
        assert g.head is not None  # (READY)
        ready = self._ready_at[g.head.priority]
        q = min(QUANTUM, max(1, -(-want // ready)))
        if g.limit is not None:
            q = min(q, g.limit - g.held)
        if self.buckets is not None and g.gid:
            q = min(q, self.buckets.available(g.gid, now_ms))
        return q

    def served(self, gid: int, n: int, head: Head | None, now_ms: int) -> None:
        """``n`` jobs of ready group ``gid`` were claimed at ``now_ms``; ``head``
        is the group's next job now (None: it has none pending)."""
        g = self._groups.get(gid)
        if g is None or g.state != READY:
            raise ValueError(f"group {gid} is not ready: it cannot be served")
        if n < 0 or (g.limit is not None and g.held + n > g.limit):
            raise ValueError(f"group {gid}: {n} jobs would exceed its limit "
                             f"({g.held} held of {g.limit})")
        buckets = self.buckets
        if buckets is not None and gid and buckets.available(gid, now_ms) < n:
            raise ValueError(f"group {gid}: {n} jobs exceed its tokens")
        self._check_head(head)
        if n:
            assert g.head is not None  # (READY)
            p = g.head.priority
            self._vtime[p] = max(self._vtime.get(p, 0), g.pass_)
            g.pass_ += n * (STRIDE // g.weight)
            g.held += n
            if buckets is not None and gid:
                buckets.take(gid, n, now_ms)
        g.head = head
        self._derive(g, now_ms)

    def serve_turns(self, now_ms: int, want: int,
                    take: Callable[[int, int, Head], tuple[int, Head | None]] | None = None,
                    lines: JobHeaps | None = None) -> int:
        """Serve turns at ``now_ms`` until ``want`` jobs are taken or no group is
        ready: the turns a loop of :meth:`pick` and :meth:`served` makes, in the
        same order, to the same state, in one call (a claim of many groups with
        a job or two each spends most of its time between those calls:
        ``bench/groups_cpu_bench.py``). Each turn calls ``take(gid, q, head)``:
        take up to ``q`` (at least 1) of ready group ``gid``'s jobs, whose head
        dispatch holds is ``head``; it answers ``(n, next)``, ``n`` jobs taken
        (0 when its live head is no longer ``head``: the group competes again at
        ``next``) and the group's next head (None: none pending), as
        :meth:`served` is told. Returns the jobs taken in all. Only without
        per-group rates (``buckets`` None) and with heads due when told (fair
        order); ``ValueError`` otherwise, and for a ``take`` answering more than
        ``q`` jobs or a bad head (the turns before it stand).

        ``lines`` (instead of ``take``): the groups' job heaps, each turn's take
        done here as :class:`JobHeaps` describes, without a call a turn."""
        if (take is None) == (lines is None):
            raise ValueError("serve_turns takes jobs by take or from lines: one of them")
        if self.buckets is not None:
            raise ValueError("serve_turns serves no groups with a per-group rate: "
                             "use pick and served")
        self.advance(now_ms)  # (a turn parks no group due by now_ms: once is enough)
        heap, groups, ready_at, vtime = self._heap, self._groups, self._ready_at, self._vtime
        # (bound once a call, not looked up each turn: bench/groups_cpu_bench.py)
        heappop, unready, get, gid_mask = heapq.heappop, self._ready.discard, groups.get, _GID_MASK
        if lines is not None:
            heaps, heaps_get, entries_get = lines.heaps, lines.heaps.get, lines.entries.get
            live, append, new = lines.live, lines.chosen.append, tuple.__new__
        got = 0
        while got < want and heap:
            top = heap[0]
            gid = top & gid_mask
            g = get(gid)
            # (a record's key is -1 outside READY: a key equal to the top is READY's)
            if g is None or g.key != top:
                heappop(heap)
                continue
            head = g.head
            assert head is not None  # (READY)
            if head.due_ms > now_ms:  # (as pick: parked until its head is due)
                heappop(heap)
                self._derive(g, now_ms)
                continue
            p = head.priority
            q = -(-(want - got) // ready_at[p])  # (_quantum, inlined)
            q = QUANTUM if q > QUANTUM else q
            limit = g.limit
            if limit is not None and q > limit - g.held:
                q = limit - g.held
            if lines is None:
                assert take is not None  # (one of them: checked above)
                n, nxt = take(gid, q, head)
                if not 0 <= n <= q or (not n and nxt == head):
                    raise ValueError(f"group {gid}: {n} jobs taken in a turn of at most {q}"
                                     + ("" if n else ", its head unchanged"))
                self._check_head(nxt)
            else:  # (the take JobHeaps describes, written out: no call a turn)
                # (not checked as take's answer is: n is within [0, q] by this loop, 0 only
                # when the live top is not the head, and the next head is a ready key of
                # the group's heap, its priority and order in range as made: the checks'
                # ~20 bytecodes a turn, groups_model_bench --instructions)
                h = heaps_get(gid)
                jt = None
                if h:
                    jt = h[0]
                    if entries_get(jt & _SEQ_MASK).__class__ is not bytes \
                            or (jt >> _TIME_SHIFT) & _TIME_MASK > now_ms:
                        jt = live(h)
                n = 0
                if jt == head.order:
                    assert h is not None  # (a live top)
                    while True:
                        heappop(h)
                        while h and h[0] == jt:  # (a job indexed twice: dropped)
                            heappop(h)
                        append(jt)
                        n += 1
                        jt = h[0] if h else None
                        if jt is not None and (entries_get(jt & _SEQ_MASK).__class__ is not bytes
                                               or (jt >> _TIME_SHIFT) & _TIME_MASK > now_ms):
                            jt = live(h)
                        if jt is None or n >= q or MAX_PRIORITY - (jt >> _KEY_PRIORITY_SHIFT) != p:
                            break
                if jt is None:  # (its heap is empty)
                    heaps.pop(gid, None)
                    nxt = None
                else:
                    nxt = new(Head, (MAX_PRIORITY - (jt >> _KEY_PRIORITY_SHIFT), jt, 0))
            if n:
                v = vtime.get(p)
                if v is None or v < g.pass_:
                    vtime[p] = g.pass_
                g.pass_ += n * (STRIDE // g.weight)
                g.held += n
                got += n
            g.head = nxt
            if nxt is None:  # (READY -> EMPTY: _derive(), inlined)
                heappop(heap)  # (its entry, still the top)
                unready(gid)
                ready_at[g.at_p] -= 1
                g.state, g.wake, g.key = EMPTY, None, -1
                if not g.held and not g.dead:
                    del groups[gid]
                continue
            if limit is not None and g.held >= limit:  # (READY -> AT_LIMIT: _derive(), inlined)
                heappop(heap)  # (its entry, still the top)
                unready(gid)
                ready_at[g.at_p] -= 1
                g.state, g.wake, g.key = AT_LIMIT, None, -1
                continue
            if nxt.due_ms > now_ms or (g.dead and gid and self.settings.holds_dead):
                self._derive(g, now_ms)  # (it leaves the heap)
                continue
            # (_derive of a ready group staying ready, inlined)
            np = nxt.priority
            if np != p:
                ready_at[p] -= 1
                ready_at[np] = ready_at.get(np, 0) + 1
                g.at_p = np
            pass_ = g.pass_
            v = vtime.get(np, 0)
            if v > pass_:
                g.pass_ = pass_ = v
            key = (((MAX_PRIORITY - np) << _PRIORITY_SHIFT) | (pass_ << _PASS_SHIFT)
                   | (nxt.order << _ORDER_SHIFT) | gid)
            if key != top:
                g.key = key
                heapq.heapreplace(heap, key)  # (its old entry is the top: replaced, not left stale)
        return got

    def settled(self, gid: int, n: int, now_ms: int, head: Head | None = KEEP,
                dead: int | None = None) -> None:
        """``n`` held jobs of group ``gid`` were settled (completed, failed,
        released, cancelled, reclaimed) at ``now_ms``; ``head``: its next job
        now, if that changed (a failed fifo job waiting for its retry is the
        head again); ``dead``: its count of dead jobs, if that changed."""
        g = self._groups.get(gid)
        held = 0 if g is None else g.held
        if not 0 <= n <= held:
            raise ValueError(f"group {gid} holds {held} jobs: {n} cannot be settled")
        self._check_dead(dead)
        if head is not KEEP:
            self._check_head(head)
        if g is None:  # (n == 0)
            if (head is KEEP or head is None) and not dead:
                return
            g = self._record(gid)
        g.held -= n
        self._update(g, head, dead, now_ms)

    def settled_one(self, gid: int, now_ms: int) -> None:
        """:meth:`settled` of one job with head and dead count unchanged:
        :meth:`settled_many` of one."""
        self.settled_many((gid,), now_ms)

    def settled_many(self, gids: Iterable[int], now_ms: int) -> None:
        """:meth:`settled` of one job of each of ``gids`` in turn, head and dead
        count unchanged: what the settled jobs of an operation ask, in one call
        (``groups_model_bench --instructions``). A group whose state one fewer
        held cannot change (empty; or ready, so below its limit, at a pass its
        priority's virtual time has not passed) only counts it here; any other
        with a held job is re-derived as :meth:`settled` would (head and dead
        count kept), one without goes through it (which refuses: ``ValueError``,
        the gids before it settled): the same result either way."""
        groups, vtime = self._groups, self._vtime
        get, empty, ready = groups.get, EMPTY, READY
        for gid in gids:
            g = get(gid)
            if g is not None and g.held:
                state = g.state
                if state == empty:
                    g.held -= 1
                    if not g.held and not g.dead:
                        del groups[gid]
                    continue
                if state == ready and vtime.get(g.at_p, 0) <= g.pass_:
                    g.held -= 1
                    continue
                g.held -= 1  # (settled()'s checks hold: a held job, head and dead count kept)
                self._derive(g, now_ms)
                continue
            self.settled(gid, 1, now_ms)

    def hold(self, gid: int, n: int, now_ms: int) -> None:
        """``n`` more jobs of group ``gid`` are held, found rather than served (the
        counts rebuilt from the claim records on load): its pass does not move."""
        if n < 0:
            raise ValueError(f"group {gid} cannot hold {n} more jobs")
        g = self._groups.get(gid)
        if g is None:
            if not n:
                return
            g = self._record(gid)
        g.held += n
        self._derive(g, now_ms)

    def set_head(self, gid: int, head: Head | None, now_ms: int,
                 dead: int | None = None) -> None:
        """Group ``gid``'s next job is now ``head`` (None: none pending), e.g.
        after a push, a due time, a cancel; ``dead``: its count of dead jobs,
        if that changed (fifo with ``group_dead: "hold"`` stops on them)."""
        self._check_head(head)
        self._check_dead(dead)
        g = self._groups.get(gid)
        if g is None:
            if head is None and not dead:
                return
            g = self._record(gid)
        self._update(g, head, dead, now_ms)

    def set_heads(self, heads: Iterable[tuple[int, Head]], now_ms: int) -> None:
        """:meth:`set_head` of each ``(gid, head)`` in turn (a head, never None;
        dead counts unchanged): what a claim tells of the groups its new jobs
        reached. A group without a record or with no head before that becomes
        ready is made so here, without the general re-derivation (one such
        group for each group with new jobs after a claim emptied them:
        ``bench/groups_cpu_bench.py``); any other goes through :meth:`set_head`,
        the same result either way. The heads are a claim's: ready keys of its
        groups' heaps (``Head(priority of key, key, 0)``), in range as made, so
        the fast path checks only the gid; a head given to :meth:`set_head`
        (a group not like the others, one not empty, a head not due) is
        checked there. ``ValueError`` for a bad gid (the heads before it
        stand)."""
        groups, settings, heap, ready = self._groups, self.settings, self._heap, self._ready
        ready_at, vtime = self._ready_at, self._vtime
        if self.buckets is not None or settings.weights or settings.limits or settings.fifo:
            for gid, head in heads:  # (groups not all alike, or tokens: the general way)
                self.set_head(gid, head, now_ms)
            return
        plain_limit, push, get = settings.limit, heapq.heappush, groups.get
        new_group = object.__new__
        for gid, head in heads:
            g = get(gid)
            # (the head's priority and order not range-checked: ready keys, in range as
            # made; ~14 bytecodes a grouped job, groups_model_bench --instructions)
            if head is None or (g is not None and g.state != EMPTY) or head.due_ms > now_ms \
                    or not 0 < gid <= _GID_MASK:
                self.set_head(gid, head, now_ms)
                heap = self._heap  # (set_head may have rebuilt it: push into the live one)
                continue
            if g is None:  # (_record(), for a queue whose settings name no group)
                # (_Group() with its fields set here, not by its __init__'s call: a
                # record made a grouped job here, groups_model_bench --instructions)
                g = groups[gid] = new_group(_Group)
                g.gid, g.weight, g.limit, g.held, g.dead, g.pass_, g.head, g.state, g.key, \
                    g.at_p, g.wake = gid, 1, plain_limit, 0, 0, 0, None, EMPTY, -1, 0, None
            if (g.limit is not None and g.held >= g.limit) or (g.dead and settings.holds_dead):
                self.set_head(gid, head, now_ms)  # (not ready: parked as _derive parks)
                continue
            # (EMPTY -> READY: _derive(), inlined)
            p = head.priority
            g.head = head
            ready.add(gid)
            ready_at[p] = ready_at.get(p, 0) + 1
            g.at_p, g.state = p, READY
            v = vtime.get(p, 0)
            if v > g.pass_:
                g.pass_ = v
            g.key = key = (((MAX_PRIORITY - p) << _PRIORITY_SHIFT) | (g.pass_ << _PASS_SHIFT)
                           | (head.order << _ORDER_SHIFT) | gid)
            push(heap, key)
        if len(heap) > 2 * len(ready) + 64:
            self._heap = [groups[r].key for r in ready]
            heapq.heapify(self._heap)

    def reconfigure(self, settings: GroupSettings, now_ms: int,
                    heads: Mapping[int, Head | None] | None = None) -> None:
        """New settings at ``now_ms``: limits, weights, fifo, dead and rates are
        re-derived for every group with a record (O(those groups)); passes are
        kept. ``heads``: the groups' heads under the new settings, where they
        changed (a change of ``group_order`` changes every grouped head: pass
        them all here, not after, so that no group is ready in between)."""
        for head in (heads or {}).values():
            self._check_head(head)
        for gid, head in (heads or {}).items():
            g = self._groups.get(gid)
            if g is None and head is not None:
                g = self._record(gid)
            if g is not None:
                g.head = head
        self.settings = settings
        rate = settings.rate
        if rate is None:
            self.buckets = None
        elif self.buckets is None:
            self.buckets = GroupBuckets(rate)
        else:
            self.buckets.reconfigure(rate, now_ms)
        for g in list(self._groups.values()):
            name = self.names.name(g.gid)
            g.weight = settings.weight_of(name)
            g.limit = settings.limit_of(name)
            self._derive(g, now_ms)

    def sweep(self, now_ms: int) -> None:
        """Drop the token buckets that have refilled (once per commit; see
        :meth:`broker.model.groups.buckets.GroupBuckets.sweep`)."""
        if self.buckets is not None:
            self.buckets.sweep(now_ms)

    # -- inside ------------------------------------------------------------------------

    @staticmethod
    def _check_head(head: Head | None) -> None:
        if head is not None and not (
                -MAX_PRIORITY <= head.priority <= MAX_PRIORITY and 0 <= head.order < ORDER_LIMIT):
            raise ValueError(f"a head needs a priority within +-{MAX_PRIORITY} and an order key "
                             f"within [0, 2**{_ORDER_BITS}), got {head!r}")

    @staticmethod
    def _check_dead(dead: int | None) -> None:
        if dead is not None and dead < 0:
            raise ValueError(f"a group's dead jobs cannot be {dead}")

    def _record(self, gid: int) -> _Group:
        if not 0 <= gid <= _GID_MASK:
            raise ValueError(f"group id {gid} is not within [0, 2**{_GID_BITS})")
        name = self.names.name(gid)
        g = self._groups[gid] = _Group(gid, self.settings.weight_of(name),
                                       self.settings.limit_of(name))
        return g

    def _update(self, g: _Group, head: Head | None, dead: int | None, now_ms: int) -> None:
        if head is not KEEP:
            g.head = head
        if dead is not None:
            g.dead = dead
        self._derive(g, now_ms)

    def _state(self, g: _Group, now_ms: int) -> tuple[str, int | None]:
        head = g.head
        if head is None:
            return EMPTY, None
        if g.limit is not None and g.held >= g.limit:
            return AT_LIMIT, None
        if g.dead and g.gid and self.settings.holds_dead:
            return DEAD_HELD, None
        if head.due_ms > now_ms:
            return NOT_DUE, head.due_ms
        buckets = self.buckets
        if buckets is not None and g.gid and buckets.available(g.gid, now_ms) < 1:
            return NO_TOKENS, buckets.next_token_ms(g.gid, now_ms)
        return READY, None

    def _derive(self, g: _Group, now_ms: int) -> None:
        """Put ``g`` in the state its head, counts and tokens call for at ``now_ms``."""
        state, wake = self._state(g, now_ms)
        was, gid = g.state, g.gid
        if state == READY:
            head = g.head
            assert head is not None  # (READY)
            p = head.priority
            ready_at = self._ready_at
            if was != READY:
                self._parked.discard(gid)
                self._ready.add(gid)
                ready_at[p] = ready_at.get(p, 0) + 1
            elif g.at_p != p:
                ready_at[g.at_p] -= 1
                ready_at[p] = ready_at.get(p, 0) + 1
            g.at_p, g.state, g.wake = p, READY, None
            vtime = self._vtime.get(p, 0)
            if vtime > g.pass_:
                g.pass_ = vtime
            key = (((MAX_PRIORITY - p) << _PRIORITY_SHIFT) | (g.pass_ << _PASS_SHIFT)
                   | (head.order << _ORDER_SHIFT) | gid)
            if key != g.key or was != READY:
                g.key = key
                heap = self._heap
                heapq.heappush(heap, key)
                if len(heap) > 2 * len(self._ready) + 64:
                    groups = self._groups
                    self._heap = [groups[r].key for r in self._ready]
                    heapq.heapify(self._heap)
            return
        if was == READY:
            self._ready.discard(gid)
            self._ready_at[g.at_p] -= 1
        else:
            self._parked.discard(gid)
        g.state, g.wake, g.key = state, wake, -1
        if wake is not None:  # (NOT_DUE, NO_TOKENS)
            self._parked.add(gid)
            heapq.heappush(self._timed, (wake << _GID_BITS) | gid)
            if len(self._timed) > 2 * len(self._parked) + 64:
                groups = self._groups
                self._timed = [(groups[t].wake << _GID_BITS) | t  # type: ignore[operator]
                               for t in self._parked]
                heapq.heapify(self._timed)
        elif state == EMPTY and not g.held and not g.dead:
            del self._groups[gid]
