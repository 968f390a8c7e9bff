"""Per-group rates (``group_rate_per_s``, ``group_burst``) through the wired
claim path (broker.model.segments.grouped with groups/dispatch and
groups/buckets): a token bucket per group on the owner's clock; a group out
of tokens is skipped (its jobs stay pending, other groups are served); over any
window of ``T`` ms a group is granted at most ``burst + rate * T / 1000`` jobs;
jobs without a group have no rate; the commit loop's timer wakes at a parked
group's next token; the housekeeping commit drops full buckets."""

from __future__ import annotations

import re
import secrets
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import InvalidRequest
from broker.model import tokens
from broker.model import transitions as T
from broker.model import views as V
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import Configure, Reclaim
from tests.support.group_states import T0
from tests.support.group_states import claim_groups as claim
from tests.support.group_states import grouped_queue as queue


def test_rate_settings_are_stored_and_written_as_version_6() -> None:
    state = queue(["a"], group_rate_per_s=2.5, group_burst=4)
    assert state.settings.groups == {"group_rate_per_s": 2.5, "group_burst": 4}
    data = b"".join(codec.encode_parts(state))
    assert b'"version":6' in data and b'"group_rate_per_s":2.5' in data


def test_a_group_out_of_tokens_is_skipped_and_jobs_without_a_group_have_no_rate() -> None:
    state = queue(["a"] * 10 + ["b"] * 10 + [None] * 3, group_rate_per_s=1, group_burst=2)
    assert claim(state, 50, T0) == {"a": 2, "b": 2, None: 3}  # the burst, then nothing
    assert claim(state, 50, T0 + 999) == {}  # (0.999 of a token)
    assert claim(state, 50, T0 + 1000) == {"a": 1, "b": 1}
    assert claim(state, 50, T0 + 3500) == {"a": 2, "b": 2}  # (refilled up to the burst)
    pending = [j for j in state.jobs.values() if j.status == "pending"]
    assert Counter(j.group for j in pending) == {"a": 5, "b": 5}


def test_the_timer_wakes_at_a_parked_groups_next_token() -> None:
    state = queue(["a"] * 3, group_rate_per_s=4, group_burst=1)
    assert claim(state, 10, T0) == {"a": 1}
    assert claim(state, 10, T0 + 1) == {}  # (parks the group until its next token)
    assert V.next_wakeup_ms(state, T0 + 1) == T0 + 250
    T.apply(state, Reclaim(), T0 + 250)  # (the timer's housekeeping commit)
    assert claim(state, 10, T0 + 250) == {"a": 1}


def test_housekeeping_drops_full_buckets() -> None:
    state = queue([f"g{i}" for i in range(50)], group_rate_per_s=10, group_burst=1)
    assert sum(claim(state, 50, T0).values()) == 50
    assert state.groups is not None and state.groups.dispatch.buckets is not None
    assert len(state.groups.dispatch.buckets) == 50  # (each short of full)
    T.apply(state, Reclaim(), T0 + 100)  # (full again after 100 ms at 10 a second)
    assert len(state.groups.dispatch.buckets) == 0


def test_no_tokens_above_the_queue_wide_rate() -> None:
    state = queue(["a"] * 5 + ["b"] * 5, group_rate_per_s=100, group_burst=100,
                  max_claims_per_s=1, claim_burst=3)
    assert sum(claim(state, 50, T0).values()) == 3  # (the queue-wide limit caps first)


@settings(max_examples=60, deadline=None)
@given(rate=st.sampled_from([0.5, 1.0, 3.0, 20.0]), burst=st.integers(0, 4),
       steps=st.lists(st.tuples(st.integers(0, 1500), st.integers(1, 8)), min_size=1,
                      max_size=25))
def test_no_window_grants_a_group_more_than_its_bucket(
        rate: float, burst: int, steps: list[tuple[int, int]]) -> None:
    state = queue(["a"] * 150 + ["b"] * 50, group_rate_per_s=rate, group_burst=burst)
    size = burst or max(1, int(rate))  # (0: one second's worth, at least 1)
    now, granted = T0, []  # (time, jobs of group a) per claim
    for gap, want in steps:
        now += gap
        granted.append((now, claim(state, want, now)["a"]))
        if gap == 0:  # a housekeeping commit between claims never adds tokens
            T.apply(state, Reclaim(), now)
    for i, (start, _) in enumerate(granted):
        for end, _ in granted[i:]:
            got = sum(n for t, n in granted if start <= t <= end)
            assert got <= size + rate * (end - start) / 1000 + 1e-9, (start, end, got)


@pytest.mark.parametrize("name", ["group_rate_per_s", "max_claims_per_s"])
def test_a_rate_that_would_never_refill_is_refused_when_set_but_loads_when_stored(
        name: str) -> None:
    state = queue(["a"] * 3, group_rate_per_s=1)
    before = b"".join(codec.encode_parts(state))
    with pytest.raises(InvalidRequest, match=f"{name} must be 0 \\(none\\) or at least 0.001"):
        T.apply(state, Configure({name: 5e-7}), T0)
    assert b"".join(codec.encode_parts(state)) == before
    T.apply(state, Configure({name: 0.001}), T0)  # (the smallest: a token every 1,000 s)
    # an object that an older broker wrote with such a rate still loads and serves
    stored = re.sub(rb'"group_rate_per_s":[0-9.]+', b'"group_rate_per_s":5e-7', before) \
        if name == "group_rate_per_s" else before.replace(
            b'"settings":{', b'"settings":{"max_claims_per_s":5e-7,', 1)
    assert stored != before
    loaded = decode_state(stored)
    tokens.bind(loaded, "q", secrets.token_bytes)
    assert sum(claim(loaded, 3, T0).values()) == 1  # (the burst: one token)
