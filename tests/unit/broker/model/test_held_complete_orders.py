"""broker.model.held.complete_position under the orders a batch brings tokens
in: for random claims from a held segment and completes of their tokens in any
order (shuffled, repeated, records interleaved, a record's tokens split over
several completes of one commit, tokens naming nothing), each record's done
entry holds every completed position once, ascending, with its own result,
every token of the claims is answered completed (a repeat too, from its done
entry) and no other, and the head read back agrees."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.ops import Claim, Complete, CompleteItem
from tests.support.held_records import LATER, held_queue, write_back


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_done_entries_hold_each_completed_position_once_in_order(
        sizes: list[int], data: st.DataObject) -> None:
    state, _, _ = held_queue(sum(sizes))
    wires = [T.apply(state, Claim("w", k, 60_000), LATER).jobs.tokens for k in sizes]
    _, state = write_back(state)
    every = [w for claim in wires for w in claim]
    picked = data.draw(st.lists(st.sampled_from(every), max_size=3 * len(every)))
    bogus = data.draw(st.lists(st.sampled_from(
        ["j0000000001.1", "j0000000099.3", "x.2", "j0000000002", every[0] + "0"]), max_size=3))
    items = [CompleteItem(w, b'"%b"' % w.encode()) for w in [*picked, *bogus]]
    items = data.draw(st.permutations(items))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(items)), max_size=3)))
    ok: list[str] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(items)], strict=True):
        if lo < hi:
            res = T.apply(state, Complete(tuple(items[lo:hi])), LATER + 1)
            ok += [item.token for item, good in zip(items[lo:hi], res.items, strict=True)
                   if good.ok]
    assert set(ok) == set(picked)  # (a repeat is answered from its done entry; bogus refused)
    for _ in range(2):
        done = {}
        for record in state.claim_records.values():
            for entry in record.completions or ():
                assert entry.pos == sorted(set(entry.pos))
                for pos, result in zip(entry.pos, entry.results, strict=True):
                    done[(record.fence, pos)] = result
        assert sorted(done.values()) == sorted(b'"%b"' % w.encode() for w in set(picked))
        _, state = write_back(state)
