"""The dispatch rate limit: the token bucket's rule (broker.model.ratelimit, pure,
with hypothesis), claims in the model, and a broker with an injected clock (the
acceptance test: over a 10 s window claims stay within max_claims_per_s x 10 +
burst, and a long-poll claimant gets its job when tokens return)."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import InvalidRequest
from broker.model import transitions as T
from broker.model.ops import Claim, Configure, NewJob, PushPayloads
from broker.model.ratelimit import ClaimGate, ClaimMeter, TokenBucket, effective_burst
from broker.model.state import QueueSettings
from broker.model.views import next_wakeup_ms, stats
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored
from tests.support.states import new_queue

T0 = 1_767_225_600_000

rates = st.one_of(st.sampled_from([0.1, 0.3, 1.0, 2.5, 7.0, 1000.0]),
                  st.floats(0.001, 10_000, allow_nan=False))
steps = st.lists(st.tuples(st.integers(0, 3_000), st.integers(0, 40)), min_size=1, max_size=60)


@given(rate=rates, burst=st.integers(1, 200), steps=steps)
def test_no_window_gets_more_than_burst_plus_rate_times_its_length(
        rate: float, burst: int, steps: list[tuple[int, int]]) -> None:
    bucket = TokenBucket(rate, burst, T0)
    now, taken = T0, []
    for dt, n in steps:
        now += dt
        got = bucket.take(n, now)
        assert 0 <= got <= n
        taken.append((now, got))
    for i in range(len(taken)):
        granted = 0
        for j in range(i, len(taken)):
            granted += taken[j][1]
            # (the rate as written, 0.3, not its binary float, a hair below it: the
            # bucket counts integer nano-tokens of the decimal rate)
            assert granted <= burst + Fraction(repr(rate)) * (taken[j][0] - taken[i][0]) / 1000


@given(rate=rates, burst=st.integers(1, 50), waits=st.lists(st.integers(0, 5_000), max_size=20))
def test_the_next_token_comes_exactly_when_said(rate: float, burst: int,
                                                waits: list[int]) -> None:
    bucket = TokenBucket(rate, burst, T0)
    now = T0
    bucket.take(burst, now)  # empty
    for wait in waits:
        now += wait
        bucket.take(1, now)
        due = bucket.next_token_ms(now)
        if due is None:  # a rate below a nano-token a millisecond
            assert rate < 1e-6
            continue
        if due > now:
            probe = TokenBucket(rate, burst, T0)
            probe._level, probe._at_ms = bucket._level, bucket._at_ms
            assert probe.available(due - 1) == 0
        assert bucket.available(due) >= 1


@given(rate=rates, burst=st.integers(1, 50), back=st.integers(1, 100_000))
def test_a_clock_that_goes_back_refills_nothing(rate: float, burst: int, back: int) -> None:
    bucket = TokenBucket(rate, burst, T0)
    bucket.take(burst, T0 + 10)
    assert bucket.available(T0 + 10 - back) == 0
    assert bucket.available(T0 + 10) == 0


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(2.0, 5, T0)
    assert bucket.take(10, T0) == 5 and bucket.take(1, T0) == 0
    assert bucket.next_token_ms(T0) == T0 + 500
    assert bucket.take(10, T0 + 1_999) == 3
    assert bucket.available(T0 + 60_000) == 5
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket(0.0, 1, T0)
    assert effective_burst(2.5, 0) == 3 and effective_burst(0.1, 0) == 1
    assert effective_burst(2.5, 7) == 7


def test_the_gate_follows_its_settings() -> None:
    settings = QueueSettings()
    gate = ClaimGate()
    assert gate.cap(settings, 50, T0) == 50 and gate.wakeup_ms(settings, T0) is None
    settings.max_claims_per_s, settings.claim_burst = 10.0, 4
    assert gate.cap(settings, 50, T0) == 4
    gate.spend(settings, 3, T0)
    assert gate.cap(settings, 50, T0) == 1
    settings.claim_burst = 20  # a bigger bucket keeps what was left
    assert gate.cap(settings, 50, T0) == 1
    gate.spend(settings, 1, T0)
    assert gate.wakeup_ms(settings, T0) == T0 + 100  # (a claim was held back)
    assert not gate.wake(settings, T0 + 99)
    assert gate.wakeup_ms(settings, T0 + 150) == T0 + 150  # due until the waiters are woken
    assert gate.wake(settings, T0 + 150) and gate.wakeup_ms(settings, T0 + 150) is None
    settings.max_claims_per_s = 0.0  # lifted
    assert gate.cap(settings, 50, T0) == 50
    assert gate.figures(settings, T0 + 1_000) == {
        "claims_per_s": 0.4, "claim_limit_per_s": None, "claim_burst": None,
        "claim_tokens": None}


def test_the_meter_counts_the_last_ten_seconds() -> None:
    meter = ClaimMeter()
    for s in range(30):
        meter.add(5, T0 + s * 1000)
    assert meter.rate(T0 + 29_000) == 5.0
    assert meter.rate(T0 + 45_000) == 0.0
    assert len(meter._counts) <= 11


@pytest.mark.parametrize(("name", "value"), [("max_claims_per_s", -1), ("claim_burst", 1.5),
                                             ("max_claims_per_s", 1e7), ("claim_burst", True)])
def test_bad_rate_settings_are_refused_and_change_nothing(name: str, value: object) -> None:
    state = new_queue(T0)
    with pytest.raises(InvalidRequest, match=name):
        T.apply(state, Configure({name: value}), T0)
    assert state.settings == QueueSettings()


def test_claims_in_the_model_get_fewer_jobs_or_none_and_a_timer_for_the_next_token() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"max_claims_per_s": 4, "claim_burst": 3}), T0)
    T.apply(state, PushPayloads(tuple(b"%d" % i for i in range(100))), T0)
    assert len(T.apply(state, Claim("w", 10, 60_000), T0).jobs) == 3  # the burst
    assert T.apply(state, Claim("w", 10, 60_000), T0).jobs == []
    # (the loop's timer: the next token, not sooner; lease expiries are later)
    assert next_wakeup_ms(state, T0) == T0 + 250
    assert len(T.apply(state, Claim("w", 10, 60_000), T0 + 250).jobs) == 1
    assert len(T.apply(state, Claim("w", 10, 60_000), T0 + 1_250).jobs) == 3  # (capped: burst)
    figures = stats(state, T0 + 1_250)
    assert figures["claim_limit_per_s"] == 4.0 and figures["claim_burst"] == 3
    assert figures["claim_tokens"] == 0 and figures["claims_per_s"] == 0.7
    assert figures["settings"]["max_claims_per_s"] == 4.0


# -- a broker with an injected clock ---------------------------------------------------


def test_claims_over_ten_seconds_stay_within_the_rate_and_a_long_poll_waits_for_tokens(
        tmp_path: Path) -> None:
    rate, burst = 5.0, 7
    store = FileStore(tmp_path)
    clock = Clock(T0)

    async def main() -> None:
        broker = await started(store, clock=clock)
        try:
            await broker.create_queue("q", {"max_claims_per_s": rate, "claim_burst": burst})
            await broker.push("q", [b"%d" % i for i in range(500)])
            claimed: list[tuple[int, int]] = []
            for _ in range(100):  # every 100 ms for 10 s: as many as each claim may take
                claimed.append((clock.ms, len(await broker.claim("q", "w", 50, 60.0))))
                clock.advance(0.1)
            got = sum(n for _, n in claimed)
            assert burst <= got <= rate * 10 + burst
            stats = await broker.stats("q")
            assert stats["claim_limit_per_s"] == rate and stats["claim_burst"] == burst
            now_s = clock.ms // 1000  # the meter: the last ten whole seconds
            assert stats["claims_per_s"] == sum(
                n for at, n in claimed if now_s - 10 < at // 1000 <= now_s) / 10
            # the settings are in the object: a takeover keeps the limit
            assert stored(store).settings.max_claims_per_s == rate

            # the bucket is empty now: a long-poll claim waits for its next token
            while await broker.claim("q", "w", 50, 60.0):
                pass
            q = broker.served("q")
            assert q is not None
            claims = broker.metrics._ops[("q", "claim", "ok")]
            poll = asyncio.create_task(broker.claim("q", "w", 50, 60.0, wait_s=30.0))
            while broker.metrics._ops[("q", "claim", "ok")] == claims:
                await asyncio.sleep(0)  # (its first try, answered with nothing)
            for _ in range(200):  # (room to spin, for a claim woken without a token)
                await asyncio.sleep(0)
            assert not poll.done() and broker.metrics._ops[("q", "claim", "ok")] == claims + 1
            clock.advance(1 / rate)  # the next token is due...
            q.loop.poke()  # ...and the loop looks at its timer (the clock does not wake it)
            jobs = await poll
            assert len(jobs) == 1
            # it woke once, for that token, and claimed once more: no spinning
            assert broker.metrics._ops[("q", "claim", "ok")] == claims + 2
        finally:
            await broker.stop(drain_s=5)

    run(main())


def test_the_limit_survives_a_takeover_with_a_fresh_bucket(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock(T0)

    async def main() -> None:
        a = await started(store, "http://a", clock)
        await a.create_queue("q", {"max_claims_per_s": 1, "claim_burst": 2})
        await a.push("q", [NewJob(b"%d" % i) for i in range(10)])
        assert len(await a.claim("q", "w", 10, 60.0)) == 2
        await a.stop(drain_s=5)
        b = await started(store, "http://b", clock)
        try:
            assert len(await b.claim("q", "w", 10, 60.0)) == 2  # its own bucket, full
            assert await b.claim("q", "w", 10, 60.0) == []
            stats = await b.stats("q")
            assert stats["claim_limit_per_s"] == 1.0 and stats["served_by_this_broker"]
        finally:
            await b.stop(drain_s=5)

    run(main())
