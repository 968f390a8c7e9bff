"""Dispatch.hold: held jobs found rather than served (the counts rebuilt from the
claim records on load) park a group at its limit without moving its pass, and
a settlement below the limit makes it ready again."""

from __future__ import annotations

import pytest

from broker.model.groups.dispatch import AT_LIMIT, READY, Dispatch, Head
from broker.model.groups.names import GroupNames
from broker.model.groups.settings import parse_group_settings


def test_held_jobs_found_on_load_park_a_group_at_its_limit() -> None:
    names = GroupNames()
    dispatch = Dispatch(parse_group_settings({"group_limit": 2}, "t"), names)
    a, b = names.gid("a"), names.gid("b")
    dispatch.hold(a, 2, 0)
    dispatch.set_head(a, Head(0, 1, 0), 0)
    dispatch.set_head(b, Head(0, 2, 0), 0)
    view = dispatch.view(a)
    assert view is not None and (view.state, view.held, view.pass_) == (AT_LIMIT, 2, 0)
    assert dispatch.pick(0) == (b, 1)  # a's older head is skipped: a is at its limit
    dispatch.settled(a, 1, 0)
    view = dispatch.view(a)
    assert view is not None and view.state == READY and dispatch.pick(0) == (a, 1)


def test_hold_of_none_records_nothing_and_a_negative_hold_is_refused() -> None:
    dispatch = Dispatch(parse_group_settings({}, "t"), GroupNames())
    dispatch.hold(3, 0, 0)
    assert dispatch.view(3) is None
    with pytest.raises(ValueError, match="cannot hold"):
        dispatch.hold(3, -1, 0)
