"""broker.model.held's settlements without a line (a complete into a done
entry, a purge of held jobs) in a queue that uses groups: jobs held at an
ungrouped segment's part count for the jobs without a group, and each one
settled so leaves that count, as a settlement through a line does. Pure."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.job import CLAIMED
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Configure,
    NewJob,
    Purge,
    Push,
)
from broker.model.state import QueueState
from tests.support.held_records import LATER, held_queue


def _grouped(n: int, held: int) -> tuple[QueueState, list[str]]:
    """A queue with ``held`` of a segment's ``n`` jobs held in a record, then a
    group setting, a grouped job pushed and one ungrouped job claimed (the
    claim builds the group state from the records)."""
    state, _, _ = held_queue(n)
    tokens = list(T.apply(state, Claim("w", held, 60_000), LATER).jobs.tokens)
    T.apply(state, Configure({"group_limit": 2}), LATER)
    T.apply(state, Push((NewJob(b'{"g":1}', group="g"),)), LATER)
    T.apply(state, Claim("w", 1, 60_000), LATER)
    assert state.groups is not None
    return state, tokens


def _claimed_without_a_group(state: QueueState) -> int:
    assert state.groups is not None
    return state.groups.held(None)


def test_a_complete_of_held_jobs_leaves_the_ungrouped_count() -> None:
    state, tokens = _grouped(20, 10)
    assert _claimed_without_a_group(state) == 11
    T.apply(state, Complete(tuple(CompleteItem(t) for t in tokens)), LATER)
    assert state.count_by_status()[CLAIMED] == 1
    assert _claimed_without_a_group(state) == 1


def test_a_purge_of_claimed_held_jobs_leaves_the_ungrouped_count() -> None:
    state, _ = _grouped(20, 10)
    T.apply(state, Purge((CLAIMED,)), LATER)
    assert state.count_by_status()[CLAIMED] == 0
    assert _claimed_without_a_group(state) == 0
