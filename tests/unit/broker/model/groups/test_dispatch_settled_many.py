"""Dispatch.settled_many (broker.model.groups.dispatch): the settled jobs of one
operation told in one call leave dispatch exactly as :meth:`Dispatch.settled` of
one job each, in turn, does (states, held counts, passes, heads, dead counts,
EMPTY records dropped, and the picks that follow), whatever the limits, weights,
order and dead rule; a gid holding no job refuses as settled does, the gids
before it settled."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.groups.dispatch import Dispatch, GroupView, Head
from broker.model.groups.names import GroupNames
from tests.support.dispatch_twins import dispatch_twins

T0 = 1_000
NAMES = [None, "a", "b", "c"]

ops = st.lists(st.tuples(st.sampled_from(["head", "none", "serve", "dead", "settle"]),
                         st.lists(st.sampled_from(NAMES), min_size=0, max_size=5),
                         st.integers(-2, 2), st.integers(1, 3)),
               max_size=60)


def _twins(raw: dict[str, Any]) -> tuple[Dispatch, Dispatch, GroupNames]:
    return dispatch_twins(raw, NAMES)


def _seen(d: Dispatch, names: GroupNames) -> tuple[list[GroupView | None], list[int],
                                                   tuple[int, int] | None]:
    return [d.view(names.gid(name)) for name in NAMES], sorted(d.gids()), d.pick(T0)


@settings(max_examples=300, deadline=None)
@given(limit=st.sampled_from([None, 1, 2]), weight_a=st.integers(1, 3),
       order=st.sampled_from(["fair", "fifo"]), dead=st.sampled_from(["skip", "hold"]),
       steps=ops)
def test_settled_many_leaves_dispatch_as_settled_of_each_job_in_turn(
        limit: int | None, weight_a: int, order: str, dead: str,
        steps: list[tuple[str, list[str | None], int, int]]) -> None:
    raw: dict[str, object] = {"group_weights": {"a": weight_a}, "group_order": order,
                              "group_dead": dead}
    if limit is not None and (order == "fair" or limit == 1):
        raw["group_limit"] = limit
    slow, fast, names = _twins(raw)
    seq = 0
    for kind, batch, priority, n in steps:
        gids = [names.gid(name) for name in batch]
        seq += 1
        if kind == "head" and gids:
            for d in (slow, fast):
                d.set_head(gids[0], Head(priority, seq, T0 + (n == 3)), T0)
        elif kind == "none" and gids:
            for d in (slow, fast):
                d.set_head(gids[0], None, T0)
        elif kind == "dead" and gids:
            for d in (slow, fast):
                d.set_head(gids[0], Head(priority, seq, T0), T0, dead=n - 1)
        elif kind == "serve":
            picked = slow.pick(T0, n)
            if picked is None:
                continue
            got, q = picked
            head = None if n == 3 else Head(priority, seq, T0)
            for d in (slow, fast):
                d.served(got, q, head, T0)
        elif kind == "settle":
            if n != 3:  # (mostly groups holding jobs; n == 3: any, refused at the first idle)
                gids = [gid for gid in gids if (view := slow.view(gid)) is not None and view.held]
            refused = None
            for gid in gids:
                try:
                    slow.settled(gid, 1, T0)
                except ValueError as e:
                    refused = e
                    break
            if refused is None:
                fast.settled_many(gids, T0)
            else:
                with pytest.raises(ValueError, match="cannot be settled"):
                    fast.settled_many(gids, T0)
        assert _seen(fast, names) == _seen(slow, names)


def test_settled_many_drops_an_empty_group_record_once_its_last_held_job_settles() -> None:
    slow, fast, names = _twins({})
    a, b = names.gid("a"), names.gid("b")
    for d in (slow, fast):
        d.set_head(a, Head(0, 1, T0), T0)
        d.set_head(b, Head(0, 2, T0), T0)
        d.served(a, 1, None, T0)
        d.served(b, 1, Head(0, 3, T0), T0)
    slow.settled(a, 1, T0)
    slow.settled(b, 1, T0)
    fast.settled_many([a, b], T0)
    assert fast.view(a) is None and not fast.holds(a)
    assert _seen(fast, names) == _seen(slow, names)
