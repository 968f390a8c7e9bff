"""Receipts (broker.model.receipts): merged runs of settled tokens, client floors, bounds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.model import receipts as R


@given(st.dictionaries(st.integers(1, 60), st.sampled_from(R.OUTCOMES), max_size=60),
       st.randoms())
def test_settled_fences_merge_into_runs_and_are_found(by_fence: dict[int, str],
                                                      rnd: object) -> None:
    r = R.Receipts()
    settled = [(outcome, fence) for fence, outcome in by_fence.items()]
    rnd.shuffle(settled)  # type: ignore[attr-defined]  # (a token settles once, in any order)
    for outcome, fence in settled:
        r.record_settled(outcome, [fence], 0, 600_000, 100_000)
    for fence in range(0, 62):
        assert r.outcome(fence) == by_fence.get(fence)
    for outcome in R.OUTCOMES:
        mine = sorted({f for o, f in settled if o == outcome})
        assert r.buckets[0].runs.get(outcome, []) == R.runs_of(mine) if r.buckets else not mine
    assert r.settled_runs == sum(b.count() for b in r.buckets)
    again = R.Receipts.decode(R.Receipts.to_plain(r))
    assert again.to_plain() == r.to_plain() and again.settled_runs == r.settled_runs


def test_tokens_settled_in_claim_order_cost_one_run() -> None:
    r = R.Receipts()
    for fence in range(1, 10_001):  # one completion a commit, in the order of the claims
        r.record_settled(R.COMPLETED, [fence], fence, 600_000, 100_000)
    assert r.settled_runs == 1 and r.outcome(5_000) == R.COMPLETED and r.outcome(10_001) is None


def test_a_clients_floor_drops_the_receipts_of_its_answered_calls() -> None:
    r = R.Receipts()
    for n in range(5):
        r.record(f"r-abc-{n}", R.PUSH, [n + 1, 1], 0)
    r.record("r-other-0", R.PUSH, [9, 1], 0)
    r.record("curl-key", R.PUSH, [10, 1], 0)
    assert r.answered_below("r-abc-4", 4, 0)  # calls 0..3 were answered
    assert sorted(r.requests) == ["curl-key", "r-abc-4", "r-other-0"]
    assert r.push_ids("r-abc-4") == [5] and r.push_ids("r-abc-1") is None
    assert not r.answered_below("curl-key", 100, 0)  # a key of another form has no floor


def test_bounds_drop_the_oldest_and_keep_requests_apart_from_settled() -> None:
    r = R.Receipts()
    r.record("r-a-0", R.PUSH, [1, 1], 0)
    for fence in range(0, 5000, 2):  # 2,500 separate runs
        r.record_settled(R.COMPLETED, [fence], 1_000, 600_000, 1_000)
    r.trim(2_000, 600_000, 1_000)
    assert r.push_ids("r-a-0") == [1]  # settled tokens do not push a request out
    assert r.settled_runs <= 1_000
    r.trim(700_000, 600_000, 1_000)  # past the TTL
    assert not r.requests and not r.buckets and r.settled_runs == 0
