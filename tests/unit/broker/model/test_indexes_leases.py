"""broker.model.indexes: the lease heap holds one entry a claim record, not one a
claimed job: a claim of 2,000 (inline, or from a segment) and its heartbeat each
push one entry; a reclaim after the lease ran out still takes back every job the
claim holds, and none a heartbeat renewed; a re-read rebuilds one entry a record."""

from __future__ import annotations

from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import encode_segment, segment_lines
from broker.model.indexes import compact_leases, lease_fence, lease_time
from broker.model.ops import Claim, Complete, CompleteItem, CompleteItems, Heartbeat, Reclaim
from broker.model.state import QueueState, SegmentRef, SegmentWindows
from broker.paths import segment_key, segment_name
from tests.support.states import new_queue, queue_of, read_back

NOW = 1_767_225_600_000
LEASE = 10_000


def _entries(state: QueueState) -> list[tuple[int, int]]:
    """The lease heap's entries as (expiry ms, fence), sorted."""
    return sorted((lease_time(k), lease_fence(k)) for k in state.leases)


def _segment_queue(n: int) -> QueueState:
    """A queue whose ``n`` jobs are in one loaded segment, all due."""
    state = new_queue(NOW)
    state.windows = windows = SegmentWindows()
    payloads = [b'{"n":%d}' % (1 + i) for i in range(n)]
    data = encode_segment("q", 1, 0, NOW - 1_000, payloads, max_attempts=3)
    ref = SegmentRef(segment_key("q", segment_name(1, "0123abcd")), '"e1"', 1, n, 0, NOW - 1_000)
    state.counters.enqueued += n
    state.segment_refs.append(ref)
    windows.put(ref, 0, segment_lines(data, ref))
    return state


def test_a_claim_of_2000_inline_jobs_pushes_one_lease_entry() -> None:
    state = queue_of(2_000, NOW)
    got = T.apply(state, Claim("w", 2_000, LEASE), NOW).jobs
    assert len(got) == 2_000
    assert _entries(state) == [(NOW + LEASE, 1)]  # (the record's fence is the claim's first)


def test_a_claim_of_2000_from_a_segment_pushes_one_lease_entry() -> None:
    state = _segment_queue(2_000)
    got = T.apply(state, Claim("w", 2_000, LEASE), NOW).jobs
    assert len(got) == 2_000
    assert _entries(state) == [(NOW + LEASE, 1)]


def test_a_heartbeat_pushes_one_entry_per_claim_it_renews() -> None:
    state = queue_of(3_000, NOW)
    first = T.apply(state, Claim("w", 2_000, LEASE), NOW).jobs
    second = T.apply(state, Claim("w", 1_000, LEASE), NOW).jobs
    tokens = (*(j.token for j in first), second[0].token)
    T.apply(state, Heartbeat(tokens, LEASE), NOW + 5_000)
    assert _entries(state) == [(NOW + LEASE, 1), (NOW + LEASE, 2_001),
                               (NOW + 5_000 + LEASE, 1), (NOW + 5_000 + LEASE, 2_001)]


def test_a_reclaim_takes_back_every_job_of_an_expired_claim_and_none_renewed() -> None:
    state = queue_of(3_000, NOW)
    renewed = T.apply(state, Claim("w", 2_000, LEASE), NOW).jobs
    lapsed = T.apply(state, Claim("w", 1_000, LEASE), NOW).jobs
    T.apply(state, Heartbeat((renewed[0].token,), LEASE), NOW + 5_000)
    back = T.apply(state, Reclaim(), NOW + LEASE).ids
    assert back == [j.id for j in lapsed]  # (in claim order, each once)
    assert list(state.claim_records) == [1]
    assert T.apply(state, Reclaim(), NOW + 5_000 + LEASE).ids == [j.id for j in renewed]
    assert state.claim_records == {}


def test_a_reclaim_skips_the_settled_jobs_of_an_expired_claim() -> None:
    state = queue_of(5, NOW)
    got = T.apply(state, Claim("w", 5, LEASE), NOW).jobs
    T.apply(state, Complete(CompleteItems.of([CompleteItem(got[1].token, None)])), NOW + 1)
    assert T.apply(state, Reclaim(), NOW + LEASE).ids == [got[i].id for i in (0, 2, 3, 4)]


def test_a_re_read_and_a_compaction_keep_one_entry_a_record() -> None:
    state = queue_of(3_000, NOW)
    T.apply(state, Claim("w", 2_000, LEASE), NOW)
    T.apply(state, Claim("w", 1_000, LEASE), NOW)
    codec.stamp(state, "w", NOW, "c-1")
    back = read_back(codec.encode(state))
    assert _entries(back) == [(NOW + LEASE, 1), (NOW + LEASE, 2_001)]
    compact_leases(back)
    assert _entries(back) == [(NOW + LEASE, 1), (NOW + LEASE, 2_001)]


def test_the_jobs_of_a_claim_read_their_lease_through_its_one_record() -> None:
    """A heartbeat renews one object (the record) for the 2,000 jobs of a claim;
    a job completed before keeps the lease it had, not the renewed one."""
    state = queue_of(2_000, NOW)
    got = T.apply(state, Claim("w", 2_000, LEASE), NOW).jobs
    (record,) = state.claim_records.values()
    assert all(state.jobs[seq].rec is record for seq in record.seqs)
    T.apply(state, Complete(CompleteItems.of([CompleteItem(got[0].token, None)])), NOW + 1)
    T.apply(state, Heartbeat((got[1].token,), 2 * LEASE), NOW + 2)
    done = state.jobs[1]
    assert done.rec is None and (done.lease_ms, done.lease_expires_ms) == (LEASE, NOW + LEASE)
    held = [state.jobs[seq] for seq in range(2, 2_001)]
    assert {(j.lease_ms, j.lease_expires_ms, j.lease_heartbeat_ms) for j in held} == \
        {(2 * LEASE, NOW + 2 + 2 * LEASE, NOW + 2)}
    codec.stamp(state, "w", NOW + 2, "c-1")
    back = read_back(codec.encode(state))  # (the written bytes say the same)
    assert back.jobs[1].lease == done.lease
    assert [back.jobs[j.seq].lease for j in held] == [j.lease for j in held]
