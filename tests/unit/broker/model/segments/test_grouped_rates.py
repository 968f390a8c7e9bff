"""Per-group rates (``group_rate_per_s``, ``group_burst``) in the claims of
broker.model.segments.grouped: over any window of T ms a group gets at most
``burst + rate * T / 1000`` jobs; a group out of tokens is parked and the
queue's next wake-up is its next token (so long-poll claims wake); jobs
without a group are never rate-limited; the queue-wide ``max_claims_per_s``
caps a claim first."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.model import transitions as T
from broker.model.ops import Claim, Complete, CompleteItem, Configure, NewJob, Push
from broker.model.state import QueueState
from broker.model.views import next_wakeup_ms
from tests.support.states import new_queue

T0 = 1_767_225_600_000


def queue(groups: list[str | None], **settings: Any) -> QueueState:
    state = new_queue(T0)
    T.apply(state, Configure(settings), T0)
    T.apply(state, Push(tuple(NewJob(b"{}", group=g) for g in groups)), T0)
    return state


def claim(state: QueueState, n: int, now: int) -> list[Any]:
    out = list(T.apply(state, Claim("w", n, 600_000), now).jobs)
    T.apply(state, Complete(tuple(CompleteItem(j.token) for j in out)), now)
    return out


def group_of(state: QueueState, leased: Any) -> str | None:
    return state.jobs[int(leased.id[1:])].group


@settings(max_examples=40, deadline=None)
@given(rate=st.sampled_from([0.5, 1.0, 2.5, 10.0]), burst=st.integers(0, 4),
       steps=st.lists(st.tuples(st.integers(0, 700), st.integers(1, 6)), min_size=5,
                      max_size=40))
def test_no_window_gives_a_group_more_than_burst_plus_rate_times_its_length(
        rate: float, burst: int, steps: list[tuple[int, int]]) -> None:
    state = queue(["a"] * 60 + ["b"] * 60, group_rate_per_s=rate, group_burst=burst)
    size = burst or max(1, math.ceil(rate))  # (burst 0: one second's worth, at least 1)
    now, times = T0, {"a": [], "b": []}  # type: dict[str, list[int]]
    for wait, n in steps:
        now += wait
        for leased in claim(state, n, now):
            times[group_of(state, leased) or ""].append(now)
    for got in times.values():
        for i, start in enumerate(got):
            for j in range(i, len(got)):
                assert j - i + 1 <= size + rate * (got[j] - start) / 1000, (got, size, rate)


def test_a_group_out_of_tokens_is_parked_until_its_next_token() -> None:
    state = queue(["a"] * 5 + ["b"] * 5, group_rate_per_s=2, group_burst=2)
    first = claim(state, 10, T0)
    assert sorted(group_of(state, j) or "" for j in first) == ["a", "a", "b", "b"]
    assert claim(state, 10, T0 + 1) == []
    assert next_wakeup_ms(state, T0 + 1) == T0 + 500  # a token a 500 ms
    assert claim(state, 10, T0 + 499) == []
    assert sorted(group_of(state, j) or "" for j in claim(state, 10, T0 + 500)) == ["a", "b"]


def test_jobs_without_a_group_are_never_rate_limited() -> None:
    state = queue(["a"] * 3 + [None] * 5, group_rate_per_s=1, group_burst=1)
    got = claim(state, 10, T0)
    assert sorted(group_of(state, j) or "-" for j in got) == ["-"] * 5 + ["a"]


def test_the_queue_wide_rate_caps_a_claim_first() -> None:
    state = queue(["a"] * 3 + ["b"] * 3, group_rate_per_s=100, max_claims_per_s=1)
    assert len(claim(state, 10, T0)) == 1
