"""Claim records (format version 5): one record a claim, holding the claim's
lease; tokens derived from the record's fence and the job's position; a
heartbeat renews the claim; settlements set the position's bit; a record leaves
the head with its last settlement."""

from __future__ import annotations

import orjson
import pytest

from broker.errors import CorruptState
from broker.model import transitions as T
from broker.model.claim_records import bits_of_runs, runs_of_bits, seq_runs
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import (
    Cancel,
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    Heartbeat,
    NewJob,
    Purge,
    Push,
    Reclaim,
    Release,
    TakeOver,
)
from broker.model.tokens import stored_part
from tests.support.states import committed, new_queue, queue_of, read_back

NOW = 1_767_225_600_000


def _raw(state: object) -> dict:  # type: ignore[type-arg]
    codec.stamp(state, "w", NOW, "c-x")  # type: ignore[arg-type]
    return orjson.loads(codec.encode(state))  # type: ignore[arg-type, no-any-return]


def test_runs_and_bits_round_trip() -> None:
    assert seq_runs([5, 6, 7, 9, 3, 4]) == [5, 3, 9, 1, 3, 2]
    assert runs_of_bits(0b1101110, 7) == [1, 3, 5, 2]
    assert bits_of_runs([1, 3, 5, 2]) == 0b1101110
    assert runs_of_bits(0, 4) == [] and bits_of_runs([]) == 0


def test_a_claim_of_many_jobs_makes_one_record_and_tokens_from_its_fence() -> None:
    state = queue_of(5, NOW)
    T.apply(state, Claim("w", 1, 10_000), NOW)  # fence 1
    jobs = T.apply(state, Claim("w-2", 3, 20_000), NOW + 1).jobs
    raw = _raw(state)
    assert [(r["fence"], r["n"], r["worker"], r["parts"]) for r in raw["claims"]] == [
        (1, 1, "w", [{"seq": [1, 1]}]), (2, 3, "w-2", [{"seq": [2, 3]}])]
    assert [stored_part(j.token) for j in jobs] == \
        ["j0000000002.2", "j0000000003.3", "j0000000004.4"]
    claimed = [j for j in raw["jobs"] if j["status"] == "claimed"]
    assert [j["claim"] for j in claimed] == [1, 2, 2, 2]
    assert not any("lease" in j for j in claimed)


def test_a_token_of_another_queue_with_the_same_seq_and_fence_is_refused_unchanged() -> None:
    state = queue_of(2, NOW)
    T.apply(state, Claim("w", 2, 10_000), NOW)
    other = new_queue(NOW, queue="other")
    T.apply(other, Push((NewJob(b"1"), NewJob(b"2"))), NOW)
    foreign = T.apply(other, Claim("w", 2, 10_000), NOW).jobs
    before = codec.encode(state)
    for op in (Complete(tuple(CompleteItem(j.token) for j in foreign)),
               Heartbeat(tuple(j.token for j in foreign), 60_000),
               Fail(tuple(FailItem(j.token, "x") for j in foreign))):
        result = T.apply(state, op, NOW + 1)
        assert [i.ok for i in result.items] == [False, False] and not result.changed
    assert codec.encode(state) == before


def test_a_heartbeat_of_one_token_renews_its_whole_claim_once() -> None:
    state = queue_of(4, NOW)
    jobs = T.apply(state, Claim("w", 3, 10_000), NOW).jobs
    T.apply(state, Claim("v", 1, 10_000), NOW)
    result = T.apply(state, Heartbeat((jobs[0].token, jobs[2].token), 30_000), NOW + 5)
    assert [i.ok for i in result.items] == [True, True]
    first, second = state.claim_records.values()
    assert (first.expires_ms, first.lease_ms, first.heartbeat_ms) == (NOW + 30_005, 30_000,
                                                                      NOW + 5)
    assert second.expires_ms == NOW + 10_000
    assert [state.jobs[s].lease_expires_ms for s in (1, 2, 3, 4)] == [NOW + 30_005] * 3 + [
        NOW + 10_000]
    assert T.apply(state, Reclaim(), NOW + 10_000).ids == ["j0000000004"]


def test_settlements_set_bits_and_the_record_leaves_with_the_last() -> None:
    state = queue_of(4, NOW)
    jobs = T.apply(state, Claim("w", 4, 10_000), NOW).jobs
    T.apply(state, Complete((CompleteItem(jobs[1].token),)), NOW + 1)
    T.apply(state, Fail((FailItem(jobs[2].token, "boom"),)), NOW + 2)
    [record] = state.claim_records.values()
    assert runs_of_bits(record.settled, record.n) == [1, 2]
    assert _raw(state)["claims"][0]["settled"] == [1, 2]
    T.apply(state, Release((jobs[0].token,)), NOW + 3)
    assert state.claim_records
    T.apply(state, Complete((CompleteItem(jobs[3].token),)), NOW + 4)
    assert state.claim_records == {}
    assert _raw(state)["claims"] == []


def test_push_claim_complete_of_one_job_leaves_no_record() -> None:
    state = queue_of(1, NOW)
    [job] = T.apply(state, Claim("w", 1, 10_000), NOW).jobs
    assert len(state.claim_records) == 1
    T.apply(state, Complete((CompleteItem(job.token),)), NOW + 1)
    assert state.claim_records == {} and b'"claims":[]' in codec.encode(state)


def test_repeats_answer_from_the_record_and_the_receipts() -> None:
    state = queue_of(3, NOW)
    jobs = T.apply(state, Claim("w", 3, 10_000, request="r-1"), NOW).jobs
    again = T.apply(state, Claim("w", 3, 10_000, request="r-1"), NOW + 1)
    assert again.replayed and [j.token for j in again.jobs] == [j.token for j in jobs]
    T.apply(state, Complete((CompleteItem(jobs[0].token),)), NOW + 2)
    again = T.apply(state, Claim("w", 3, 10_000, request="r-1"), NOW + 3)
    assert [j.token for j in again.jobs] == [j.token for j in jobs[1:]]
    repeat = T.apply(state, Complete((CompleteItem(jobs[0].token),)), NOW + 4).items
    assert repeat[0].ok and repeat[0].status == "completed"


def test_reclaim_takes_the_claim_back_and_its_tokens_are_stale() -> None:
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    assert sorted(T.apply(state, Reclaim(), NOW + 10_000).ids) == ["j0000000001", "j0000000002"]
    assert state.claim_records == {}
    answers = T.apply(state, Heartbeat(tuple(j.token for j in jobs), 10_000), NOW + 10_001).items
    assert [a.ok for a in answers] == [False, False]
    assert all("stale" in (a.reason or "") for a in answers)
    again = T.apply(state, Claim("w", 2, 10_000), NOW + 10_002).jobs
    assert [stored_part(j.token) for j in again] == ["j0000000001.3", "j0000000002.4"]


def test_cancel_marks_live_in_the_record_through_a_takeover() -> None:
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    T.apply(state, Cancel(("j0000000002",)), NOW + 1)
    back = committed(state, NOW + 1)
    [record] = back.claim_records.values()
    assert record.cancel == {1: NOW + 1}
    T.apply(back, TakeOver("b-2", "http://b", 30_000), NOW + 60_000)
    [record] = back.claim_records.values()
    assert record.expires_ms == NOW + 70_000
    answers = T.apply(back, Heartbeat(tuple(j.token for j in jobs), 10_000), NOW + 60_001).items
    assert [(a.ok, a.status) for a in answers] == [(True, None), (False, "cancelled")]
    assert back.jobs[2].status == "cancelled" and 1 not in record.cancel


def test_takeover_renews_one_record_per_claim_keeping_tokens() -> None:
    state = queue_of(3, NOW)
    a = T.apply(state, Claim("w", 2, 10_000), NOW).jobs
    b = T.apply(state, Claim("v", 1, 20_000), NOW).jobs
    back = committed(state, NOW)
    before = {f: r.encode() for f, r in back.claim_records.items()}
    T.apply(back, TakeOver("b-2", "http://b", 30_000), NOW + 3_600_000)
    after = {f: r.encode() for f, r in back.claim_records.items()}
    assert set(before) == set(after) == {1, 3}
    assert [r.expires_ms for r in back.claim_records.values()] == [NOW + 3_610_000,
                                                                   NOW + 3_620_000]
    answers = T.apply(back, Complete(tuple(CompleteItem(j.token) for j in [*a, *b])),
                      NOW + 3_600_001).items
    assert [x.ok for x in answers] == [True, True, True]


def test_purge_of_claimed_jobs_drops_their_records() -> None:
    state = queue_of(3, NOW)
    T.apply(state, Claim("w", 2, 10_000), NOW)
    assert T.apply(state, Purge(("claimed",)), NOW + 1).count == 2
    assert state.claim_records == {}
    assert decode_state(codec.encode(state)).claim_records == {}


@pytest.mark.parametrize(("edit", "named"), [
    (lambda r: r["claims"][0].update(n=3), "parts hold 2"),
    (lambda r: r["claims"][0].update(fence=9), "counters.fence"),
    (lambda r: r["claims"][0].update(settled=[0, 2]), "every position settled"),
    (lambda r: r["claims"][0].update(settled=[1, 5]), "settled"),
    (lambda r: r["claims"][0].update(parts=[{"seg": "q/segments/x", "at": [0, 2]}]), "part"),
    (lambda r: r["claims"][0].update(done=[]), "done"),
    (lambda r: r["claims"][0].update(lease_s=0), "lease_s"),
    (lambda r: r["claims"][0].update(worker=""), "worker"),
    (lambda r: r["claims"][0].update(expires_at="soon"), "expires_at"),
    (lambda r: r["claims"][0].update(extra=1), "unknown fields"),
    (lambda r: r["claims"].append(dict(r["claims"][0])), "overlaps"),
    (lambda r: r["claims"].clear(), "names claim 1"),
    (lambda r: r["jobs"][0].update(claim=2), "in claim 2"),
    (lambda r: r["jobs"][0].update(status="pending"), "names a claim"),
    (lambda r: r["jobs"][0].update(lease={"token": "j0000000001.1"}), "lease"),
    (lambda r: r.update(spills=[{"key": "q/spills/p-1.jsonl"}]), "spill object"),
    (lambda r: r.update(spills={}), "spills must be a list"),
])
def test_decode_refuses_records_that_do_not_hold_and_names_them(edit: object,
                                                                 named: str) -> None:
    state = queue_of(3, NOW)
    T.apply(state, Claim("w", 2, 10_000), NOW)
    raw = _raw(state)
    decode_state(orjson.dumps(raw))  # as written: fine
    edit(raw)  # type: ignore[operator]
    with pytest.raises(CorruptState, match=named):
        decode_state(orjson.dumps(raw))


def _as_v4(raw: dict) -> bytes:  # type: ignore[type-arg]
    """A version-5 head spelled as version 4 wrote it: each claimed line with its
    own lease (its record's), no records, no spills."""
    records = {r["fence"]: r for r in raw.pop("claims")}
    del raw["spills"]
    raw["version"] = 4
    for job in raw["jobs"]:
        if job["status"] == "claimed":
            record = records[job.pop("claim")]
            pos = [s for i in range(0, len(record["parts"][0]["seq"]), 2)
                   for s in range(record["parts"][0]["seq"][i],
                                  record["parts"][0]["seq"][i] + record["parts"][0]["seq"][i + 1])
                   ].index(job["seq"])
            job["lease"] = {"token": f'{job["id"]}.{record["fence"] + pos}',
                            **{k: record[k] for k in ("worker", "lease_s", "expires_at",
                                                      "heartbeat_at")}}
    return orjson.dumps(raw)


def test_a_replayed_claim_inside_a_record_merged_from_v4_answers_its_jobs() -> None:
    """Two keyed claims granted together (one worker, lease and time) become one
    record when their version-4 head loads; a repeat of the second claim still
    answers its own jobs, with the tokens it answered."""
    state = queue_of(5, NOW)
    first = T.apply(state, Claim("w", 2, 10_000, request="r-1"), NOW).jobs
    second = T.apply(state, Claim("w", 2, 10_000, request="r-2"), NOW).jobs
    back = decode_state(_as_v4(_raw(state)))
    assert [(r.fence, r.n) for r in back.claim_records.values()] == [(1, 4)]
    back = read_back(codec.encode(back))
    again = T.apply(back, Claim("w", 2, 10_000, request="r-2"), NOW + 1)
    assert again.replayed and [j.token for j in again.jobs] == [j.token for j in second]
    again = T.apply(back, Claim("w", 2, 10_000, request="r-1"), NOW + 1)
    assert [j.token for j in again.jobs] == [j.token for j in first]
