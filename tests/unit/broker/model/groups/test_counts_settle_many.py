"""GroupState.settle_many (broker.model.groups.counts): the groups of an
operation's settled jobs told in one call leave the groups as GroupState.settle
of each, in turn, does (jobs without a group included); a name none of whose
jobs is held refuses as settle does, the names before it settled."""

from __future__ import annotations

import pytest

from broker.model.groups.counts import GroupState
from broker.model.groups.dispatch import GroupView
from broker.model.groups.settings import parse_group_settings

T0 = 1_000
NAMES = [None, "a", "b", "c"]


def _twins(raw: dict[str, object]) -> tuple[GroupState, GroupState]:
    held: dict[str | None, int] = {None: 2, "a": 3, "b": 1}
    settings = parse_group_settings(raw, "test")
    return GroupState(settings, dict(held), T0), GroupState(settings, dict(held), T0)


def _seen(groups: GroupState) -> list[GroupView | None]:
    return [None if (gid := groups.names.find(name)) is None else groups.dispatch.view(gid)
            for name in NAMES]


@pytest.mark.parametrize("raw", [{}, {"group_limit": 2}, {"group_order": "fifo"}])
@pytest.mark.parametrize("settled", [
    ["a", None, "a", "b"], ["b"], [None, None], ["a", "a", "a", "b", None], []])
def test_settle_many_leaves_the_groups_as_settle_of_each(
        raw: dict[str, object], settled: list[str | None]) -> None:
    one_by_one, at_once = _twins(raw)
    for name in settled:
        one_by_one.settle(name)
    at_once.settle_many(settled)
    assert _seen(at_once) == _seen(one_by_one)
    assert sorted(at_once.dispatch.gids()) == sorted(one_by_one.dispatch.gids())


def test_settle_many_refuses_a_group_that_holds_nothing_keeping_the_ones_before() -> None:
    one_by_one, at_once = _twins({})
    with pytest.raises(ValueError, match="none is held"):
        at_once.settle_many(["a", None, "unheard-of", "b"])
    one_by_one.settle("a")
    one_by_one.settle(None)
    assert _seen(at_once) == _seen(one_by_one)
