"""broker.model.segments.claims' moves into the head (move_in: a claim with
``held_in_records`` off, a cancel) of a segment a claim record still names: the
ref that runs out stays, exhausted, until no record names it (the head decodes,
and its object is not dropped while a held job's line is only there). Pure."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.job import CANCELLED, CLAIMED, PENDING
from broker.model.ops import Cancel, Claim, Fail, FailItem
from tests.support.held_records import LATER, held_queue, write_back


def test_a_cancel_of_a_named_segments_last_job_keeps_the_ref_until_unnamed() -> None:
    state, ref, _ = held_queue(6)
    got = T.apply(state, Claim("w", 3, 60_000), LATER).jobs
    _, state = write_back(state)
    [answer] = T.apply(state, Cancel(("j0000000006",)), LATER).view
    assert answer.status == CANCELLED
    assert [r.key for r in state.segment_refs] == [ref.key] and not state.dropped_refs
    assert state.segment_refs[0].exhausted
    _, state = write_back(state)  # (decodes: the record's seg part names a ref of the head)
    counts = state.count_by_status()
    assert (counts[CLAIMED], counts[PENDING]) == (3, 2)
    T.apply(state, Fail(tuple(FailItem(t, "boom", 0) for t in got.tokens)), LATER)
    assert not state.segment_refs and [r.key for r in state.dropped_refs] == [ref.key]
    _, state = write_back(state)
    assert state.count_by_status()[PENDING] == 5


def test_a_claim_without_held_in_records_of_a_named_segments_rest_keeps_the_ref() -> None:
    state, ref, _ = held_queue(6)
    T.apply(state, Claim("w", 3, 60_000), LATER)
    _, state = write_back(state)
    state.held_in_records = False
    assert len(T.apply(state, Claim("w", 3, 60_000), LATER).jobs.ids) == 3
    assert [r.key for r in state.segment_refs] == [ref.key] and not state.dropped_refs
    _, state = write_back(state)
    assert state.count_by_status()[CLAIMED] == 6
