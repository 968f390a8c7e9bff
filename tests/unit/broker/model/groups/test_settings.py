"""The group settings (broker.model.groups.settings): every rule, each refusal
with its code and message, the maps, fifo's limit, and the stored form."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import CorruptState, InvalidRequest
from broker.model.groups.names import valid_group
from broker.model.groups.settings import (
    DEFAULT,
    GROUP_SETTINGS,
    GroupSettings,
    parse_group_settings,
)

W = "configure"


def refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(InvalidRequest) as err:
        parse_group_settings(raw, W)
    assert err.value.code == "invalid_request" and err.value.status == 422
    return err.value.message


def test_nothing_set_is_the_defaults_and_not_active() -> None:
    s = parse_group_settings({}, W)
    assert s == DEFAULT == GroupSettings()
    assert (s.limit, dict(s.limits), dict(s.weights), s.order, s.dead, s.rate_per_s, s.burst) == (
        None, {}, {}, "fair", "skip", 0.0, 0)
    assert not s.active and s.stored() == {} and s.rate is None


def test_other_settings_are_not_looked_at_and_nulls_are_defaults() -> None:
    raw = {"max_attempts": "not mine", **dict.fromkeys(GROUP_SETTINGS)}
    assert parse_group_settings(raw, W) == DEFAULT


def test_every_setting_is_taken_and_stored_back() -> None:
    raw = {"group_limit": 3, "group_limits": {"a": 0, "b": None, "c": 7},
           "group_weights": {"a": 2, "z": 1000}, "group_order": "fair", "group_dead": "hold",
           "group_rate_per_s": 2.5, "group_burst": 10}
    s = parse_group_settings(raw, W)
    assert s.active and s.stored() == {k: v for k, v in raw.items() if k != "group_order"}
    assert parse_group_settings(s.stored(), W) == s
    assert s.rate is not None and (s.rate.rate_per_s, s.rate.burst) == (2.5, 10)
    with pytest.raises(TypeError):
        s.limits["d"] = 1  # type: ignore[index]  # read-only


def test_limit_of_reads_the_override_then_the_default_and_no_group_is_never_limited() -> None:
    s = parse_group_settings({"group_limit": 3, "group_limits": {"a": 0, "b": None}}, W)
    assert [s.limit_of(n) for n in ("a", "b", "c", None)] == [0, None, 3, None]
    assert parse_group_settings({}, W).limit_of("x") is None


def test_fifo_limits_every_group_to_one_but_a_limit_of_0() -> None:
    s = parse_group_settings({"group_order": "fifo", "group_limits": {"paused": 0, "one": 1}}, W)
    assert s.fifo and (s.limit_of("x"), s.limit_of("paused"), s.limit_of("one")) == (1, 0, 1)
    assert s.limit_of(None) is None  # no group is never fifo
    assert parse_group_settings({"group_order": "fifo", "group_limit": 0}, W).limit_of("x") == 0


def test_dead_hold_counts_in_fifo_order_only() -> None:
    assert parse_group_settings({"group_order": "fifo", "group_dead": "hold"}, W).holds_dead
    fair = parse_group_settings({"group_dead": "hold"}, W)
    assert not fair.holds_dead and fair.active and fair.stored() == {"group_dead": "hold"}


def test_weights_default_to_1() -> None:
    s = parse_group_settings({"group_weights": {"a": 5}}, W)
    assert (s.weight_of("a"), s.weight_of("b"), s.weight_of(None)) == (5, 1, 1)


@pytest.mark.parametrize(("raw", "message"), [
    ({"group_limit": True}, "configure: group_limit must be an integer, got True"),
    ({"group_limit": 2.0}, "configure: group_limit must be an integer, got 2.0"),
    ({"group_limit": "2"}, "configure: group_limit must be an integer, got '2'"),
    ({"group_limit": -1}, "configure: group_limit must be within [0, 1000000], got -1"),
    ({"group_limit": 1_000_001}, "configure: group_limit must be within [0, 1000000], got "
                                 "1000001"),
    ({"group_limits": [1]}, "configure: group_limits must be an object of group to value, got [1]"),
    ({"group_limits": "a"}, "configure: group_limits must be an object of group to value, got 'a'"),
    ({"group_limits": {"a": 1.5}}, "configure: group_limits['a'] must be an integer, got 1.5"),
    ({"group_limits": {"a": -2}}, "configure: group_limits['a'] must be within [0, 1000000], "
                                  "got -2"),
    ({"group_limits": {"": 1}}, "configure: group_limits: group must be a string of 1..128 "
                                "characters without control characters, got ''"),
    ({"group_limits": {"a\nb": 1}}, "configure: group_limits: group must be a string of 1..128 "
                                    "characters without control characters, got 'a\\nb'"),
    ({"group_weights": {"a": 0}}, "configure: group_weights['a'] must be within [1, 1000], got 0"),
    ({"group_weights": {"a": 1001}}, "configure: group_weights['a'] must be within [1, 1000], "
                                     "got 1001"),
    ({"group_weights": {"a": None}}, "configure: group_weights['a'] must be an integer, got None"),
    ({"group_weights": {"a": False}}, "configure: group_weights['a'] must be an integer, "
                                      "got False"),
    ({"group_weights": {"x" * 129: 1}}, "configure: group_weights: group must be a string of "
                                        "1..128 characters without control characters, got 'xxx"),
    ({"group_weights": 3}, "configure: group_weights must be an object of group to value, got 3"),
    ({"group_order": "FIFO"}, "configure: group_order must be one of ['fair', 'fifo'], got 'FIFO'"),
    ({"group_order": 1}, "configure: group_order must be one of ['fair', 'fifo'], got 1"),
    ({"group_dead": "drop"}, "configure: group_dead must be one of ['skip', 'hold'], got 'drop'"),
    ({"group_rate_per_s": math.nan}, "configure: group_rate_per_s must be a finite number, "
                                     "got nan"),
    ({"group_rate_per_s": math.inf}, "configure: group_rate_per_s must be a finite number, "
                                     "got inf"),
    ({"group_rate_per_s": -0.5}, "configure: group_rate_per_s must be within [0, 1000000.0], "
                                 "got -0.5"),
    ({"group_rate_per_s": 1e7}, "configure: group_rate_per_s must be within [0, 1000000.0], "
                                "got 10000000.0"),
    ({"group_rate_per_s": "1"}, "configure: group_rate_per_s must be a number, got '1'"),
    ({"group_burst": 1.0}, "configure: group_burst must be an integer, got 1.0"),
    ({"group_burst": -1}, "configure: group_burst must be within [0, 10000000], got -1"),
    ({"group_burst": 10_000_001}, "configure: group_burst must be within [0, 10000000], "
                                  "got 10000001"),
    ({"group_order": "fifo", "group_limit": 2},
     "configure: group_order fifo allows one claimed job per group; group_limit is 2"),
    ({"group_order": "fifo", "group_limits": {"ok": 1, "tenantA": 5}},
     "configure: group_order fifo allows one claimed job per group; group_limits['tenantA'] is 5"),
    ({"group_order": "fifo", "group_limits": {"tenantB": None}},
     "configure: group_order fifo allows one claimed job per group; group_limits['tenantB'] is "
     "null (unlimited)"),
])
def test_each_bad_value_is_refused_naming_the_setting_and_the_key(
        raw: dict[str, Any], message: str) -> None:
    assert refusal(raw).startswith(message)


def test_a_key_is_quoted_by_its_prefix_only() -> None:
    message = refusal({"group_limits": {"k" * 128: "no"}})
    assert message.startswith("configure: group_limits['kkkk") and "k" * 100 not in message


def test_the_two_maps_hold_at_most_10000_groups_together() -> None:
    limits = {f"g{i}": 1 for i in range(6_000)}
    weights = {f"g{i}": 2 for i in range(4_000)}
    assert len(parse_group_settings({"group_limits": limits, "group_weights": weights}, W).limits) \
        == 6_000
    weights["one-more"] = 1
    assert refusal({"group_limits": limits, "group_weights": weights}) == (
        "configure: group_limits and group_weights hold 10001 groups together; at most 10000 "
        "are allowed")


def test_the_settings_take_at_most_512_kib_as_json() -> None:
    big = {("n" * 120) + f"{i:08}": 1_000_000 for i in range(4_000)}  # ~ 4,000 x 140 B
    assert refusal({"group_limits": big}).startswith(
        "configure: the group settings take ")
    assert refusal({"group_limits": big}).endswith("bytes as JSON; at most 524288 are allowed")
    small = dict(list(big.items())[:3_000])
    assert len(parse_group_settings({"group_limits": small}, W).limits) == 3_000


def test_the_decoder_may_ask_for_its_own_error() -> None:
    with pytest.raises(CorruptState):
        parse_group_settings({"group_limit": -1}, "queue.json settings", CorruptState)


names = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1,
                max_size=6).filter(valid_group)


@given(limit=st.none() | st.integers(0, 10**6),
       limits=st.dictionaries(names, st.none() | st.integers(0, 10**6), max_size=4),
       weights=st.dictionaries(names, st.integers(1, 1000), max_size=4),
       dead=st.sampled_from(["skip", "hold"]), rate=st.floats(0, 1e6),
       burst=st.integers(0, 10**7))
def test_fair_settings_round_trip_through_their_stored_form(
        limit: int | None, limits: dict[str, int | None], weights: dict[str, int], dead: str,
        rate: float, burst: int) -> None:
    raw = {"group_limit": limit, "group_limits": limits, "group_weights": weights,
           "group_dead": dead, "group_rate_per_s": rate, "group_burst": burst}
    s = parse_group_settings(raw, W)
    assert parse_group_settings(s.stored(), W) == s
    assert s.active == bool(s.stored())
    for name in {*limits, *weights, "other"}:
        assert s.limit_of(name) == limits.get(name, limit)
        assert s.weight_of(name) == weights.get(name, 1)
