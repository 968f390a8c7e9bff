"""Dispatch.settled_one (broker.model.groups.dispatch): one settled job, counted
on the fast path where the group's state cannot change, always leaves dispatch
exactly as :meth:`Dispatch.settled` of one job does (states, held counts,
passes, heads, and the picks that follow), whatever the limits and weights."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.groups.dispatch import Dispatch, GroupView, Head
from broker.model.groups.names import GroupNames
from tests.support.dispatch_twins import dispatch_twins

T0 = 1_000
NAMES = [None, "a", "b", "c"]

ops = st.lists(st.tuples(st.sampled_from(["head", "none", "serve", "settle"]),
                         st.sampled_from(NAMES), st.integers(-2, 2), st.integers(1, 3)),
               max_size=60)


def _twins(raw: dict[str, Any]) -> tuple[Dispatch, Dispatch, GroupNames]:
    return dispatch_twins(raw, NAMES)


def _seen(d: Dispatch, names: GroupNames) -> tuple[list[GroupView | None], tuple[int, int] | None]:
    return [d.view(names.gid(name)) for name in NAMES], d.pick(T0)


@settings(max_examples=300, deadline=None)
@given(limit=st.sampled_from([None, 1, 2]), weight_a=st.integers(1, 3), steps=ops)
def test_settled_one_leaves_dispatch_as_settled_of_one_job(
        limit: int | None, weight_a: int, steps: list[tuple[str, str | None, int, int]]) -> None:
    raw: dict[str, object] = {"group_weights": {"a": weight_a}}
    if limit is not None:
        raw["group_limit"] = limit
    slow, fast, names = _twins(raw)
    order = 0
    for kind, name, priority, n in steps:
        gid = names.gid(name)
        order += 1
        if kind == "head":
            for d in (slow, fast):
                d.set_head(gid, Head(priority, order, T0), T0)
        elif kind == "none":
            for d in (slow, fast):
                d.set_head(gid, None, T0)
        elif kind == "serve":
            picked = slow.pick(T0, n)
            if picked is None:
                continue
            got, q = picked
            head = None if n == 3 else Head(priority, order, T0)
            for d in (slow, fast):
                d.served(got, q, head, T0)
        else:
            view = slow.view(gid)
            if view is None or not view.held:
                continue
            slow.settled(gid, 1, T0)
            fast.settled_one(gid, T0)
        assert _seen(fast, names) == _seen(slow, names)
