"""broker.model.indexes: the lease heap finds a claim record whatever its fence.

A head may number its leases up to ``2**62`` (``counters.fence`` and a claim
record's fence, :mod:`broker.model.format.decode`), beyond the 48 bits a job's
seq has in the ready and delayed heaps. A record whose fence is past those bits
must still be reclaimed when its lease runs out, and not before, on the state
that claimed it and on one read back from the object; and the commit loop's
timer must wake when it runs out."""

from __future__ import annotations

import orjson
import pytest

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import Claim, Heartbeat, PushPayloads, Reclaim, TakeOver
from broker.model.state import QueueState
from broker.model.views import next_wakeup_ms
from tests.support.states import committed, new_queue, read_back

NOW = 1_767_225_600_000
LEASE = 10_000


def _queue_with_fences_from(fence: int, jobs: int) -> QueueState:
    """A committed queue of ``jobs`` pending jobs whose next lease number is ``fence + 1``."""
    state = new_queue(NOW)
    T.apply(state, PushPayloads(tuple(b"%d" % i for i in range(jobs))), NOW)
    state.counters.fence = fence
    return committed(state, NOW)


def _stored(state: QueueState, now: int) -> dict[int, tuple[str, int | None]]:
    """Each job of the object ``state`` writes: seq -> (status, claim fence); and
    the check that every claimed line is held by exactly one record."""
    codec.stamp(state, "b", now, f"c-{state.seq + 1}")
    head = orjson.loads(codec.encode(state))
    jobs = {j["seq"]: (j["status"], j.get("claim")) for j in head["jobs"]}
    held = [s for r in read_back(codec.encode(state)).claim_records.values()
            for p, s in enumerate(r.seqs) if not r.settled >> p & 1]
    assert sorted(held) == sorted(s for s, (st, _) in jobs.items() if st == CLAIMED)
    return jobs


@pytest.mark.parametrize("fence", [(1 << 48) - 1, 1 << 48, (1 << 62) - 10])
def test_a_claim_numbered_past_48_bits_is_reclaimed_when_its_lease_runs_out(fence: int) -> None:
    state = _queue_with_fences_from(fence, 3)
    got = T.apply(state, Claim("w", 3, LEASE), NOW).jobs
    assert len(got) == 3 and list(state.claim_records) == [fence + 1]
    assert next_wakeup_ms(state, NOW) == NOW + LEASE
    T.apply(state, Reclaim(), NOW + LEASE - 1)
    assert _stored(state, NOW + LEASE - 1) == {s: (CLAIMED, fence + 1) for s in (1, 2, 3)}
    T.apply(state, Reclaim(), NOW + LEASE)
    assert _stored(state, NOW + LEASE) == {s: (PENDING, None) for s in (1, 2, 3)}
    assert state.claim_records == {}


def test_a_heartbeat_of_a_claim_numbered_past_48_bits_holds_it_until_the_new_expiry() -> None:
    state = _queue_with_fences_from(1 << 50, 2)
    got = T.apply(state, Claim("w", 2, LEASE), NOW).jobs
    T.apply(state, Heartbeat((got[0].token,), 3 * LEASE), NOW + 5_000)
    T.apply(state, Reclaim(), NOW + LEASE)
    assert _stored(state, NOW + LEASE) == {1: (CLAIMED, (1 << 50) + 1), 2: (CLAIMED, (1 << 50) + 1)}
    T.apply(state, Reclaim(), NOW + 5_000 + 3 * LEASE)
    assert _stored(state, NOW + 5_000 + 3 * LEASE) == {1: (PENDING, None), 2: (PENDING, None)}


def test_a_claim_numbered_past_48_bits_read_back_and_taken_over_is_reclaimed() -> None:
    state = _queue_with_fences_from(1 << 55, 2)
    T.apply(state, Claim("w", 2, LEASE), NOW)
    back = committed(state, NOW)
    T.apply(back, TakeOver("b-2", "http://b", 30_000), NOW + 1_000)
    T.apply(back, Reclaim(), NOW + 1_000 + LEASE)
    assert _stored(back, NOW + 1_000 + LEASE) == {1: (PENDING, None), 2: (PENDING, None)}
