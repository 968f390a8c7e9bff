"""Group dispatch (broker.model.groups.dispatch): fairness by weight, the
ten small tenants behind a large one at the dispatch level, parking at the limit without
scanning, wake-ups, the quantum, and misuse refused without a change."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.groups.dispatch import (
    AT_LIMIT,
    DEAD_HELD,
    NO_TOKENS,
    NOT_DUE,
    QUANTUM,
    READY,
    Dispatch,
    Head,
)
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import GroupSettings, parse_group_settings

T0 = 1_000


class Tenants:
    """The caller's side for tests: per group, a count of due jobs of one
    priority, oldest first (order keys are a global push counter)."""

    def __init__(self, raw: dict[str, object] | None = None) -> None:
        self.names = GroupNames()
        self.settings = parse_group_settings(raw or {}, "test")
        self.d = Dispatch(self.settings, self.names)
        # gid -> its order keys, as the ranges its pushes took (a push of a million
        # keys is one range, not a million ints to build and shift)
        self.queued: dict[int, deque[range]] = {}
        self.counter = 0
        self.picks: list[int] = []

    def push(self, group: str | None, n: int, priority: int = 0) -> int:
        gid = self.names.gid(group)
        keys = self.queued.setdefault(gid, deque())
        keys.append(range(self.counter, self.counter + n))
        self.counter += n
        self.d.set_head(gid, Head(priority, keys[0][0], T0), T0)
        return gid

    def head(self, gid: int, priority: int = 0) -> Head | None:
        keys = self.queued.get(gid)
        return Head(priority, keys[0][0], T0) if keys else None

    def take(self, gid: int, n: int) -> int:
        """Takes up to ``n`` of ``gid``'s oldest keys; how many it took."""
        keys, taken = self.queued[gid], 0
        while taken < n and keys:
            first = keys[0]
            k = min(n - taken, len(first))
            if k == len(first):
                keys.popleft()
            else:
                keys[0] = first[k:]
            taken += k
        return taken

    def claim(self, want: int, now: int = T0) -> list[int]:
        got: list[int] = []
        while len(got) < want:
            pick = self.d.pick(now, want - len(got))
            if pick is None:
                break
            gid, q = pick
            n = self.take(gid, q)
            self.d.served(gid, n, self.head(gid), now)
            got += [gid] * n
        self.picks += got
        return got


@settings(deadline=None, max_examples=60)
@given(w1=st.integers(1, 1000), w2=st.integers(1, 1000), turns=st.integers(1, 2_000))
def test_two_backlogged_groups_are_served_in_the_ratio_of_their_weights_within_one_turn(
        w1: int, w2: int, turns: int) -> None:
    t = Tenants({"group_weights": {"a": w1, "b": w2}})
    a, b = t.push("a", turns + 1), t.push("b", turns + 1)  # (backlogged through every turn)
    for _ in range(turns):
        t.claim(1)  # one job a claim: turns of one job (a claim of more takes quanta)
    n1, n2 = t.picks.count(a), t.picks.count(b)
    assert n1 + n2 == turns
    # n1 / w1 and n2 / w2 (turns of each, in weight-1 units) differ by at most one turn
    assert abs(n1 * w2 - n2 * w1) <= max(w1, w2)


@pytest.mark.parametrize("batch", [1, 16, 100])
def test_ten_small_tenants_behind_a_backlog_of_100000_are_served_within_11_x_100_picks(
        batch: int) -> None:
    t = Tenants()
    big = t.push("A", 100_000)
    small = {t.push(name, 100) for name in "BCDEFGHIJK"}
    remaining = 1_000
    while remaining:
        got = t.claim(batch)
        remaining -= sum(1 for gid in got if gid in small)
    assert len(t.picks) <= 11 * 100 + batch
    assert t.picks.count(big) <= 100 + batch


def test_a_backlogged_tenant_served_alone_for_long_gets_no_less_than_its_share_after() -> None:
    t = Tenants()
    big = t.push("A", 100_000)
    t.claim(50_000)  # A alone: its pass runs far ahead of 0
    small = t.push("B", 1_000)
    picks = [gid for _ in range(200) for gid in t.claim(1)]
    # B comes in at the current virtual time (A's last turn's start: at most one quantum
    # behind A), then turns alternate: B is not owed 50,000 turns
    assert big in picks[:QUANTUM + 1]
    assert abs(picks.count(small) - picks.count(big)) <= QUANTUM
    assert picks[-4:] in ([small, big] * 2, [big, small] * 2)
    batched = t.claim(200)  # in quanta: one quantum apart at most
    assert abs(batched.count(small) - batched.count(big)) <= QUANTUM


def test_jobs_without_a_group_are_one_group_in_the_rotation() -> None:
    t = Tenants()
    none, a = t.push(None, 1_000), t.push("a", 1_000)
    assert none == 0
    picks = t.claim(100)
    assert picks.count(none) == picks.count(a) == 50


def test_priority_comes_before_turns() -> None:
    t = Tenants()
    low = t.push("low", 10, priority=0)
    high = t.push("high", 3, priority=5)
    t.d.set_head(high, t.head(high, 5), T0)
    got = []
    for _ in range(3):
        pick = t.d.pick(T0)
        assert pick is not None
        gid, _q = pick
        got.append(gid)
        assert t.take(gid, 1) == 1
        t.d.served(gid, 1, t.head(gid, 5) if gid == high else t.head(gid), T0)
    assert got == [high] * 3 and t.d.pick(T0) == (low, 1)


def test_a_group_at_its_limit_is_parked_and_a_settlement_makes_it_ready() -> None:
    t = Tenants({"group_limit": 2})
    a, b = t.push("a", 10), t.push("b", 10)
    assert t.claim(10) == [a, a, b, b]  # a quantum of two each, then both at their limit
    assert t.d.view(a).state == AT_LIMIT and t.d.pick(T0) is None  # type: ignore[union-attr]
    t.d.settled(a, 1, T0 + 5)
    assert t.d.view(a).state == READY and t.d.pick(T0 + 5) == (a, 1)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="cannot be settled"):
        t.d.settled(b, 3, T0 + 5)
    assert t.d.view(b).held == 2  # type: ignore[union-attr]


def test_parked_groups_are_not_in_the_heap_and_a_pick_never_looks_at_them() -> None:
    t = Tenants({"group_limit": 1})
    parked = [t.push(f"g{i}", 2) for i in range(10_000)]
    assert len(t.claim(10_000)) == 10_000  # each group: one job, then at its limit
    assert all(t.d.view(g).state == AT_LIMIT for g in parked)  # type: ignore[union-attr]
    free = t.push(None, 5)
    assert t.d.pick(T0) == (free, 1)
    assert len(t.d._heap) <= 2 * 1 + 64  # stale entries compacted, parked ones never pushed


def test_a_fifo_group_holds_one_job_and_a_head_not_due_parks_it_until_due() -> None:
    names = GroupNames()
    d = Dispatch(parse_group_settings({"group_order": "fifo"}, "test"), names)
    a = names.gid("a")
    d.set_head(a, Head(0, 1, T0), T0)
    assert d.pick(T0, 10) == (a, 1)  # fifo: min(1, unlimited)
    d.served(a, 1, Head(0, 2, T0), T0)
    assert d.view(a).state == AT_LIMIT  # type: ignore[union-attr]
    d.settled(a, 1, T0 + 1, head=Head(0, 1, T0 + 500))  # failed: the head again, retry later
    assert d.view(a).state == NOT_DUE and d.next_wakeup_ms() == T0 + 500  # type: ignore[union-attr]
    assert d.pick(T0 + 499) is None
    assert d.pick(T0 + 500) == (a, 1)


def test_a_dead_job_holds_a_fifo_group_with_dead_hold_only() -> None:
    names = GroupNames()
    hold = parse_group_settings({"group_order": "fifo", "group_dead": "hold"}, "test")
    d = Dispatch(hold, names)
    a = names.gid("a")
    d.set_head(a, Head(0, 2, T0), T0, dead=1)
    assert d.view(a).state == DEAD_HELD and d.pick(T0) is None  # type: ignore[union-attr]
    d.reconfigure(parse_group_settings({"group_order": "fifo"}, "test"), T0)  # skip
    assert d.pick(T0) == (a, 1)
    d.reconfigure(hold, T0)
    d.set_head(a, Head(0, 2, T0), T0, dead=0)  # redriven, purged or cancelled
    assert d.pick(T0) == (a, 1)


def test_a_group_out_of_tokens_waits_for_its_next_token() -> None:
    t = Tenants({"group_rate_per_s": 2.0, "group_burst": 3})
    a, b = t.push("a", 10), t.push(None, 10)
    assert t.d.pick(T0, 10) == (a, 3)  # the quantum is capped by the tokens
    assert t.claim(10).count(a) == 3
    assert t.d.view(a).state == NO_TOKENS  # type: ignore[union-attr]
    assert t.d.next_wakeup_ms() == T0 + 500
    assert t.d.pick(T0 + 499) == (b, 1) and t.d.view(a).state == NO_TOKENS  # type: ignore[union-attr]
    t.d.advance(T0 + 500)
    assert t.d.view(a).state == READY and t.d.pick(T0 + 500, 10) in ((a, 1), (b, 5))  # type: ignore[union-attr]


def test_the_quantum_divides_a_claim_among_the_ready_groups() -> None:
    t = Tenants({"group_limits": {"a": 3}})
    a, b = t.push("a", 100), t.push("b", 100)
    assert sorted([t.d.pick(T0, 10)[1], t.d.pick(T0, 100)[1]]) == [3, 3]  # type: ignore[index]
    t.d.served(a, 3, t.head(a), T0)
    assert t.d.pick(T0, 100) == (b, QUANTUM)
    assert t.d.pick(T0, 3) == (b, 3)


def test_serving_past_the_limit_or_a_parked_group_is_refused_and_changes_nothing() -> None:
    t = Tenants({"group_limit": 2})
    a = t.push("a", 5)
    before = t.d.view(a)
    with pytest.raises(ValueError, match="exceed its limit"):
        t.d.served(a, 3, t.head(a), T0)
    assert t.d.view(a) == before
    t.d.served(a, 2, t.head(a), T0)
    with pytest.raises(ValueError, match="not ready"):
        t.d.served(a, 1, t.head(a), T0)
    with pytest.raises(ValueError, match="order key"):
        t.d.set_head(a, Head(0, -5, T0), T0)


def test_a_group_with_nothing_left_is_forgotten_and_its_name_may_be_released() -> None:
    t = Tenants()
    a = t.push("a", 1)
    t.claim(1)
    assert t.d.holds(a) and t.d.view(a).held == 1  # type: ignore[union-attr]
    t.d.settled(a, 1, T0)
    assert t.d.view(a) is None and not t.d.holds(a)
    t.names.release(a)
    assert t.names.gid("z") == a and t.d.view(a) is None


def test_changing_the_limit_reparks_and_wakes_groups() -> None:
    t = Tenants({"group_limit": 1})
    a = t.push("a", 5)
    t.claim(5)
    assert t.d.view(a).state == AT_LIMIT  # type: ignore[union-attr]
    t.d.reconfigure(GroupSettings(), T0)
    assert t.d.view(a).state == READY and t.d.view(a).limit is None  # type: ignore[union-attr]
    t.d.reconfigure(parse_group_settings({"group_limits": {"a": 0}}, "test"), T0)
    assert t.d.view(a).state == AT_LIMIT and t.d.pick(T0) is None  # type: ignore[union-attr]


def test_stale_entries_do_not_grow_the_heaps_without_bound() -> None:
    t = Tenants()
    a = t.push("a", 1)
    for i in range(10_000):
        t.d.set_head(a, Head(i % 7, i, T0 + (i % 2) * 10**9), T0)  # ready, parked, ready...
    assert len(t.d._heap) <= 2 + 64 and len(t.d._timed) <= 2 + 64
