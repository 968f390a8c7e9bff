"""add_pending_bulk (broker.model.lifecycle) with groups: the head's index of
grouped jobs (``state.grouped``) gets exactly the seqs of the jobs that have a
group, ascending, whether every job of the push has one or only some."""

from __future__ import annotations

import pytest

from broker.model.lifecycle import add_pending_bulk
from tests.support.states import new_queue

T0 = 1_767_225_600_000


@pytest.mark.parametrize("groups", [["a", "b", "a"], [None, "a", None, "b"], ["a"], [None]])
def test_the_grouped_index_gets_the_grouped_seqs(groups: list[str | None]) -> None:
    state = new_queue(T0)
    add_pending_bulk(state, [b"0"], T0, ["x"])  # (seq 1: the index is not empty before)
    ids = add_pending_bulk(state, [b"%d" % i for i in range(len(groups))], T0, groups)
    first = ids.first
    assert list(state.grouped) == [1] + [first + i for i, g in enumerate(groups) if g is not None]
    assert [state.jobs[first + i].group for i in range(len(groups))] == groups
