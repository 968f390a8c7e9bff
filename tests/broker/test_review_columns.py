"""Adversarial review of 4c1100d (a job's lease in its own fields; claim and
complete results column-wise): ways to lose, duplicate or strand a job, answer
a call wrongly, corrupt the object or change what the HTTP API answers."""

from __future__ import annotations

import asyncio
import copy
import pickle
from pathlib import Path

import orjson
import pytest

from broker import api, archive, codec, routes
from broker import transitions as T
from broker.columns import plain_rows
from broker.errors import InvalidRequest
from broker.state import CLAIMED, COMPLETED, PENDING, Job, Lease, QueueState
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor

NOW = 1_767_225_600_000
FIXTURES = Path(__file__).parent / "fixtures"


def _queue(n: int, now: int = NOW) -> QueueState:
    state = T.new_state(now)
    T.apply(state, T.PushPayloads(tuple(b'{"n":%d}' % i for i in range(n))), now)
    return state


def _commit(state: QueueState, now: int, commit: str = "c-1") -> QueueState:
    """Stamp and encode (filling every line cache), then decode what was written."""
    data = b"".join(codec.encode_parts(_stamped(state, now, commit)))
    return codec.decode(data)


def _stamped(state: QueueState, now: int, commit: str) -> QueueState:
    codec.stamp(state, "w", now, commit)
    return state


def _lines_agree(state: QueueState) -> None:
    """Every job's (cached) line is the line a fresh encode of its fields makes."""
    for job in state.jobs.values():
        cached = codec.job_line(job)
        job._enc = None
        fresh = codec.job_line(job)
        assert cached == fresh, (job, cached, fresh)
        assert orjson.loads(fresh.lstrip(b",\n")) == orjson.loads(orjson.dumps(job.to_dict())), job


# -- 1. lease fields vs cached lines ---------------------------------------------------


def test_heartbeat_after_an_encode_rewrites_the_lease_in_the_object() -> None:
    state = _queue(3)
    jobs = T.apply(state, T.Claim("w", 3, 10_000), NOW).jobs
    _commit(state, NOW)  # every claimed line is now cached
    T.apply(state, T.Heartbeat((jobs[1].token,), 50_000), NOW + 7)
    _lines_agree(state)
    back = _commit(state, NOW + 8, "c-2")
    lease = back.jobs[2].lease
    assert lease == Lease(jobs[1].token, "w", 50_000, NOW + 50_007, NOW + 7)
    assert back.jobs[1].lease == Lease(jobs[0].token, "w", 10_000, NOW + 10_000, NOW)
    # and the reloaded queue reclaims the un-heartbeated ones only
    reclaimed = T.apply(back, T.Reclaim(), NOW + 10_001).ids
    assert sorted(reclaimed) == ["j0000000001", "j0000000003"]
    assert back.jobs[2].status == CLAIMED


def test_complete_after_a_heartbeat_splices_the_heartbeated_line() -> None:
    state = _queue(2)
    jobs = T.apply(state, T.Claim("w", 2, 10_000), NOW).jobs
    _commit(state, NOW)
    T.apply(state, T.Heartbeat((jobs[0].token,), 40_000), NOW + 3)
    _commit(state, NOW + 3, "c-2")  # heartbeated line cached
    T.apply(state, T.Complete(api.parse_complete(
        {"items": [{"token": jobs[0].token, "result": 1}]})), NOW + 5)
    back = _commit(state, NOW + 5, "c-3")
    _lines_agree(state)
    done = back.jobs[1]
    assert done.status == COMPLETED and done.result == b"1" and done.done_commit == "c-3"
    assert done.lease == Lease(jobs[0].token, "w", 40_000, NOW + 40_003, NOW + 3)
    assert back.jobs == state.jobs  # Job equality through the lease property


def test_takeover_of_a_decoded_object_gives_fresh_leases_in_the_written_bytes() -> None:
    state = _queue(2)
    jobs = T.apply(state, T.Claim("w", 2, 10_000), NOW).jobs
    back = _commit(state, NOW)
    later = NOW + 3_600_000  # an hour: every old lease has run out on the old clock
    T.apply(back, T.TakeOver("b-2", "http://b", 30_000), later)
    _lines_agree(back)
    assert T.apply(back, T.Reclaim(), later + 9_999).ids == []  # fresh 10 s leases
    again = _commit(back, later, "c-2")
    for held, seq in zip(jobs, (1, 2), strict=True):
        assert again.jobs[seq].lease == Lease(held.token, "w", 10_000, later + 10_000, NOW)
    # still completable under the same tokens after the takeover
    answers = T.apply(again, T.Complete(T.CompleteItems.of(
        [T.CompleteItem(j.token, None) for j in jobs])), later + 1).items
    assert [a.ok for a in answers] == [True, True]


def test_fail_and_reclaim_clear_the_lease_from_line_and_fields() -> None:
    state = T.new_state(NOW)
    state.settings.max_attempts = 2
    T.apply(state, T.PushPayloads((b"1", b"2")), NOW)
    jobs = T.apply(state, T.Claim("w", 2, 10_000), NOW).jobs
    _commit(state, NOW)
    T.apply(state, T.Fail((T.FailItem(jobs[0].token, "boom", 0),)), NOW + 1)
    T.apply(state, T.Reclaim(), NOW + 10_000)
    _lines_agree(state)
    for job in state.jobs.values():
        assert job.status == PENDING and job.lease is None and job.lease_token is None
        assert "lease" not in orjson.loads(codec.job_line(job).lstrip(b",\n"))
    back = _commit(state, NOW + 10_000, "c-2")
    again = T.apply(back, T.Claim("v", 2, 10_000), NOW + 10_000).jobs
    assert {j.token for j in again}.isdisjoint({j.token for j in jobs})
    stale = T.apply(back, T.Complete(T.CompleteItems.of(
        [T.CompleteItem(j.token) for j in jobs])), NOW + 10_001).items
    assert [a.ok for a in stale] == [False, False]
    # the second attempts dead-letter, redrive makes them claimable with no lease
    T.apply(back, T.Fail(tuple(T.FailItem(j.token, "x") for j in again)), NOW + 10_002)
    assert {j.status for j in back.jobs.values()} == {"dead"}
    T.apply(back, T.Redrive(), NOW + 10_003)
    _lines_agree(back)
    third = T.apply(back, T.Claim("u", 5, 10_000), NOW + 10_003).jobs
    assert len(third) == 2 and all(j.attempt == 1 for j in third)


@pytest.mark.parametrize("name", ["golden_v3_queue.json", "old_5932e4f_queue.json"])
def test_objects_written_before_the_change_reload_and_reencode(name: str) -> None:
    data = (FIXTURES / name).read_bytes()
    state = codec.decode(data)
    back = codec.decode(codec.encode(state))
    assert back.jobs == state.jobs
    for job in state.jobs.values():
        assert (job.lease is not None) == (job.status in (CLAIMED, COMPLETED))
        raw = orjson.loads(codec.job_line(job).lstrip(b",\n"))
        if job.lease is not None:
            assert raw["lease"]["token"] == job.lease.token == job.lease_token
            assert raw["lease"]["expires_at"] == job.to_dict()["lease"]["expires_at"]
    _lines_agree(state)


def test_a_lease_value_is_a_copy_and_refuses_mutation() -> None:
    state = _queue(1)
    T.apply(state, T.Claim("w", 1, 10_000), NOW)
    job = state.jobs[1]
    lease = job.lease
    assert lease is not None
    with pytest.raises(AttributeError):
        lease.expires_ms = 0  # type: ignore[misc]
    assert job.lease_expires_ms == NOW + 10_000


# -- 2. column-wise answers ---------------------------------------------------------------


def test_a_token_twice_stale_and_garbage_tokens_in_one_complete() -> None:
    state = _queue(3)
    jobs = T.apply(state, T.Claim("w", 3, 10_000), NOW).jobs
    T.apply(state, T.Fail((T.FailItem(jobs[2].token, "x", 0),)), NOW)
    body = {"items": [{"token": jobs[0].token, "result": {"a": 1}},
                      {"token": jobs[0].token, "result": {"a": 2}},
                      {"token": jobs[2].token}, {"token": "nonsense"},
                      {"token": jobs[1].token}]}
    answers = T.apply(state, T.Complete(api.parse_complete(body)), NOW + 1).items
    assert [(a.ok, a.status) for a in answers] == [
        (True, COMPLETED), (True, COMPLETED), (False, None), (False, None), (True, COMPLETED)]
    assert state.jobs[1].result == b'{"a":1}'  # the first result is kept
    assert state.counters.completed == 2
    assert [s for seqs in state.completed.values() for s in seqs] == [1, 2]
    code, out = routes._batch_answer(answers)
    assert code == 409 and out["code"] == "stale_token"
    assert [r["ok"] for r in out["results"]] == [True, True, False, False, True]
    assert "status" not in out["results"][2]


def test_a_retried_complete_answers_completed_not_stale() -> None:
    state = _queue(1)
    [job] = T.apply(state, T.Claim("w", 1, 10_000), NOW).jobs
    op = T.Complete(T.CompleteItems.of([T.CompleteItem(job.token, b"1")]))
    first = T.apply(state, op, NOW).items
    _commit(state, NOW)
    again = T.apply(state, op, NOW + 20_000)
    assert again.items == first and not again.changed
    assert routes._batch_answer(again.items) == routes._batch_answer(first)


def test_heartbeat_and_fail_answers_read_as_before() -> None:
    state = _queue(1)
    [job] = T.apply(state, T.Claim("w", 1, 10_000), NOW).jobs
    hb = T.apply(state, T.Heartbeat((job.token, job.token, "j0000000009.1"), 10_000), NOW)
    assert api.items_to_json(hb.items) == [
        {"token": job.token, "ok": True, "reason": None},
        {"token": job.token, "ok": True, "reason": None},
        {"token": "j0000000009.1", "ok": False,
         "reason": "job is gone (completed, purged or never existed)"}]
    failed = T.apply(state, T.Fail((T.FailItem(job.token, "e"), T.FailItem(job.token, "e"))),
                     NOW + 1).items
    assert [(a.ok, a.status) for a in failed] == [(True, PENDING), (True, PENDING)]
    assert state.counters.failed == 1


def test_empty_results_compare_and_serialise_as_before() -> None:
    state = T.new_state(NOW)
    jobs = T.apply(state, T.Claim("w", 5, 10_000), NOW).jobs
    assert jobs == [] and [].__eq__(jobs) is NotImplemented and not jobs and list(jobs) == []
    assert api.claimed_to_json(jobs) == []
    assert orjson.dumps({"jobs": api.claimed_to_json(jobs)}) == b'{"jobs":[]}'
    with pytest.raises(InvalidRequest):
        api.parse_complete({"items": []})
    answers = T.apply(state, T.Complete(T.CompleteItems()), NOW).items
    assert answers == [] and routes._batch_answer(answers) == (200, {"results": []})


def test_columns_behave_as_sequences() -> None:
    state = _queue(4)
    jobs = T.apply(state, T.Claim("w", 4, 10_000), NOW).jobs
    rows = list(jobs)
    assert jobs[::-1] == rows[::-1] and jobs[1:3] == rows[1:3] and jobs[-1] == rows[-1]
    assert rows[2] in jobs and jobs.index(rows[2]) == 2 and jobs.count(rows[0]) == 1
    assert list(reversed(jobs)) == rows[::-1]
    assert pickle.loads(pickle.dumps(jobs)) == rows
    assert copy.deepcopy(jobs) == rows
    assert list(plain_rows(jobs)) == [tuple(r) for r in rows]


def test_claim_json_is_what_a_list_of_leased_jobs_gave() -> None:
    state = _queue(3)
    jobs = T.apply(state, T.Claim("w", 3, 10_000), NOW).jobs
    listed = [T.LeasedJob(*r) for r in plain_rows(jobs)]
    assert orjson.dumps(api.claimed_to_json(jobs)) == orjson.dumps(api.claimed_to_json(listed))
    assert api.claimed_to_json(jobs)[0]["lease_expires_at"] == "2026-01-01T00:00:10.000Z"


# -- 3. through a broker: repeated calls and unknown write outcomes ------------------------


def test_a_repeated_claim_answers_the_same_json(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [T.NewJob(b'{"i":%d}' % i) for i in range(3)])
        key = ("c-1", None)
        body = {"worker": "w", "max_jobs": 2, "lease_s": 30}
        first = await routes.claim(a, "q", body, key)
        again = await routes.claim(a, "q", body, key)
        assert orjson.dumps(first) == orjson.dumps(again)
        assert (await a.stats("q"))["counts"]["claimed"] == 2
        tokens = [j["token"] for j in first[1]["jobs"]]
        done = await routes.complete(a, "q", {"items": [{"token": t} for t in tokens]}, key)
        await crash(a)
        b = await successor(store, Clock())
        repeated = await routes.claim(b, "q", body, key)
        assert [j["token"] for j in repeated[1]["jobs"]] == []  # completed: none still held
        assert await routes.complete(b, "q", {"items": [{"token": t} for t in tokens]},
                                     key) == done
        third = await routes.claim(b, "q", body, (None, None))
        assert len(third[1]["jobs"]) == 1  # the third job, not one of the completed two
        await b.stop(drain_s=5)

    run(main())


@pytest.mark.parametrize("kind", [LOST_REPLY, LOST_REPLY_412, NOT_LANDED])
def test_a_complete_reapplied_after_an_unknown_outcome(tmp_path: Path, kind: str) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store)
        ids = await a.push("q", [T.NewJob(b'"x"'), T.NewJob(b'"y"')])
        jobs = await a.claim("q", "w1", 2, 30.0)
        store.inject("write_if_match", kind, key_contains="queue.json")
        items = api.parse_complete({"items": [{"token": jobs[0].token, "result": 1},
                                              {"token": jobs[0].token, "result": 2},
                                              {"token": "j0000000077.1"},
                                              {"token": jobs[1].token, "result": 3}]})
        answers = await a.complete("q", items)
        assert [(r.ok, r.status) for r in answers] == [
            (True, COMPLETED), (True, COMPLETED), (False, None), (True, COMPLETED)]
        assert len(items) == 4  # the caller's items are left as they were
        await a.stop(drain_s=5)
        return ids, [j.token for j in jobs]

    ids, tokens = run(main())
    lines = sorted((rec["id"], rec["token"], rec["result"]) for rec in archive_lines(inner))
    assert lines == [(ids[0], tokens[0], 1), (ids[1], tokens[1], 3)]
    assert stored(inner).counters.completed == 2


def test_concurrent_completes_in_one_group_commit_get_their_own_answers(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [T.NewJob(b"%d" % i) for i in range(6)])
        jobs = await a.claim("q", "w", 6, 30.0)
        calls = [T.CompleteItems.of([T.CompleteItem(j.token, b"1")]) for j in jobs]
        calls[5] = T.CompleteItems.of([T.CompleteItem(jobs[0].token, b"9"),
                                       T.CompleteItem("j0000000099.77")])
        got = await asyncio.gather(*(a.complete("q", c) for c in calls))
        for j, answers in zip(jobs[:5], got[:5], strict=True):
            assert [(r.token, r.ok) for r in answers] == [(j.token, True)]
        assert [(r.token, r.ok) for r in got[5]] == [(jobs[0].token, True),
                                                     ("j0000000099.77", False)]
        assert len({id(g) for g in got}) == 6
        assert len({id(g.tokens) for g in got if isinstance(g, T.ItemResults)}) == 6
        claims = await asyncio.gather(*(a.claim("q", "v", 1, 30.0) for _ in range(3)))
        assert all(c == [] for c in claims)
        await a.stop(drain_s=5)
        assert stored(store).counters.completed == 5  # jobs[5] was never completed

    run(main())


def test_caller_items_mutated_after_the_call_do_not_change_the_op(tmp_path: Path) -> None:
    """broker.complete takes its items as they are when called: a caller that
    appends to its CompleteItems while the call is in flight (before the group
    commit applies it) does not get the appended item completed by this call
    (found by review: the op had shared the caller's lists)."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [T.NewJob(b"1"), T.NewJob(b"2")])
        jobs = await a.claim("q", "w", 2, 30.0)
        items = T.CompleteItems.of([T.CompleteItem(jobs[0].token, b"1")])
        task = asyncio.ensure_future(a.complete("q", items))
        await asyncio.sleep(0)  # the op is submitted, not yet applied
        items.append(T.CompleteItem(jobs[1].token, b"2"))
        answers = await task
        assert len(answers) == 1, answers
        await a.stop(drain_s=5)

    run(main())


def test_a_claim_through_direct_queue_and_archive(tmp_path: Path) -> None:
    from broker.direct import DirectQueue

    store = FileStore(tmp_path)
    q = DirectQueue(store, "q")
    q.apply(T.PushPayloads((b"1", b"2")))
    jobs = q.apply(T.Claim("w", 2, 30_000)).jobs
    assert len(jobs) == 2
    items = T.CompleteItems.of([T.CompleteItem(j.token, b"7") for j in jobs])
    out = q.apply(T.Complete(items)).items
    assert [r.ok for r in out] == [True, True]
    q.apply(T.PushPayloads((b"3",)))  # archives the completions
    recs = archive.read_all(store, "q")
    assert sorted((r["token"], r["worker"], r["result"]) for r in recs) == sorted(
        (j.token, "w", 7) for j in jobs)


def test_job_equality_and_to_dict_follow_the_lease_fields() -> None:
    a, b = _queue(1), _queue(1)
    T.apply(a, T.Claim("w", 1, 10_000), NOW)
    T.apply(b, T.Claim("w", 1, 10_000), NOW)
    assert a.jobs == b.jobs
    T.apply(b, T.Heartbeat(("j0000000001.1",), 10_000), NOW + 1)
    assert a.jobs != b.jobs
    job = Job(1, b"1", CLAIMED, 0, NOW, 1, 3, NOW,
              lease=Lease("j0000000001.4", "w", 1000, NOW + 1000, NOW))
    assert job.to_dict()["lease"] == {"token": "j0000000001.4", "worker": "w", "lease_s": 1.0,
                                      "expires_at": "2026-01-01T00:00:01.000Z",
                                      "heartbeat_at": "2026-01-01T00:00:00.000Z"}
