"""broker.model.segments.claims.held_wanted: the records a batch's completes and
heartbeats name are those whose segment parts hold the tokens' jobs, each once,
however the tokens of several claims interleave, and whatever a forged or
stale token spells (a token whose fence lies in a record already named is not
looked up again: it could name that record or none)."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.held import held_position
from broker.model.ops import Claim, Complete, CompleteItem, Heartbeat
from broker.model.segments.claims import held_wanted
from broker.model.state import QueueState
from tests.support.held_records import LATER, held_queue, write_back


def _two_claims() -> tuple[QueueState, list[str], list[str]]:
    state, _, _ = held_queue(8)
    a = T.apply(state, Claim("w-a", 3, 60_000), LATER).jobs
    b = T.apply(state, Claim("w-b", 3, 60_000), LATER).jobs
    _, state = write_back(state)
    return state, list(a.tokens), list(b.tokens)


def _naive(state: QueueState, wires: list[str], marked_only: bool = False) -> set[int]:
    out = set()
    for wire in wires:
        found = held_position(state, wire.partition("-")[0])
        if found is not None and (not marked_only or found[1] in found[0].cancel):
            out.add(found[0].fence)
    return out


def test_interleaved_tokens_of_two_claims_name_both_records() -> None:
    state, a, b = _two_claims()
    wires = [a[0], b[2], a[1], b[0], a[2], b[1]]
    wanted = held_wanted(state, [Complete(tuple(CompleteItem(w) for w in wires))], LATER)
    assert set(wanted) == _naive(state, wires) == set(state.claim_records)
    assert all(state.claim_records[f] is r for f, r in wanted.items())


def test_forged_and_stale_tokens_name_no_other_record() -> None:
    state, a, b = _two_claims()
    fa = min(state.claim_records)
    forged = [a[0], f"j0000000099.{fa + 1}-00", f"j0000000002.{fa + 3}-00", "x.\u00b2-0",
              "j0000000001.-1", "", ".", f"j0000000001.{fa}\u0661-0"]
    wanted = held_wanted(state, [Complete(tuple(CompleteItem(w) for w in forged))], LATER)
    assert set(wanted) == _naive(state, forged) == {fa}
    # a token first that names nothing: the record of a later one is still named
    wanted = held_wanted(state, [Complete(tuple(CompleteItem(w) for w in forged[1:] + b))],
                         LATER)
    assert set(wanted) == _naive(state, forged[1:] + b) == {max(state.claim_records)}


def test_a_heartbeat_names_only_the_records_of_its_marked_jobs() -> None:
    state, a, b = _two_claims()
    fa, fb = sorted(state.claim_records)
    state.claim_records[fb].cancel[1] = LATER  # (b[1] marked for cancellation)
    ops = [Heartbeat((a[0], a[1], b[0], b[1], b[2]))]
    assert set(held_wanted(state, ops, LATER)) == _naive(state, list(ops[0].tokens), True) \
        == {fb}
    # a complete's token names a record; a heartbeat's unmarked one of it adds nothing new
    ops = [Complete((CompleteItem(a[0]),)), Heartbeat((a[1], b[0]))]
    assert set(held_wanted(state, ops, LATER)) == {fa}
