"""A grouped push checks each group name it has not met lately (the bulk path
keeps the names that passed): a name once accepted is not checked again, and a
bad name is refused every time, whatever good names came before it, changing
nothing (the object byte for byte)."""

from __future__ import annotations

import pytest

from broker.errors import InvalidRequest
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.ops import NewJob, Push
from tests.support.states import committed, new_queue

T0 = 1_767_225_600_000


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\x00b"])
def test_a_bad_group_is_refused_every_time_after_good_names_passed(bad: str) -> None:
    state = new_queue(T0)
    T.apply(state, Push((NewJob(b"1", group="a"), NewJob(b"2", group="b"))), T0)  # (met)
    state = committed(state, T0)
    before = codec.encode(state)
    for attempt in range(3):  # (a refused name is never kept as met)
        with pytest.raises(InvalidRequest, match=r"group must be a string of 1\.\.128"):
            T.apply(state, Push((NewJob(b"3", group="a"), NewJob(b"4", group=bad),
                                 NewJob(b"5", group="b"))), T0 + 1 + attempt)
        assert codec.encode(state) == before
    assert state.counters.enqueued == 2
    ids = T.apply(state, Push((NewJob(b"6", group="a"), NewJob(b"7", group="c"))), T0 + 9).ids
    assert [state.job(i).group for i in ids] == ["a", "c"]  # type: ignore[union-attr]
