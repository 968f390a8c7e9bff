"""Per-group token buckets (broker.model.groups.buckets): the queue-wide bucket's
exact bound per group, sweeping that changes nothing but memory, and memory
that idle groups give back."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from broker.model.groups.buckets import GroupBuckets, GroupRate
from broker.model.ratelimit import TokenBucket

T0 = 1_767_225_600_000

rates = st.one_of(st.sampled_from([0.1, 0.3, 1.0, 2.5, 7.0, 1000.0]),
                  st.floats(0.001, 10_000, allow_nan=False))
# (group, ms since the last step, tokens asked, sweep first?)
steps = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3_000), st.integers(0, 40),
                           st.booleans()), min_size=1, max_size=80)


def rate_of(rate: float, burst: int) -> GroupRate:
    r = GroupRate.of(rate, burst)
    assert r is not None
    return r


def test_no_rate_is_no_bucket_and_burst_0_is_one_seconds_worth() -> None:
    assert GroupRate.of(0.0, 5) is None
    assert rate_of(2.5, 0).burst == 3 and rate_of(0.2, 0).burst == 1 and rate_of(2.5, 7).burst == 7


@given(rate=rates, burst=st.integers(1, 200), steps=steps)
def test_no_window_gives_a_group_more_than_burst_plus_rate_times_its_length(
        rate: float, burst: int, steps: list[tuple[int, int, int, bool]]) -> None:
    buckets = GroupBuckets(rate_of(rate, burst))
    now, taken = T0, {g: [] for g in range(1, 5)}
    for gid, dt, n, sweep in steps:
        now += dt
        if sweep:
            buckets.sweep(now)
        got = buckets.take(gid, n, now)
        assert 0 <= got <= n
        taken[gid].append((now, got))
    for grants in taken.values():
        for i in range(len(grants)):
            granted = 0
            for j in range(i, len(grants)):
                granted += grants[j][1]
                assert granted <= burst + Fraction(rate) * (grants[j][0] - grants[i][0]) / 1000


@given(rate=rates, burst=st.integers(1, 60), steps=steps)
def test_each_group_grants_exactly_what_its_own_token_bucket_would_and_sweeps_change_nothing(
        rate: float, burst: int, steps: list[tuple[int, int, int, bool]]) -> None:
    swept, kept = GroupBuckets(rate_of(rate, burst)), GroupBuckets(rate_of(rate, burst))
    own: dict[int, TokenBucket] = {}
    now = T0
    for gid, dt, n, sweep in steps:
        now += dt
        if sweep:
            swept.sweep(now)
        bucket = own.setdefault(gid, TokenBucket(rate, burst, now))
        expected = bucket.take(n, now)
        assert swept.take(gid, n, now) == kept.take(gid, n, now) == expected
        assert swept.available(gid, now) == kept.available(gid, now) == bucket.available(now)
        assert swept.next_token_ms(gid, now) == kept.next_token_ms(gid, now) \
            == bucket.next_token_ms(now)


@given(rate=rates, burst=st.integers(1, 60), taken=st.integers(1, 60), wait=st.integers(0, 10**7))
def test_a_swept_bucket_behaves_as_a_fresh_one(rate: float, burst: int, taken: int,
                                                wait: int) -> None:
    buckets = GroupBuckets(rate_of(rate, burst))
    buckets.take(1, taken, T0)
    buckets.sweep(T0 + wait)
    if 1 not in buckets:  # dropped: it was full, as a fresh bucket is
        fresh = TokenBucket(rate, burst, T0 + wait)
        assert buckets.available(1, T0 + wait) == fresh.available(T0 + wait) == burst
        assert buckets.take(1, burst + 1, T0 + wait) == burst
    else:  # kept: it was short of full
        assert buckets.available(1, T0 + wait) < burst


def test_10000_idle_groups_leave_no_bucket() -> None:
    buckets = GroupBuckets(rate_of(10.0, 20))
    for gid in range(1, 10_001):
        assert buckets.take(gid, 5, T0 + gid) == 5
    assert len(buckets) == 10_000
    assert buckets.sweep(T0 + 500) == 0  # none has refilled yet (5 tokens take 500 ms)
    assert buckets.sweep(T0 + 5_000) == 4_500  # those taken up to T0 + 4_500 have
    assert len(buckets) == 10_000 - 4_500
    buckets.sweep(T0 + 10_000 + 500)
    assert len(buckets) == 0 and buckets._due == []


def test_a_bucket_taken_from_again_is_swept_only_once_full() -> None:
    buckets = GroupBuckets(rate_of(1.0, 2))
    buckets.take(7, 1, T0)  # full again at T0 + 1 s
    buckets.take(7, 1, T0 + 500)  # 0.5 left: full at T0 + 2 s
    assert buckets.sweep(T0 + 1_000) == 0 and 7 in buckets
    assert buckets.sweep(T0 + 2_000) == 1 and 7 not in buckets and len(buckets._due) == 0


def test_asking_for_nothing_or_getting_nothing_keeps_no_bucket() -> None:
    buckets = GroupBuckets(rate_of(1.0, 1))
    assert buckets.take(1, 0, T0) == 0 and len(buckets) == 0
    assert buckets.available(1, T0) == 1 and buckets.next_token_ms(1, T0) == T0


def test_a_rate_change_keeps_whole_tokens_up_to_the_new_size() -> None:
    buckets = GroupBuckets(rate_of(1.0, 10))
    buckets.take(1, 3, T0)  # 7 left
    buckets.take(2, 10, T0)  # 0 left
    buckets.take(3, 1, T0)  # 9 left
    buckets.reconfigure(rate_of(2.0, 8), T0 + 499)  # (0.499 tokens refilled: not whole)
    assert [buckets.available(g, T0 + 499) for g in (1, 2, 3)] == [7, 0, 8]
    assert 3 not in buckets  # full at the new size: no bucket
    assert buckets.next_token_ms(2, T0 + 499) == T0 + 999  # at the new rate
    buckets.sweep(T0 + 4_499)
    assert len(buckets) == 0


def test_a_full_bucket_is_full_at_a_new_size_as_a_swept_one_is() -> None:
    kept, swept = GroupBuckets(rate_of(1.0, 2)), GroupBuckets(rate_of(1.0, 2))
    for buckets in (kept, swept):
        buckets.take(1, 1, T0)
    swept.sweep(T0 + 1_000)
    assert 1 in kept and 1 not in swept  # both full at T0 + 1 s; one swept
    for buckets in (kept, swept):
        buckets.reconfigure(rate_of(1.0, 5), T0 + 1_000)
        assert buckets.available(1, T0 + 1_000) == 5 and 1 not in buckets


def test_a_rate_too_small_to_refill_keeps_its_buckets() -> None:
    buckets = GroupBuckets(rate_of(1e-7, 1))
    assert buckets.take(1, 1, T0) == 1
    assert buckets.next_token_ms(1, T0) is None
    buckets.sweep(T0 + 10**12)
    assert 1 in buckets and buckets.available(1, T0 + 10**12) == 0
