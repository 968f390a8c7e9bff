"""Grouped pushes into the head: each job keeps its group, a bad group
refuses the whole push and changes nothing (the object byte for byte), and
the digest of an ungrouped push is what brokers before groups kept while a
group makes a push another push."""

from __future__ import annotations

import hashlib
from array import array

import orjson
import pytest

from broker.errors import InvalidRequest
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.ops import NewJob, Push, PushPayloads
from broker.model.receipts import DIGEST_BYTES, push_digest
from tests.support.states import committed, new_queue

T0 = 1_767_225_600_000


def test_a_grouped_push_keeps_each_jobs_group() -> None:
    state = new_queue(T0)
    ids = T.apply(state, Push((NewJob(b"1", group="a"), NewJob(b"2"),
                               NewJob(b"3", priority=4, group="b"))), T0).ids
    assert [state.job(i).group for i in ids] == ["a", None, "b"]  # type: ignore[union-attr]
    again = committed(state, T0)
    assert [again.job(i).group for i in ids] == ["a", None, "b"]  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\x00b", "\x7f", "line\nbreak"])
def test_a_push_with_a_bad_group_changes_nothing(bad: str) -> None:
    state = new_queue(T0)
    T.apply(state, PushPayloads((b"1", b"2")), T0)
    T.apply(state, Push((NewJob(b"3", group="ok"),)), T0)
    state = committed(state, T0)
    before = codec.encode(state)
    with pytest.raises(InvalidRequest, match=r"group must be a string of 1\.\.128 characters"):
        T.apply(state, Push((NewJob(b"4", group="fine"), NewJob(b"5", group=bad))), T0 + 1)
    assert codec.encode(state) == before
    assert state.counters.enqueued == 3


def _old_digest(payloads: list[bytes], options: list[object]) -> str:
    """push_digest as brokers before groups computed it (the options of each
    job: None, or [priority, delay_ms, max_attempts, key])."""
    h = hashlib.sha256(array("Q", map(len, payloads)).tobytes())
    h.update(b"".join(payloads))
    h.update(orjson.dumps(options) if any(options) else b"")
    return h.hexdigest()[:2 * DIGEST_BYTES]


def test_an_ungrouped_pushs_digest_is_as_before_and_a_group_changes_it() -> None:
    jobs = [NewJob(b"1"), NewJob(b"2", priority=5, key="k")]
    assert push_digest(jobs) == _old_digest([b"1", b"2"], [None, [5, 0, None, "k"]])
    grouped = [NewJob(b"1"), NewJob(b"2", priority=5, key="k", group="g")]
    assert push_digest(grouped) != push_digest(jobs)
    assert push_digest([NewJob(b"1", group="a")]) != push_digest([NewJob(b"1", group="b")])
    assert push_digest([NewJob(b"1", group="a")]) != push_digest([b"1"])
