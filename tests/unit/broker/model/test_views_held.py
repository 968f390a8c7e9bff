"""The counts and totals of a queue whose claims from a segment are held in
claim records (``held_in_records``): ``stats`` (broker.model.views), the
dashboard's summary and its depth (broker.model.browse) count a held job once,
as claimed, and a done one (completed, awaiting its archive) not at all in
the total, as they count the same jobs moved into the head."""

from __future__ import annotations

import pytest

from broker.model import browse, views
from broker.model import transitions as T
from broker.model.ops import Cancel, Claim, Complete, CompleteItem, PushPayloads
from broker.model.state import QueueState
from tests.support.held_records import LATER, held_queue, write_back


def _queue(held_in_records: bool) -> QueueState:
    """Seqs 1-6 in a segment, 7 inline; 1-4 claimed (held in a record, or moved
    into the head); 2 completed, not yet archived."""
    state, _, _ = held_queue(6)
    state.held_in_records = held_in_records
    T.apply(state, PushPayloads((b'{"i":7}',)), LATER)
    got = T.apply(state, Claim("w", 4, 60_000), LATER).jobs
    T.apply(state, Complete((CompleteItem(got.tokens[1]),)), LATER)
    if held_in_records:
        assert not list(state.jobs.touched()) and state.claim_records  # (no job lines)
        _, state = write_back(state)
    return state


@pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])
def test_stats_counts_held_jobs_as_claimed_and_in_the_total(held: bool) -> None:
    got = views.stats(_queue(held), LATER)
    assert got["counts"]["claimed"] == 3 and got["counts"]["completed"] == 1
    assert got["counts"]["pending"] == 3
    assert got["total"] == 6  # 3 claimed, 3 pending: the completed one awaits its archive


@pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])
def test_dashboard_summary_counts_held_jobs_as_claimed_and_in_its_depth(held: bool) -> None:
    got = browse.summary(_queue(held), LATER)
    assert got["counts"]["claimed"] == 3 and got["counts"]["completed"] == 1
    assert got["counts"]["pending"] == 3
    assert got["total"] == 6 and got["counters"]["depth"] == 6


@pytest.mark.parametrize("held", [True, False], ids=["held", "moved_in"])
def test_stats_and_dashboard_summary_count_a_held_job_marked_for_cancel(held: bool) -> None:
    state = _queue(held)
    T.apply(state, Cancel(("j0000000003",)), LATER)  # claimed: marked, not cancelled
    if held:
        _, state = write_back(state)
    assert views.stats(state, LATER)["cancel_requested"] == 1
    assert browse.summary(state, LATER)["cancel_requested"] == 1
