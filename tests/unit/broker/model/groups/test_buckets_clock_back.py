"""Per-group token buckets (broker.model.groups.buckets) under a clock that steps
back: the buckets keep time by the latest time they were asked at, so a group
never gets more than ``burst + rate * T`` jobs over ``T`` ms of that time, even
when a bucket is first taken from at an earlier time than one seen before."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.model.groups.buckets import GroupBuckets, GroupRate

T0 = 1_767_225_600_000


def rate_of(rate: float, burst: int) -> GroupRate:
    r = GroupRate.of(rate, burst)
    assert r is not None
    return r


def test_a_bucket_first_taken_from_after_the_clock_stepped_back_gets_no_early_refill() -> None:
    buckets = GroupBuckets(rate_of(2.0, 2))
    assert buckets.available(1, T0) == 2  # (seen at T0; no bucket yet: full)
    assert buckets.take(1, 2, T0 - 999) == 2  # the clock stepped back 999 ms
    assert buckets.available(1, T0) == 0  # nothing refilled: no time passed since T0
    assert buckets.take(1, 1, T0 - 999) == 0
    assert buckets.next_token_ms(1, T0) == T0 + 500


# (ms the clock moves, negative: back; tokens asked, or None: a look only)
steps = st.lists(st.tuples(st.integers(-3_000, 3_000), st.one_of(st.none(), st.integers(0, 5))),
                 min_size=1, max_size=60)


@given(rate=st.sampled_from([0.5, 1.0, 2.0, 7.0]), burst=st.integers(1, 5), steps=steps)
def test_a_clock_that_steps_back_never_lets_a_group_past_burst_plus_rate_times_t(
        rate: float, burst: int, steps: list[tuple[int, int | None]]) -> None:
    buckets = GroupBuckets(rate_of(rate, burst))
    now, latest = T0, 0
    grants: list[tuple[int, int]] = []  # (the latest time seen, tokens granted)
    for dt, n in steps:
        now += dt
        latest = max(latest, now)
        if n is None:
            buckets.available(1, now)
            continue
        got = buckets.take(1, n, now)
        assert 0 <= got <= n
        if got:
            grants.append((latest, got))
    for i, (start, _) in enumerate(grants):  # every window, on the latest-seen clock
        total = 0
        for at, got in grants[i:]:
            total += got
            assert total <= burst + rate * (at - start) / 1000 + 1e-9, (start, at, total)
