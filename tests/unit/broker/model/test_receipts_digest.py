"""A push's receipt keeps a digest of its jobs (broker/model/receipts.py): a push under
a remembered request key with other jobs is refused (``request_key_reused``) and
changes nothing, a true repeat answers the first ids, and a receipt or a push
without a digest (an object written before them, a caller that brings none)
answers as before. Pure: states and ops, time passed in."""

from __future__ import annotations

import orjson
import pytest

from broker.errors import CorruptState, InvalidRequest, QueueFull, RequestKeyReused
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import NewJob, PushPayloads, push_of
from broker.model.receipts import DIGEST_BYTES, Receipts, push_digest
from broker.model.state import QueueSettings, QueueState
from tests.support.states import committed, new_queue

T0 = 1_767_225_600_000
KEY = "orders-2026-11-28"
MONDAY = (b'{"n":1}', b'{"n":2}', b'{"n":3}')
TUESDAY = (b'{"n":4}', b'{"n":5}', b'{"n":6}')


def keyed(payloads: tuple[bytes, ...], key: str = KEY, floor: int | None = None) -> PushPayloads:
    """The push of ``payloads`` under ``key``, with their digest (as a broker sends it)."""
    return PushPayloads(payloads, request=key, floor=floor, digest=push_digest(payloads))


def stored(state: QueueState) -> bytes:
    return b"".join(codec.encode_parts(state))


# -- the digest --------------------------------------------------------------------

def test_push_digest_is_a_function_of_the_jobs_payloads_order_and_options() -> None:
    d = push_digest(list(MONDAY))
    assert len(d) == 2 * DIGEST_BYTES and int(d, 16) >= 0
    assert push_digest(list(MONDAY)) == d == push_digest(tuple(MONDAY))
    others = [
        list(TUESDAY),  # other jobs, same count
        list(reversed(MONDAY)),  # same jobs, other order
        [b'{"n":1}{"n":2}', b'{"n":3}'],  # same bytes, cut elsewhere
        [b'{"n":1}', b'{"n":2}', b'{"n":3}', b'""'],
        [NewJob(b'{"n":1}', priority=1), b'{"n":2}', b'{"n":3}'],
        [NewJob(b'{"n":1}', delay_ms=5), b'{"n":2}', b'{"n":3}'],
        [NewJob(b'{"n":1}', max_attempts=1), b'{"n":2}', b'{"n":3}'],
        [NewJob(b'{"n":1}', key="k"), b'{"n":2}', b'{"n":3}'],
        [b'{"n":1}', NewJob(b'{"n":2}', priority=1), b'{"n":3}'],
    ]
    digests = [push_digest(jobs) for jobs in others]
    assert d not in digests and len(set(digests)) == len(digests)


def test_a_job_with_every_option_at_its_default_digests_as_its_bare_payload() -> None:
    """(A staged line ``{}<tab>payload`` parses to such a job; its bare twin to bytes.)"""
    assert push_digest([NewJob(b'{"n":1}'), b'{"n":2}']) == push_digest([b'{"n":1}', b'{"n":2}'])


# -- the rule ----------------------------------------------------------------------

def test_a_push_under_a_key_used_for_other_jobs_is_refused_and_changes_nothing() -> None:
    state = new_queue(T0)
    first = T.apply(state, keyed(MONDAY), T0)
    state = committed(state, T0)
    before = stored(state)
    with pytest.raises(RequestKeyReused, match=f"'{KEY}' was used for other jobs") as info:
        T.apply(state, keyed(TUESDAY), T0 + 1_000)
    assert isinstance(info.value, InvalidRequest) and info.value.status == 422
    assert info.value.code == "request_key_reused" and info.value.request_key is None
    assert stored(state) == before
    # a true repeat still answers the first push's ids and creates nothing
    again = T.apply(state, keyed(MONDAY), T0 + 2_000)
    assert again.replayed and list(again.ids) == list(first.ids)
    assert len(state.jobs) == 3


def test_the_refusal_comes_before_the_callers_floor_is_applied() -> None:
    """A client's key reused (one of its own calls): the floor it carries is not
    applied either, so its earlier receipts stay."""
    state = new_queue(T0)
    T.apply(state, keyed(MONDAY, key="r-c1-0"), T0)
    T.apply(state, keyed(MONDAY, key="r-c1-1"), T0)
    with pytest.raises(RequestKeyReused):
        T.apply(state, keyed(TUESDAY, key="r-c1-1", floor=1), T0)
    assert set(state.receipts.requests) == {"r-c1-0", "r-c1-1"}
    assert "r-c1" not in state.receipts.floors


def test_a_push_with_options_reusing_a_key_is_refused_too() -> None:
    state = new_queue(T0)
    T.apply(state, push_of([NewJob(b"1", priority=3)], request=KEY,
                           digest=push_digest([NewJob(b"1", priority=3)])), T0)
    other = [NewJob(b"1", priority=4)]
    with pytest.raises(RequestKeyReused):
        T.apply(state, push_of(other, request=KEY, digest=push_digest(other)), T0)
    assert [j.priority for j in state.jobs.values()] == [3]


def test_each_part_of_a_call_is_checked_against_its_own_receipt() -> None:
    """``r-{client}-{n}.{i}``: part 1 repeated with its own jobs is answered, with
    part 0's jobs it is refused."""
    state = new_queue(T0)
    part0 = T.apply(state, keyed(MONDAY, key="r-c1-4"), T0)
    part1 = T.apply(state, keyed(TUESDAY, key="r-c1-4.1"), T0)
    assert list(T.apply(state, keyed(TUESDAY, key="r-c1-4.1"), T0).ids) == list(part1.ids)
    assert list(T.apply(state, keyed(MONDAY, key="r-c1-4"), T0).ids) == list(part0.ids)
    with pytest.raises(RequestKeyReused):
        T.apply(state, keyed(MONDAY, key="r-c1-4.1"), T0)
    assert len(state.jobs) == 6


def test_a_push_refused_as_queue_full_is_repeated_as_such_and_other_jobs_are_refused() -> None:
    state = new_queue(T0, QueueSettings(max_state_bytes=4_096))
    big = (b'"' + b"x" * 8_000 + b'"',)
    refused = T.apply(state, keyed(big), T0)
    assert isinstance(refused.error, QueueFull)
    assert isinstance(T.apply(state, keyed(big), T0).error, QueueFull)  # its repeat
    with pytest.raises(RequestKeyReused, match="was refused for other jobs"):
        T.apply(state, keyed(MONDAY), T0)
    assert not state.jobs


def test_a_receipt_without_a_digest_answers_as_before() -> None:
    """An object written before digests: its receipt answers any push under its
    key with its ids (the count is the client's check), as it always did."""
    state = new_queue(T0)
    first = T.apply(state, PushPayloads(MONDAY, request=KEY), T0)
    state = committed(state, T0)
    assert state.receipts.requests[KEY].digest is None
    again = T.apply(state, keyed(TUESDAY), T0)
    assert again.replayed and list(again.ids) == list(first.ids)


def test_a_push_without_a_digest_is_answered_from_a_receipt_with_one() -> None:
    state = new_queue(T0)
    first = T.apply(state, keyed(MONDAY), T0)
    again = T.apply(state, PushPayloads(TUESDAY, request=KEY), T0)
    assert again.replayed and list(again.ids) == list(first.ids)


def test_a_push_by_reference_keeps_the_digest_its_caller_computed() -> None:
    """The commit of a push by reference holds refs, not payloads: its digest is
    the one computed of the jobs before they were written to segments."""
    state = new_queue(T0)
    T.apply(state, PushPayloads((), request=KEY, digest=push_digest(MONDAY)), T0)
    assert state.receipts.requests[KEY].digest == push_digest(MONDAY)
    with pytest.raises(RequestKeyReused):
        T.apply(state, keyed(TUESDAY), T0)


# -- the object --------------------------------------------------------------------

def test_a_push_receipt_ends_with_its_digest_and_reads_back() -> None:
    state = new_queue(T0)
    T.apply(state, keyed(MONDAY), T0)
    T.apply(state, PushPayloads(TUESDAY, request="r-c1-0"), T0)  # (no digest)
    data = stored(state)
    line = b'["%s","2026-01-01T00:00:00.000Z","push",1,3,"%s"]' % (
        KEY.encode(), push_digest(MONDAY).encode())
    assert b"\n" + line + b",\n" in data  # a line of its own
    assert b'["r-c1-0","2026-01-01T00:00:00.000Z","push",4,3]' in data
    back = committed(state, T0)
    assert back.receipts.requests[KEY].digest == push_digest(MONDAY)
    assert back.receipts.requests["r-c1-0"].digest is None
    assert stored(back).split(b'"receipts"')[1] == data.split(b'"receipts"')[1]
    assert orjson.loads(data)["receipts"] == state.receipts.to_plain()


@pytest.mark.parametrize("entry", [
    ["k", "2026-01-01T00:00:00.000Z", "push", 1, 3, "xyz"],
    ["k", "2026-01-01T00:00:00.000Z", "push", 1, 3, "0" * 15],
    ["k", "2026-01-01T00:00:00.000Z", "push", 1, 3, "A" * 16],
    ["k", "2026-01-01T00:00:00.000Z", "push", 1, "0" * 16, 3],
    ["k", "2026-01-01T00:00:00.000Z", "claim", 1, 3, "0" * 16],
    ["k", "2026-01-01T00:00:00.000Z", "purge", 3, "0" * 16],
])
def test_a_malformed_digest_is_refused(entry: list[object]) -> None:
    with pytest.raises(ValueError, match="receipt 'k'"):
        Receipts.decode({"requests": [entry]})
    state = new_queue(T0)
    raw = orjson.loads(stored(state))
    raw["receipts"]["requests"] = [entry]
    with pytest.raises(CorruptState):
        decode_state(orjson.dumps(raw))
