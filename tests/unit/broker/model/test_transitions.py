"""The pure queue core: unit tests and hypothesis invariants, no I/O."""

from __future__ import annotations

import orjson
import pytest

from broker.errors import InvalidRequest, PayloadTooLarge, QueueFull
from broker.model import state as S
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import JOB_OVERHEAD_BYTES, JobIds, job_id_for, seq_of, token_seq
from broker.model.job_lines import job_line
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    DropArchived,
    Fail,
    FailItem,
    Heartbeat,
    LeasedJob,
    NewJob,
    Push,
    PushPayloads,
    Reclaim,
    Redrive,
    SetPaused,
    TakeOver,
)
from broker.model.views import list_jobs
from tests.support.states import new_queue


def push(state: S.QueueState, now: int, *payloads: object, **kw: object) -> list[str]:
    jobs = tuple(NewJob(orjson.dumps(p), **kw) for p in payloads)  # type: ignore[arg-type]
    return T.apply(state, Push(jobs), now).ids


def claim(state: S.QueueState, now: int, n: int = 1, lease_ms: int = 10_000) -> list[LeasedJob]:
    return T.apply(state, Claim("w", n, lease_ms), now).jobs


def test_claim_order_priority_then_run_at_then_seq() -> None:
    st_ = new_queue(0)
    a, = push(st_, 0, "a")
    b, = push(st_, 0, "b", priority=5)
    c, = push(st_, 0, "c", delay_ms=100)
    d, = push(st_, 0, "d", priority=5)
    assert [j.id for j in claim(st_, 50, 10)] == [b, d, a]
    assert [j.id for j in claim(st_, 200, 10)] == [c]


def test_delayed_high_priority_job_does_not_block_runnable_ones() -> None:
    st_ = new_queue(0)
    push(st_, 0, "later", priority=9, delay_ms=1000)
    low, = push(st_, 0, "now")
    assert [j.id for j in claim(st_, 10)] == [low]


def test_fail_backs_off_then_dies_then_redrive() -> None:
    st_ = new_queue(0)
    st_.settings.backoff_base_s = 1.0
    jid, = push(st_, 0, "x", max_attempts=2)
    tok = claim(st_, 0)[0].token
    r = T.apply(st_, Fail((FailItem(tok, "boom"),)), 10)
    assert r.items[0].status == "pending"
    assert claim(st_, 500) == []  # backing off for 1 s
    job2 = claim(st_, 1010)
    assert job2[0].attempt == 2
    r = T.apply(st_, Fail((FailItem(job2[0].token, "boom again"),)), 1020)
    assert r.items[0].status == "dead"
    job = st_.job(jid)
    assert job is not None and job.status == "dead" and job.last_error == "boom again"
    assert T.apply(st_, Redrive(), 2000).count == 1
    assert claim(st_, 2000)[0].attempt == 1


def test_expired_lease_is_reclaimed_and_old_token_refused() -> None:
    st_ = new_queue(0)
    jid, = push(st_, 0, "x")
    old = claim(st_, 0, lease_ms=1000)[0].token
    assert T.apply(st_, Heartbeat((old,), 1000), 500).items[0].ok
    r = T.apply(st_, Reclaim(), 1600)
    job = st_.job(jid)
    assert r.ids == [jid] and job is not None and job.status == "pending"
    new = claim(st_, 1600)[0].token
    assert new != old
    assert not T.apply(st_, Heartbeat((old,), 1000), 1700).items[0].ok
    done = T.apply(st_, Complete((CompleteItem(old),)), 1700)
    assert not done.items[0].ok and st_.job(jid) is not None
    assert T.apply(st_, Complete((CompleteItem(new, b"1"),)), 1700).items[0].ok
    job = st_.job(jid)
    assert job is not None and job.status == "completed"  # until its archive object is written
    assert T.apply(st_, DropArchived((st_.seq + 1,)), 1800).count == 1
    assert st_.job(jid) is None


def test_token_is_dead_once_lease_passes_even_before_reclaim() -> None:
    st_ = new_queue(0)
    push(st_, 0, "x")
    tok = claim(st_, 0, lease_ms=1000)[0].token
    r = T.apply(st_, Complete((CompleteItem(tok),)), 1000)
    assert not r.items[0].ok and "expired" in (r.items[0].reason or "")


def test_idempotency_key_dedupes_within_window() -> None:
    st_ = new_queue(0)
    st_.settings.dedup_ttl_s = 10
    first = push(st_, 0, "a", key="k1")
    again = push(st_, 5, "b", key="k1")
    assert again == first and len(st_.jobs) == 1
    both = T.apply(st_, Push((NewJob(b"1", key="k2"), NewJob(b"2", key="k2"))), 6).ids
    assert both[0] == both[1] and len(st_.jobs) == 2
    later = push(st_, 20_000, "c", key="k1")  # window passed
    assert later != first


def test_bad_push_changes_nothing() -> None:
    st_ = new_queue(0)
    st_.settings.max_payload_bytes = 10
    before = codec.encode(st_)
    with pytest.raises(PayloadTooLarge):
        T.apply(st_, Push((NewJob(b"1"), NewJob(b'"' + b"x" * 20 + b'"'))), 0)
    with pytest.raises(InvalidRequest):
        T.apply(st_, Push((NewJob(b"1"), NewJob(b"2", delay_ms=-1))), 0)
    assert codec.encode(st_) == before and st_.counters.enqueued == 0


def test_bulk_push_across_blocks_encodes_like_the_general_path() -> None:
    st_ = new_queue(0)
    push(st_, 0, *range(1000))  # the bulk push below starts inside a block
    payloads = tuple(orjson.dumps({"i": i}) for i in range(2500))
    ids = T.apply(st_, PushPayloads(payloads), 1_700_000_000_123).ids
    assert ids == [job_id_for(seq) for seq in range(1001, 3501)]
    assert {block: len(jobs) for block, jobs in st_.block_jobs.items()} == {
        0: 1023, 1: 1024, 2: 1024, 3: 429}
    data = codec.encode(st_)
    cached = {job.id: job._enc for job in st_.jobs.values()}
    for job in st_.jobs.values():
        job._enc = None  # the template path, from the job's fields
    assert {job.id: job_line(job) for job in st_.jobs.values()} == cached
    assert orjson.loads(data) == orjson.loads(codec.encode_full(st_))
    assert codec.encode(decode_state(data)) == data
    claimed = T.apply(st_, Claim("w", 3), 1_700_000_000_200).jobs
    assert [j.id for j in claimed] == ["j0000000001", "j0000000002", "j0000000003"]


def test_bulk_push_refuses_an_oversize_payload_whole() -> None:
    st_ = new_queue(0)
    st_.settings.max_payload_bytes = 10
    with pytest.raises(PayloadTooLarge):
        T.apply(st_, PushPayloads((b"1", b'"' + b"x" * 20 + b'"')), 0)
    assert not st_.jobs and st_.counters.enqueued == 0


def test_queue_full_refuses_whole_push() -> None:
    st_ = new_queue(0)
    st_.settings.max_state_bytes = 3 * JOB_OVERHEAD_BYTES
    push(st_, 0, 1, 2)
    with pytest.raises(QueueFull):
        T.apply(st_, Push((NewJob(b"3"), NewJob(b"4"))), 0)
    assert len(st_.jobs) == 2


def test_paused_queue_hands_out_nothing() -> None:
    st_ = new_queue(0)
    push(st_, 0, "x")
    T.apply(st_, SetPaused(True), 0)
    assert claim(st_, 0) == []
    T.apply(st_, SetPaused(False), 0)
    assert len(claim(st_, 0)) == 1


def test_takeover_grants_fresh_leases() -> None:
    st_ = new_queue(0)
    push(st_, 0, "x")
    tok = claim(st_, 0, lease_ms=1000)[0].token
    T.apply(st_, TakeOver("b2", "http://b2", 30_000), 900)
    assert T.apply(st_, Reclaim(), 1500).ids == []  # old expiry 1000 no longer counts
    assert T.apply(st_, Heartbeat((tok,), 1000), 1500).items[0].ok


def test_push_once_happens_at_most_once() -> None:
    st_ = new_queue(0)
    first = T.apply(st_, Push((NewJob(b"1"), NewJob(b"2")), once="write:a"), 0)
    assert len(first.ids) == 2 and not first.duplicate
    again = T.apply(st_, Push((NewJob(b"1"), NewJob(b"2")), once="write:a"), 5)
    assert again.duplicate and again.ids == [] and len(st_.jobs) == 2
    other = T.apply(st_, Push((NewJob(b"3"),), once="write:b"), 5)
    assert len(other.ids) == 1 and len(st_.jobs) == 3


def test_job_ids_and_seqs_map_one_to_one() -> None:
    for seq in (1, 5, 9_999_999_999, 10_000_000_000, 123_456_789_012):
        assert seq_of(job_id_for(seq)) == seq
        assert token_seq(f"{job_id_for(seq)}.17") == seq
    for bad in ("", "j", "j5", "j00000000005", "j01000000000", "x0000000005", "j000000000\u00b2",
                "j000000000a", "j-000000005", "0000000005"):
        assert seq_of(bad) is None, bad
    assert token_seq("no-dot") is None


def test_list_jobs_pages_after_an_id_padded_or_not() -> None:
    st_ = new_queue(0)
    ids = T.apply(st_, PushPayloads(tuple(b"%d" % n for n in range(5))), 0).ids
    assert [j.id for j in list_jobs(st_, after=ids[1])] == list(ids[2:])
    assert [j.id for j in list_jobs(st_, after="j3")] == list(ids[3:])
    for bad in ("x3", "j", "j-1", "j\u00b2"):
        with pytest.raises(InvalidRequest):
            list_jobs(st_, after=bad)


def test_job_ids_of_a_bulk_push_read_like_a_list() -> None:
    ids = JobIds(9_999_999_998, 3)
    expected = ["j9999999998", "j9999999999", "j10000000000"]
    assert len(ids) == 3 and list(ids) == expected and ids == expected and expected == ids
    assert ids[-1] == expected[-1] and ids[1:] == expected[1:] and ids != expected[:2]
    with pytest.raises(IndexError):
        ids[3]


def test_corrupt_foreign_and_newer_objects_are_refused() -> None:
    from broker.errors import CorruptState, ForeignState, NewerState

    good = new_queue(0)
    T.apply(good, Push((NewJob(b"1", priority=5), NewJob(b"2"))), 0)
    T.apply(good, Claim("w", 1, 1000), 0)
    codec.stamp(good, "w", 0)
    text = codec.encode(good)
    decode_state(text)
    for bad in (text.replace(b'"j0000000001"', b'"j0000000003"'),  # id is not its seq's
                text.replace(b'"j0000000001"', b'"x\\"y"'),
                text.replace(b'"claim":1}', b'"claim":"t\\"1"}'),  # not a fence
                text.replace(b'"claim":1}', b'"claim":2}'),  # names no claim record
                text.replace(b'"fence":1,"n":1', b'"fence":1,"n":2'),  # holds a job twice
                text.replace(b'"priority":5', b'"priority":1000001'),
                text.replace(b'"run_at":"1970', b'"run_at":"1969')):
        assert bad != text
        with pytest.raises(CorruptState):
            decode_state(bad)

    with pytest.raises(CorruptState):
        decode_state(b"{not json")
    with pytest.raises(CorruptState):
        decode_state(b'{"format":"osqueue","version":1,"seq":1}')
    with pytest.raises(ForeignState):
        decode_state(b'{"format":"other","version":1}')
    with pytest.raises(NewerState):
        decode_state(b'{"format":"osqueue","version":99}')


def test_a_new_queue_gets_its_own_copy_of_the_default_settings() -> None:
    """The broker passes one default settings object to every queue it creates: a
    change to one queue's settings must not reach the default or the next queue."""
    default = S.QueueSettings()
    first = T.new_state(0, default)
    first.settings.staged_ttl_s = 1.0
    assert default.staged_ttl_s == S.QueueSettings().staged_ttl_s
    assert T.new_state(0, default).settings.staged_ttl_s == S.QueueSettings().staged_ttl_s
