"""Dispatch.set_heads (broker.model.groups.dispatch): telling many groups' heads
at once (new groups made ready on its fast path) leaves dispatch exactly as
:meth:`Dispatch.set_head` of each in turn does: every group's state, held
count, pass, weight, limit and head, and the picks that follow, whatever the
settings (limits, 0 among them; weights; fifo; dead jobs held; rates), heads
due later, groups held, served and settled between."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.model.groups.dispatch import Dispatch, GroupView, Head
from broker.model.groups.names import GroupNames
from tests.support.dispatch_twins import dispatch_twins

T0 = 10_000
NAMES = [None, "a", "b", "c", "d"]
SETTINGS: list[dict[str, Any]] = [
    {}, {"group_limit": 0}, {"group_limit": 1}, {"group_limit": 2},
    {"group_weights": {"a": 3}}, {"group_limits": {"b": 1}}, {"group_order": "fifo"},
    {"group_order": "fifo", "group_dead": "hold"}, {"group_rate_per_s": 1, "group_burst": 2}]

heads_st = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from([0, 0, 2]),
                              st.sampled_from([0, 0, 0, 30])), min_size=1, max_size=6)
step_st = st.one_of(
    st.tuples(st.just("heads"), heads_st),
    st.tuples(st.just("none"), st.sampled_from(NAMES)),
    st.tuples(st.just("serve"), st.integers(1, 4)),
    st.tuples(st.just("settle"), st.sampled_from(NAMES)),
    st.tuples(st.just("hold"), st.sampled_from(NAMES)),
    st.tuples(st.just("dead"), st.sampled_from(NAMES)),
    st.tuples(st.just("clock"), st.sampled_from([1, 40])),
)


def _twins(raw: dict[str, Any]) -> tuple[Dispatch, Dispatch, GroupNames]:
    return dispatch_twins(raw, NAMES)


def _seen(d: Dispatch, names: GroupNames, now: int) -> tuple[list[GroupView | None], object]:
    return [d.view(names.gid(name)) for name in NAMES], d.peek(len(NAMES), now)


@settings(max_examples=400, deadline=None)
@example(raw={}, steps=[  # (a newcomer catches up with its priority's virtual time)
    ("heads", [("a", 0, 0)]), ("serve", 1), ("heads", [("a", 0, 0)]), ("serve", 1),
    ("settle", "a"), ("settle", "a"), ("heads", [("b", 0, 0), ("c", 0, 0)])])
@given(raw=st.sampled_from(SETTINGS), steps=st.lists(step_st, max_size=30))
def test_set_heads_leaves_dispatch_as_set_head_of_each(
        raw: dict[str, Any], steps: list[tuple[str, Any]]) -> None:
    one_by_one, at_once, names = _twins(raw)
    now, order = T0, 0
    for kind, arg in steps:
        if kind == "heads":
            heads = []
            for name, priority, later in arg:
                order += 1
                heads.append((names.gid(name), Head(priority, order, now + later)))
            for gid, head in heads:
                one_by_one.set_head(gid, head, now)
            at_once.set_heads(heads, now)
        elif kind == "none":
            for d in (one_by_one, at_once):
                d.set_head(names.gid(arg), None, now)
        elif kind == "serve":
            picked = one_by_one.pick(now, arg)
            assert picked == at_once.pick(now, arg)
            if picked is not None:
                for d in (one_by_one, at_once):
                    d.served(picked[0], picked[1], None, now)
        elif kind in ("settle", "hold", "dead"):
            gid = names.gid(arg)
            for d in (one_by_one, at_once):
                view = d.view(gid)
                if kind == "hold":
                    d.hold(gid, 1, now)
                elif kind == "dead":
                    d.set_head(gid, None if view is None else view.head, now,
                               dead=(0 if view is None else view.dead) + 1)
                elif view is not None and view.held:
                    d.settled(gid, 1, now)
        else:
            now += arg
        assert _seen(at_once, names, now) == _seen(one_by_one, names, now)


def test_set_heads_refuses_a_bad_gid_keeping_the_ones_before() -> None:
    one_by_one, at_once, names = _twins({})
    good = (names.gid("a"), Head(0, 1, 0))
    with pytest.raises(ValueError, match="group id"):
        at_once.set_heads([good, (1 << 32, Head(0, 2, 0))], T0)
    one_by_one.set_head(*good, T0)
    assert _seen(at_once, names, T0) == _seen(one_by_one, names, T0)
    assert at_once.view(1 << 32) is None


def test_set_heads_refuses_a_negative_gid_keeping_the_ones_before() -> None:
    # (with `not gid or gid > _GID_MASK` on the fast path, -1 was made a ready record
    # keyed -1, counted ready at its priority: a real group's next pick there got
    # half its quantum, (a, 2) not (a, 4))
    one_by_one, at_once, names = _twins({})
    good = (names.gid("a"), Head(0, 1, 0))
    with pytest.raises(ValueError, match="group id"):
        at_once.set_heads([good, (-1, Head(0, 2, 0))], T0)
    one_by_one.set_head(*good, T0)
    assert _seen(at_once, names, T0) == _seen(one_by_one, names, T0)
    assert at_once.pick(T0, 4) == one_by_one.pick(T0, 4) == (names.gid("a"), 4)


def test_set_heads_refuses_a_bad_head_of_a_group_it_tells_through_set_head() -> None:
    # (the fast path takes a claim's heads, ready keys in range as made, unchecked; a
    # head that goes through set_head, here one not due yet, is checked there)
    one_by_one, at_once, names = _twins({})
    good = (names.gid("a"), Head(0, 1, 0))
    with pytest.raises(ValueError, match="priority"):
        at_once.set_heads([good, (names.gid("b"), Head(10**9, 2, T0 + 1))], T0)
    one_by_one.set_head(*good, T0)
    assert _seen(at_once, names, T0) == _seen(one_by_one, names, T0)
    assert at_once.view(names.gid("b")) is None


def test_set_heads_after_a_set_head_that_rebuilt_the_heap_leaves_its_groups_ready() -> None:
    # A head told through set_head (a group with a record) pushed the ready heap past
    # its rebuild size: set_heads then pushed the next newcomers into the old list, so
    # they were ready (counted, never in the heap) and never picked: their jobs stayed
    # pending until their heads changed again. Picks here are the twin's, to the end.
    one_by_one, at_once, names = dispatch_twins({}, [])
    gids = [names.gid(f"g{i}") for i in range(10)]
    newcomers = [names.gid(f"new{i}") for i in range(3)]
    for d in (one_by_one, at_once):
        for i, gid in enumerate(gids):
            d.set_head(gid, Head(0, 100 + i, 0), T0)
        for order in range(1000, 1074):  # (stale entries: the heap at 2 * 10 + 64)
            d.set_head(gids[1], Head(0, order, 0), T0)
    heads = [(gids[2], Head(0, 5000, 0))] + [(gid, Head(0, i + 1, 0))
                                              for i, gid in enumerate(newcomers)]
    for gid, head in heads:
        one_by_one.set_head(gid, head, T0)
    at_once.set_heads(heads, T0)
    picks: list[list[int]] = [[], []]
    for d, out in zip((one_by_one, at_once), picks, strict=True):
        while (picked := d.pick(T0)) is not None:
            out.append(picked[0])
            d.served(picked[0], 1, None, T0)
    assert picks[1] == picks[0]
    assert picks[0][:3] == newcomers and len(picks[0]) == 13
