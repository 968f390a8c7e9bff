"""The hand parsers (broker.http.parsers) and the pydantic models (broker.http.schemas) agree.

The models document the API and the parsers serve it; on generated bodies
(valid, at and past every bound, of the wrong type, missing, with unknown or
misspelt fields) both accept or both refuse, and they read the same values.
Both refuse a field they do not know (``extra="forbid"``), whatever its value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from broker.errors import InvalidRequest
from broker.http import parsers, schemas
from broker.limits import (
    MAX_ATTEMPTS,
    MAX_CLAIM_JOBS,
    MAX_DELAY_S,
    MAX_DEPTH,
    MAX_GROUP_CHARS,
    MAX_KEY_CHARS,
    MAX_LEASE_S,
    MAX_ONCE_CHARS,
    MAX_PREFIX_CHARS,
    MAX_PRIORITY,
    MAX_TOKEN_CHARS,
    MAX_WAIT_S,
    MAX_WORKER_CHARS,
    MAX_WRITE_ID_CHARS,
    MIN_LEASE_S,
)
from broker.model.ops import CompleteItem, FailItem, NewJob

RUNS = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# What a JSON body can hold (orjson reads 64-bit integers; no NaN or infinity).
INTS = st.integers(-(2**63), 2**63 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=3))
JUNK = st.one_of(SCALARS, st.lists(SCALARS, max_size=2),
                 st.dictionaries(st.text(max_size=2), SCALARS, max_size=2))
PAYLOADS = st.one_of(
    st.recursive(SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
        max_leaves=8),
    st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1]).map(
        lambda d: orjson.loads(b"[" * d + b"]" * d)))


def ints(lo: int, hi: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([lo - 1, lo, hi, hi + 1]), st.integers(lo - 2, hi + 2),
                     st.sampled_from([float(lo), 0.0, True, str(lo)]), JUNK)


def nums(lo: float, hi: float) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([lo, hi, lo - 0.5, hi * 1.5 + 1, 0, -0.0]),
                     st.floats(lo - 1, hi + 1), st.integers(int(lo) - 1, int(hi) + 1),
                     st.sampled_from([True, "1"]), JUNK)


def strs(max_len: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([0, 1, max_len, max_len + 1]).map(lambda n: "é" * n),
                     st.text(max_size=4), JUNK)


def lists(items: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(items, min_size=0, max_size=4), JUNK)


def misspelt(names: list[str]) -> list[str]:
    """Near misses of ``names`` (a letter dropped, an "s" added, two letters
    swapped) and a stranger, none of them a known name."""
    near = {"colour", *(n[:-1] for n in names), *(n + "s" for n in names),
            *(n[:2] + n[3] + n[2] + n[4:] for n in names if len(n) > 3)}
    return sorted(near - set(names))


def obj(required: dict[str, st.SearchStrategy[Any]],
        optional: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """An object with the fields (each may be missing, null or junk), sometimes an
    unknown or misspelt one (whose value may be valid for the field it resembles,
    or its own name), and sometimes not an object at all."""
    fields = {**required, **optional}
    every = {name: st.one_of(s, st.none()) for name, s in fields.items()}
    extra = st.dictionaries(st.sampled_from(misspelt(list(fields))),
                            st.one_of(JUNK, *fields.values(), st.sampled_from(list(fields))),
                            max_size=1)
    return st.one_of(
        st.builds(lambda known, more: {**more, **known},
                  st.fixed_dictionaries({}, optional=every), extra),
        st.fixed_dictionaries(required, optional=optional), JUNK)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except (InvalidRequest, ValidationError):
        return "refused", None


def check(body: Any, hand: Callable[[Any], Any], model: type[BaseModel],
          read: Callable[[Any], Any]) -> None:
    """``body`` as the server sees it (decoded by orjson) gets the same outcome
    from the hand parser and the model; ``read`` maps a model to the parser's result."""
    decoded = orjson.loads(orjson.dumps(body))
    by_hand = outcome(lambda: hand(decoded))
    by_model = outcome(lambda: read(model.model_validate(decoded)))
    assert by_hand == by_model, (body, by_hand, by_model)


NEW_JOB = obj({"payload": PAYLOADS}, {
    "priority": ints(-MAX_PRIORITY, MAX_PRIORITY), "delay_s": nums(0, MAX_DELAY_S),
    "max_attempts": ints(1, MAX_ATTEMPTS), "key": strs(MAX_KEY_CHARS),
    "group": st.one_of(strs(MAX_GROUP_CHARS), st.sampled_from(["a\x00", "\x7f", "t\nx", "\x1f"]))})


def _push(body: Any) -> list[NewJob]:
    return [NewJob(j) if isinstance(j, bytes) else j for j in parsers.parse_push(body)]


@RUNS
@given(obj({"jobs": lists(NEW_JOB)}, {}))
def test_push(body: Any) -> None:
    def read(m: Any) -> list[NewJob]:
        return [NewJob(orjson.dumps(j.payload), j.priority, round(j.delay_s * 1000),
                                   j.max_attempts, j.key, j.group) for j in m.jobs]

    check(body, _push, schemas.PushRequest, read)


LEASE = nums(MIN_LEASE_S, MAX_LEASE_S)


@RUNS
@given(obj({"worker": strs(MAX_WORKER_CHARS)}, {
    "max_jobs": ints(1, MAX_CLAIM_JOBS), "lease_s": LEASE, "wait_s": nums(0, MAX_WAIT_S),
    "wait_for_queue": st.one_of(st.booleans(), JUNK)}))
def test_claim(body: Any) -> None:
    check(body, parsers.parse_claim, schemas.ClaimRequest,
          lambda m: {**m.model_dump(), "wait_for_queue": bool(m.wait_for_queue)})


@RUNS
@given(obj({"tokens": lists(strs(MAX_TOKEN_CHARS))}, {"lease_s": LEASE}))
def test_heartbeat(body: Any) -> None:
    check(body, parsers.parse_heartbeat, schemas.HeartbeatRequest,
          lambda m: (m.tokens, m.lease_s))


@RUNS
@given(obj({"items": lists(obj({"token": strs(MAX_TOKEN_CHARS)}, {"result": PAYLOADS}))}, {}))
def test_complete(body: Any) -> None:
    check(body, parsers.parse_complete, schemas.CompleteRequest, lambda m: [
        CompleteItem(i.token, None if i.result is None else orjson.dumps(i.result))
        for i in m.items])


@RUNS
@given(obj({"items": lists(obj({"token": strs(MAX_TOKEN_CHARS)}, {
    "error": strs(10), "retry_in_s": nums(0, MAX_DELAY_S)}))}, {}))
def test_fail(body: Any) -> None:
    check(body, parsers.parse_fail, schemas.FailRequest, lambda m: [
        FailItem(i.token, i.error,
                             None if i.retry_in_s is None else round(i.retry_in_s * 1000))
        for i in m.items])


@RUNS
@given(obj({"prefix": strs(MAX_PREFIX_CHARS)}, {
    "keep": lists(strs(5)), "once": strs(MAX_ONCE_CHARS)}))
def test_publish(body: Any) -> None:
    check(body, parsers.parse_publish, schemas.PublishRequest,
          lambda m: (m.prefix, m.keep, m.once))


@RUNS
@given(obj({"write_id": strs(MAX_WRITE_ID_CHARS)}, {}))
def test_stage_header(body: Any) -> None:
    check(body, lambda b: parsers.parse_stage(orjson.dumps(b) + b"\n\t1\n"),
          schemas.StageHeader, lambda m: (m.write_id, b"\t1\n"))


@pytest.mark.parametrize("job", [
    {"payload": 1, "priority": 0.0}, {"payload": 1, "priority": False},
    {"payload": 1, "max_attempts": 0}, {"payload": 1, "delay_s": -1},
])
def test_fast_path_refuses_what_the_model_refuses(job: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        schemas.PushRequest.model_validate({"jobs": [job]})
    with pytest.raises(InvalidRequest):
        parsers.parse_push({"jobs": [job]})


@pytest.mark.parametrize(("hand", "model", "body", "field"), [
    (parsers.parse_push, schemas.PushRequest, {"jobs": [{"payload": 1, "prioirty": 5}]},
     "jobs[0].prioirty"),
    (parsers.parse_push, schemas.PushRequest,
     {"jobs": [{"payload": 1}, {"payload": 2, "prioirty": "prioirty"}]}, "jobs[1].prioirty"),
    (parsers.parse_push, schemas.PushRequest, {"jobs": [{"payload": 1}], "job": []}, "job"),
    (parsers.parse_claim, schemas.ClaimRequest, {"worker": "w", "max_job": 5}, "max_job"),
    (parsers.parse_heartbeat, schemas.HeartbeatRequest, {"tokens": ["t"], "lease": 5},
     "lease"),
    (parsers.parse_complete, schemas.CompleteRequest,
     {"items": [{"token": "t", "results": 1}]}, "items[0].results"),
    (parsers.parse_fail, schemas.FailRequest,
     {"items": [{"token": "t", "retry_s": 1}]}, "items[0].retry_s"),
    (parsers.parse_publish, schemas.PublishRequest, {"prefix": "p/", "keeps": []}, "keeps"),
    (lambda b: parsers.parse_stage(orjson.dumps(b) + b"\n\t1\n"), schemas.StageHeader,
     {"write_id": "w", "writeid": "w"}, "writeid"),
])
def test_unknown_fields_are_refused_by_name(hand: Callable[[Any], Any],
                                            model: type[BaseModel], body: Any,
                                            field: str) -> None:
    with pytest.raises(InvalidRequest, match=f"unknown field '{re.escape(field)}'"):
        hand(body)
    with pytest.raises(ValidationError):
        model.model_validate(body)


def test_an_unknown_fields_name_is_quoted_short() -> None:
    with pytest.raises(InvalidRequest) as err:
        parsers.parse_claim({"worker": "w", "x" * 10_000_000: 1})
    assert len(err.value.message) < 200
