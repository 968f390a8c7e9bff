"""Per-group token buckets (broker.model.segments.grouped, groups/buckets)
across the changes that rebuild a queue's group structures on one broker: a
change of another group setting (a weight, a limit) and a cancel of a job still
in a grouped segment object. The rebuild must not hand out a fresh burst: over
any window of ``T`` ms a group gets at most ``burst + rate * T / 1000`` jobs
from one owner (only a takeover starts the buckets full)."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.ops import Cancel, Configure
from tests.support.group_states import T0
from tests.support.group_states import claim_groups as claim
from tests.support.group_states import grouped_queue as queue
from tests.support.segment_refs import push_grouped_segment as push_segment
from tests.support.states import new_queue


def test_a_change_of_another_group_setting_keeps_the_buckets() -> None:
    state = queue(["a"] * 10, group_rate_per_s=1, group_burst=2)
    assert claim(state, 10, T0) == {"a": 2}  # (the burst)
    T.apply(state, Configure({"group_weights": {"b": 3}}), T0 + 1)
    T.apply(state, Configure({"group_limit": 5}), T0 + 2)
    assert claim(state, 10, T0 + 3) == {}  # (no token yet: 3 ms at 1 a second)
    assert claim(state, 10, T0 + 1000) == {"a": 1}
    assert [j.group for j in state.jobs.values() if j.status == "pending"] == ["a"] * 7


def test_a_lower_rate_caps_the_tokens_left() -> None:
    state = queue(["a"] * 10, group_rate_per_s=10, group_burst=10)
    assert claim(state, 4, T0) == {"a": 4}  # (6 tokens left)
    T.apply(state, Configure({"group_rate_per_s": 1, "group_burst": 2}), T0)
    assert claim(state, 10, T0) == {"a": 2}  # (the new burst, not a fresh 10)
    assert claim(state, 10, T0 + 999) == {}


def test_a_cancel_in_a_grouped_segment_keeps_the_buckets() -> None:
    state = new_queue(T0)
    T.apply(state, Configure({"group_rate_per_s": 1, "group_burst": 1}), T0)
    first = push_segment(state, ["a", "a", "a", "b", "b", "b"], T0)
    assert claim(state, 10, T0) == {"a": 1, "b": 1}  # (each group's burst)
    # a pending job in the middle of b's run: its position becomes a hole
    [answer] = T.apply(state, Cancel((f"j{first + 5:010d}",)), T0 + 1).view
    assert answer.ok
    assert claim(state, 10, T0 + 2) == {}  # (no group has a token 2 ms on)
    assert claim(state, 10, T0 + 1000) == {"a": 1, "b": 1}


def test_a_new_rate_counts_from_its_change_not_from_the_next_claim() -> None:
    """Tokens refill at the old rate until the change and at the new one after,
    whether or not a claim rebuilt the groups in between: at 5 a second, burst
    1, the burst is taken; the rate becomes 2 a second (burst 0: one second's
    worth, 2); 400 ms later a group has 0.8 of a token, not the 2 the old rate
    would have refilled by then."""
    state = queue(["a"] * 4, group_rate_per_s=5, group_burst=1)
    assert claim(state, 4, T0) == {"a": 1}
    T.apply(state, Configure({"group_rate_per_s": 2, "group_burst": 0}), T0)
    assert claim(state, 4, T0 + 400) == {}
    assert claim(state, 4, T0 + 500) == {"a": 1}  # (1.0 token at 2 a second)
    T.apply(state, Configure({"group_rate_per_s": 1, "group_weights": {"b": 2}}), T0 + 500)
    # 0.5 token by then; a change keeps whole tokens only: 0, refilled at 4 a second
    T.apply(state, Configure({"group_rate_per_s": 4}), T0 + 1000)
    assert claim(state, 4, T0 + 1249) == {}
    assert claim(state, 4, T0 + 1250) == {"a": 1}
