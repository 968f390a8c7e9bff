"""broker.model.held.held_position with a ``hint`` (the record the caller's last
token named): the same answer as the search, for a token of the hinted record,
of another record, of a record gone from the head, and for tokens that name
nothing."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.held import held_position
from broker.model.ops import Claim
from broker.model.tokens import checker
from tests.support.held_records import LATER, held_queue, write_back


def test_a_hint_answers_as_the_search_does() -> None:
    state, _, _ = held_queue(9)
    wires = [t for _ in range(3) for t in T.apply(state, Claim("w", 3, 60_000), LATER).jobs.tokens]
    _, state = write_back(state)
    stored = checker(state)
    tokens = [stored(w) or "" for w in wires]
    fences = list(state.claim_records)
    a, b, c = (state.claim_records[f] for f in fences)
    gone = state.claim_records.pop(c.fence)  # (a record that left the head since)
    bogus = ["", "j0000000001", "j0000000001.", f"j0000000002.{a.fence}",
             f"j0000000099.{a.fence + 1}", f"x.{a.fence}", f"j0000000001.{a.fence + 99}"]
    for token in tokens + bogus:
        want = held_position(state, token, fences)
        for hint in (None, a, b, gone):
            assert held_position(state, token, fences, hint) == want, (token, hint)
    assert [held_position(state, t, fences, b) for t in tokens[3:6]] == [(b, 0), (b, 1), (b, 2)]
    assert [held_position(state, t, fences, gone) for t in tokens[6:]] == [None] * 3
