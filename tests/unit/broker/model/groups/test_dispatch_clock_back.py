"""Dispatch.pick under a clock that stepped back: a group made ready at a later
time whose head is not due at the time of the pick is parked until its head is
due, never picked (its job could not be claimed: the claim would fail)."""

from __future__ import annotations

from broker.model.groups.dispatch import NOT_DUE, READY, Dispatch, Head
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import parse_group_settings


def test_a_group_made_ready_later_is_not_picked_before_its_head_is_due() -> None:
    names = GroupNames()
    dispatch = Dispatch(parse_group_settings({"group_order": "fifo", "group_limit": 1}, "t"),
                        names)
    a, b = names.gid("a"), names.gid("b")
    dispatch.set_head(a, Head(0, 1, 5_000), 5_000)  # due at 5 s, seen at 5 s: ready
    dispatch.set_head(b, Head(0, 2, 1_000), 5_000)
    view = dispatch.view(a)
    assert view is not None and view.state == READY
    assert dispatch.pick(2_000) == (b, 1)  # the clock stepped back 3 s: only b is due
    view = dispatch.view(a)
    assert view is not None and view.state == NOT_DUE
    assert dispatch.next_wakeup_ms() == 5_000
    dispatch.served(b, 1, None, 2_000)
    assert dispatch.pick(4_999) is None
    assert dispatch.pick(5_000) == (a, 1)
