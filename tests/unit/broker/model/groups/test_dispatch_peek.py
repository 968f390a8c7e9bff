"""Dispatch.peek (broker.model.groups.dispatch): the first n ready groups in
pick order, read from the heap without changing it, whatever stale entries
(heads changed, groups parked at their limit) the heap holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model.groups.dispatch import Dispatch, Head
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import parse_group_settings

T0 = 1_000

# a change: (group index, priority, order key, held jobs to add)
changes = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(0, 10_000),
                             st.integers(0, 2)), min_size=1, max_size=120)


def dispatch_after(steps: list[tuple[int, int, int, int]]) -> Dispatch:
    """A dispatch (group_limit 2) whose groups' heads changed ``steps`` times:
    entries go stale, some groups reach their limit (parked, out of the heap)."""
    names = GroupNames()
    d = Dispatch(parse_group_settings({"group_limit": 2}, "test"), names)
    for g, priority, order, hold in steps:
        gid = names.gid(f"g{g}")
        d.set_head(gid, Head(priority, order, T0), T0)
        view = d.view(gid)
        if hold and view is not None and view.held + hold <= 2:
            d.hold(gid, hold, T0)
    return d


def pick_order(d: Dispatch) -> list[int]:
    """Every ready group in the order successive picks take them (serving
    each with nothing left: ``d`` ends with no ready group)."""
    out = []
    while (picked := d.pick(T0)) is not None:
        out.append(picked[0])
        d.served(picked[0], 0, None, T0)  # (no head left: out of the heap)
    return out


@settings(max_examples=200, deadline=None)
@given(changes, st.integers(0, 40))
def test_peek_is_the_first_picks_and_changes_nothing(
        steps: list[tuple[int, int, int, int]], n: int) -> None:
    order = pick_order(dispatch_after(steps))  # (the same steps make the same dispatch)
    d = dispatch_after(steps)
    heap_before = list(d._heap)
    assert d.peek(n) == order[:n]
    assert d._heap == heap_before
    assert pick_order(d) == order


def test_peek_of_many_groups_names_the_oldest_heads_first() -> None:
    names = GroupNames()
    d = Dispatch(parse_group_settings({}, "test"), names)
    for g in range(10_000):
        d.set_head(names.gid(f"g{g}"), Head(0, 10_000 - g, T0), T0)
    got = d.peek(3)
    assert [names.name(gid) for gid in got] == ["g9999", "g9998", "g9997"]
    assert d.peek(0) == []


def test_peek_at_a_time_names_the_parked_groups_a_pick_then_wakes() -> None:
    names = GroupNames()
    d = Dispatch(parse_group_settings({}, "test"), names)
    ready, later, much_later = names.gid("ready"), names.gid("later"), names.gid("much")
    d.set_head(ready, Head(0, 5, T0), T0)
    d.set_head(later, Head(0, 1, T0 + 100), T0)  # (not due: parked until T0 + 100)
    d.set_head(much_later, Head(0, 2, T0 + 900), T0)
    assert d.peek(5) == [ready] and d.peek(5, T0 + 99) == [ready]
    assert d.peek(5, T0 + 100) == [later, ready]
    assert d.peek(1, T0 + 100) == [later]
    assert d.view(later).state == "not_due"  # type: ignore[union-attr]  # (nothing woken)
    assert d.pick(T0 + 100) == (later, 1)  # (the pick wakes it, and serves it first)
