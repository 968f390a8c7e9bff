"""Dispatch.serve_turns (broker.model.groups.dispatch): the turns of a claim in
one call make the same turns, in the same order, and leave dispatch in the same
state (every group's state, held count, pass, head; the picks that follow) as
the loop of :meth:`Dispatch.pick` and :meth:`Dispatch.served` a claim used to
run, whatever the weights, limits, priorities, heads due later, stale heads
(a job gone since its group's head was told) and jobs held; and it refuses
what it cannot serve (per-group rates) or a caller's answer it cannot take."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.limits import MAX_PRIORITY
from broker.model.groups import dispatch
from broker.model.groups.dispatch import STRIDE, Dispatch, GroupView, Head, JobHeaps
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import parse_group_settings
from broker.model.indexes import SEQ_BITS, SEQ_MASK, TIME_BITS, TIME_MASK, ready_key

T0 = 10_000
NAMES = [None, "a", "b", "c", "d"]

# (kind, group, priority, count): push jobs into a group, tell dispatch its head
# (due now or later), drop a job without telling (its head goes stale), hold
# jobs found rather than served, settle one.
steps_st = st.lists(st.tuples(st.sampled_from(["push", "push", "later", "stale", "hold",
                                               "settle"]),
                              st.sampled_from(NAMES), st.sampled_from([0, 0, 1, 3]),
                              st.integers(1, 4)),
                    max_size=40)


class Jobs:
    """The caller's side: each group's pending jobs as heads, smallest order first."""

    def __init__(self) -> None:
        self.of: dict[int, list[Head]] = {}
        self.n = 0

    def push(self, gid: int, priority: int, count: int, due_ms: int) -> None:
        for _ in range(count):
            self.n += 1
            order = ((MAX_PRIORITY - priority) << 40) | self.n
            self.of.setdefault(gid, []).append(Head(priority, order, due_ms))
        self.of[gid].sort(key=lambda h: h.order)

    def head(self, gid: int) -> Head | None:
        jobs = self.of.get(gid)
        return jobs[0] if jobs else None

    def take(self, gid: int, q: int, head: Head,
             log: list[tuple[int, int]]) -> tuple[int, Head | None]:
        """Up to ``q`` jobs of ``head``'s priority, if ``head`` is still the live one."""
        jobs = self.of.get(gid, [])
        n = 0
        if jobs and jobs[0] == head:
            while jobs and n < q and jobs[0].priority == head.priority:
                jobs.pop(0)
                n += 1
        log.append((gid, n))
        return n, self.head(gid)


def _new(raw: dict[str, object]) -> tuple[Dispatch, Jobs]:
    names = GroupNames()
    for name in NAMES:
        names.gid(name)
    return Dispatch(parse_group_settings(raw, "test"), names), Jobs()


def _steps(d: Dispatch, jobs: Jobs, steps: list[tuple[str, str | None, int, int]],
           now_ms: int) -> None:
    for kind, name, priority, count in steps:
        gid = d.names.gid(name)
        if kind in ("push", "later"):
            jobs.push(gid, priority, count, now_ms + 50 if kind == "later" else 0)
            d.set_head(gid, jobs.head(gid), now_ms)
        elif kind == "stale" and jobs.of.get(gid):
            jobs.of[gid].pop(0)  # (dispatch not told: the next turn finds it stale)
        elif kind == "hold":
            d.hold(gid, 1, now_ms)
        elif kind == "settle":
            view = d.view(gid)
            if view is not None and view.held:
                d.settled(gid, 1, now_ms)


def _loop(d: Dispatch, jobs: Jobs, want: int, now_ms: int, log: list[tuple[int, int]]) -> int:
    """The reference: the claim's loop of pick and served."""
    got = 0
    while got < want:
        picked = d.pick(now_ms, want - got)
        if picked is None:
            break
        gid, q = picked
        told = d.head(gid)
        assert told is not None
        n, nxt = jobs.take(gid, q, told, log)
        d.served(gid, n, nxt, now_ms)
        got += n
    return got


def _seen(d: Dispatch, names: GroupNames, now_ms: int) -> tuple[list[GroupView | None], object]:
    return [d.view(names.gid(name)) for name in NAMES], d.peek(len(NAMES), now_ms)


@settings(max_examples=300, deadline=None)
@given(limit=st.sampled_from([None, 1, 2]), weight_a=st.integers(1, 3),
       rounds=st.lists(st.tuples(steps_st, st.integers(1, 12)), min_size=1, max_size=4),
       later=st.sampled_from([0, 0, 60]))
def test_serve_turns_makes_the_turns_of_the_pick_and_served_loop(
        limit: int | None, weight_a: int,
        rounds: list[tuple[list[tuple[str, str | None, int, int]], int]], later: int) -> None:
    raw: dict[str, object] = {"group_weights": {"a": weight_a}}
    if limit is not None:
        raw["group_limit"] = limit
    loop_d, loop_jobs = _new(raw)
    bulk_d, bulk_jobs = _new(raw)
    for i, (steps, want) in enumerate(rounds):
        now = T0 + i * later
        _steps(loop_d, loop_jobs, steps, now)
        _steps(bulk_d, bulk_jobs, steps, now)
        loop_log: list[tuple[int, int]] = []
        bulk_log: list[tuple[int, int]] = []
        got = _loop(loop_d, loop_jobs, want, now, loop_log)
        assert bulk_d.serve_turns(now, want, lambda g, q, h, log=bulk_log:
                                  bulk_jobs.take(g, q, h, log)) == got
        assert bulk_log == loop_log
        assert bulk_jobs.of == loop_jobs.of
        assert _seen(bulk_d, loop_d.names, now) == _seen(loop_d, loop_d.names, now)


def test_serve_turns_catches_a_group_up_to_the_virtual_time_of_its_next_priority() -> None:
    """A group served at one priority whose next job is at another, whose virtual
    time has passed the group's pass, competes there at that time (as served())."""
    logs: dict[str, list[tuple[int, int]]] = {"loop": [], "bulk": []}
    seen = {}
    for mode, log in logs.items():
        d, jobs = _new({})
        _steps(d, jobs, [("push", "b", 0, 4), ("push", "c", 0, 4)], T0)
        for want in (2, 2, 2, 1):  # (b and c take turns: priority 0's virtual time moves on)
            if want == 1:
                _steps(d, jobs, [("push", "a", 3, 1), ("push", "a", 0, 1)], T0)
            if mode == "loop":
                _loop(d, jobs, want, T0, log)
            else:
                d.serve_turns(T0, want, lambda g, q, h, d=d, jobs=jobs, log=log:
                              jobs.take(g, q, h, log))
        seen[mode] = _seen(d, d.names, T0)
    assert logs["bulk"] == logs["loop"]
    assert seen["bulk"] == seen["loop"]
    a = seen["bulk"][0][1]
    assert a is not None and a.pass_ == 2 * STRIDE  # (caught up from STRIDE)


def test_serve_turns_refuses_a_dispatch_with_per_group_rates() -> None:
    names = GroupNames()
    d = Dispatch(parse_group_settings({"group_rate_per_s": 1}, "test"), names)
    d.set_head(names.gid("a"), Head(0, 1, 0), T0)
    with pytest.raises(ValueError, match="per-group rate"):
        d.serve_turns(T0, 1, lambda g, q, h: (1, None))
    assert d.view(names.gid("a")) == GroupView("ready", 0, 0, 0, 1, None, Head(0, 1, 0), None)


@pytest.mark.parametrize("answer", [(2, None), (-1, None), (0, Head(0, 1, 0))])
def test_serve_turns_refuses_an_answer_it_cannot_take(answer: tuple[int, Head | None]) -> None:
    names = GroupNames()
    d = Dispatch(parse_group_settings({}, "test"), names)
    gid = names.gid("a")
    d.set_head(gid, Head(0, 1, 0), T0)
    d.set_head(names.gid("b"), Head(0, 2, 0), T0)  # (two ready, want 1: a turn of one job)
    before = d.view(gid)
    with pytest.raises(ValueError, match="jobs taken in a turn"):
        d.serve_turns(T0, 1, lambda g, q, h: answer)
    assert d.view(gid) == before


def test_job_heaps_read_ready_keys_laid_out_as_the_indexes_make_them() -> None:
    assert (dispatch._SEQ_MASK, dispatch._TIME_SHIFT, dispatch._TIME_MASK,
            dispatch._KEY_PRIORITY_SHIFT) == (SEQ_MASK, SEQ_BITS, TIME_MASK, SEQ_BITS + TIME_BITS)
    key = ready_key(-3, 1_767_225_600_123, 42)
    assert key & dispatch._SEQ_MASK == 42
    assert (key >> dispatch._TIME_SHIFT) & dispatch._TIME_MASK == 1_767_225_600_123
    assert MAX_PRIORITY - (key >> dispatch._KEY_PRIORITY_SHIFT) == -3


def test_serve_turns_takes_jobs_by_take_or_from_lines_one_of_them() -> None:
    names = GroupNames()
    d = Dispatch(parse_group_settings({}, "test"), names)
    d.set_head(names.gid("a"), Head(0, 1, 0), T0)
    before = d.view(names.gid("a"))
    lines = JobHeaps({}, {}, lambda heap: None, [])
    for take, given_lines in ((None, None), (lambda g, q, h: (1, None), lines)):
        with pytest.raises(ValueError, match="one of them"):
            d.serve_turns(T0, 1, take, given_lines)
    assert d.view(names.gid("a")) == before


_LIVE, _STALE = "job", "gone"  # (an entry that is no line: live or gone; bytes: a line)
# (group, priority, due later, what its entry is): a job of a fair queue's group
jobs_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from([0, 0, 2]),
                             st.sampled_from([False, False, False, True]),
                             st.sampled_from(["line", "line", "line", _LIVE, _STALE])),
                   max_size=40)


@settings(max_examples=300, deadline=None)
@given(jobs=jobs_st, stale_heads=st.lists(st.integers(0, 39), max_size=4),
       want=st.integers(1, 30), limit=st.sampled_from([None, 1, 2]))
def test_serve_turns_from_lines_takes_as_the_take_it_inlines(
        jobs: list[tuple[str, int, bool, str]], stale_heads: list[int], want: int,
        limit: int | None) -> None:
    """The turns read from JobHeaps (a take without a call a turn) against a take
    written plainly from its description: the same jobs in the same order, the
    same heaps left, every group's record the same, with stale entries and jobs
    due later inside a group's heap, heads gone stale since told, and limits."""
    now = 1_767_225_600_000
    raw = {} if limit is None else {"group_limit": limit}
    names = GroupNames()
    twins = [Dispatch(parse_group_settings(raw, "test"), names) for _ in "12"]
    entries: dict[int, object] = {}
    heaps: list[dict[int, list[int]]] = [{}, {}]
    for seq, (name, priority, later, kind) in enumerate(jobs, 1):
        entries[seq] = b"{}" if kind == "line" else kind
        for h in heaps:
            h.setdefault(names.gid(name), []).append(
                ready_key(priority, now + 50 if later else now - 5, seq))
    for h in heaps:
        for heap in h.values():
            heapq.heapify(heap)

    def due(key: int) -> bool:
        return entries[key & SEQ_MASK] != _STALE and (key >> SEQ_BITS) & TIME_MASK <= now

    def live(heap: list[int]) -> int | None:
        while heap and not due(heap[0]):
            heapq.heappop(heap)
        return heap[0] if heap else None

    for h, d in zip(heaps, twins, strict=True):
        for gid, heap in list(h.items()):
            top = live(heap)
            if top is None:
                del h[gid]
            else:
                d.set_head(gid, Head(MAX_PRIORITY - (top >> (SEQ_BITS + TIME_BITS)), top, 0), now)
    for i in stale_heads:  # (gone since their groups' heads were told)
        if i < len(jobs):
            entries[i + 1] = _STALE
    chosen: list[list[int]] = [[], []]

    def take(gid: int, q: int, head: Head) -> tuple[int, Head | None]:
        heap = heaps[1].get(gid)
        top = None if heap is None else live(heap)
        n = 0
        if top is not None and top == head.order:
            assert heap is not None
            while top is not None and n < q and \
                    MAX_PRIORITY - (top >> (SEQ_BITS + TIME_BITS)) == head.priority:
                while heap and heap[0] == top:
                    heapq.heappop(heap)
                chosen[1].append(top)
                n += 1
                top = live(heap)
        if top is None:
            heaps[1].pop(gid, None)
            return n, None
        return n, Head(MAX_PRIORITY - (top >> (SEQ_BITS + TIME_BITS)), top, 0)

    got = twins[0].serve_turns(now, want, lines=JobHeaps(heaps[0], entries, live, chosen[0]))
    assert twins[1].serve_turns(now, want, take) == got
    assert chosen[0] == chosen[1] and len(chosen[0]) == got
    assert heaps[0] == heaps[1]
    for gid in {names.gid(name) for name, *_ in jobs}:
        assert twins[0].view(gid) == twins[1].view(gid)
