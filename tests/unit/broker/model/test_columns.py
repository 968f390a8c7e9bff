"""Column-wise results (broker.model.columns) and what they are for: the hot calls
(claim, complete) leave no object per job for the garbage collector to track,
and a claimed job holds its lease in its own fields. An embedded broker shares
the Spark driver's collector, which it may not tune (bench/spark_bench.py)."""

from __future__ import annotations

import copy
import gc
import pickle
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker.errors import InvalidRequest
from broker.http import parsers, routes
from broker.model import transitions as T
from broker.model.columns import plain_rows
from broker.model.format import archive
from broker.model.job import COMPLETED, PENDING, Lease
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    CompleteItems,
    Fail,
    FailItem,
    Heartbeat,
    ItemResults,
    LeasedJob,
    LeasedJobs,
    PushPayloads,
)
from broker.model.tokens import stored_part
from broker.storage import FileStore
from broker.wire import ItemResult
from tests.support.states import committed, new_queue, queue_of, tagged

NOW = 1_767_225_600_000


def _tracked(values: Any) -> list[Any]:
    return [v for v in values if gc.is_tracked(v)]


def test_columns_read_as_a_sequence_of_rows() -> None:
    rows = ItemResults()
    rows.append(ItemResult("j1.1", True, None, "completed"))
    rows.append(ItemResult("j2.2", False, "stale", None))
    assert len(rows) == 2
    assert rows[0] == ItemResult("j1.1", True, None, "completed")
    assert rows[1].reason == "stale" and rows[-1].token == "j2.2"
    assert rows[0:1] == [ItemResult("j1.1", True, None, "completed")]
    assert [r.ok for r in rows] == [True, False]
    assert rows == [ItemResult("j1.1", True, None, "completed"),
                    ItemResult("j2.2", False, "stale", None)]
    assert rows != [ItemResult("j1.1", True, None, "completed")]
    assert list(plain_rows(rows)) == [("j1.1", True, None, "completed"),
                                      ("j2.2", False, "stale", None)]
    assert rows.tokens == ["j1.1", "j2.2"] and rows.oks == [True, False]
    assert "stale" in repr(rows)
    with pytest.raises(IndexError):
        rows[2]


def test_columns_refuse_lists_of_other_widths_or_lengths() -> None:
    with pytest.raises(ValueError, match="2 lists"):
        CompleteItems(["a"])
    with pytest.raises(ValueError, match="one length"):
        CompleteItems(["a", "b"], [None])


def test_plain_rows_passes_other_sequences_through() -> None:
    items = (CompleteItem("j1.1", b"1"),)
    assert plain_rows(items) is items


def test_a_claim_answers_column_wise_and_leaves_nothing_per_job_to_track() -> None:
    state = queue_of(1000, NOW)
    jobs = T.apply(state, Claim("w", 1000, 60_000), NOW).jobs
    assert isinstance(jobs, LeasedJobs) and len(jobs) == 1000
    assert jobs[0] == LeasedJob("j0000000001", b'{"n":0}', tagged("j0000000001.1"), 1,
                                NOW + 60_000)
    for column in jobs.columns:
        assert _tracked(column) == []
    # each claimed job refers to nothing the collector tracks (no Lease object)
    # but the one claim record the whole claim shares (its lease's numbers)
    (record,) = state.claim_records.values()
    for job in state.jobs.values():
        assert job.lease_token is not None
        assert _tracked(r for r in gc.get_referents(job)
                        if r is not type(job) and r is not record) == [], job
    assert state.jobs[1].lease == Lease("j0000000001.1", "w", 60_000, NOW + 60_000, NOW)


def test_a_complete_parsed_from_http_answers_column_wise() -> None:
    state = queue_of(500, NOW)
    jobs = T.apply(state, Claim("w", 500, 60_000), NOW).jobs
    assert isinstance(jobs, LeasedJobs)
    body = {"items": [{"token": t, "result": {"ok": i}} for i, t in enumerate(jobs.tokens)]
            + [{"token": tagged("j0000009999.77")}]}
    items = parsers.parse_complete(body)
    assert isinstance(items, CompleteItems)
    assert items[0] == CompleteItem(tagged("j0000000001.1"), b'{"ok":0}')
    assert _tracked(items.tokens) == [] and _tracked(items.results) == []
    answers = T.apply(state, Complete(items), NOW + 1).items
    assert isinstance(answers, ItemResults) and len(answers) == 501
    assert answers[0] == ItemResult(tagged("j0000000001.1"), True, None, "completed")
    assert answers[-1].ok is False and answers[-1].reason
    for column in answers.columns:
        assert _tracked(column) == []
    assert state.counters.completed == 500
    assert state.jobs[2].result == b'{"ok":1}'
    out = parsers.items_to_json(answers)
    assert out[0] == {"token": tagged("j0000000001.1"), "ok": True, "reason": None,
                      "status": "completed"}
    assert out[-1]["ok"] is False and "status" not in out[-1]


def test_a_complete_of_named_items_answers_the_same() -> None:
    state = queue_of(2, NOW)
    jobs = T.apply(state, Claim("w", 2, 60_000), NOW).jobs
    answers = T.apply(state, Complete((CompleteItem(jobs[1].token, b"7"),
                                         CompleteItem("nonsense"))), NOW).items
    assert [a.ok for a in answers] == [True, False]
    assert state.jobs[2].result == b"7"


def test_the_lease_fields_and_the_lease_value_agree() -> None:
    state = queue_of(1, NOW)
    [held] = T.apply(state, Claim("w", 1, 10_000), NOW).jobs
    job = state.jobs[1]
    T.apply(state, Heartbeat((held.token,), 20_000), NOW + 5)
    assert job.lease == Lease(stored_part(held.token), "w", 20_000, NOW + 20_005, NOW + 5)
    job.lease = None
    assert job.lease is None and job.lease_token is None
    job.lease = Lease("j0000000001.9", "v", 1, 2, 3)
    assert (job.lease_token, job.lease_worker, job.lease_ms, job.lease_expires_ms,
            job.lease_heartbeat_ms) == ("j0000000001.9", "v", 1, 2, 3)
    assert job.lease.fence == 9


def test_a_row_of_another_width_is_refused_whole() -> None:
    rows = CompleteItems()
    for bad in (("a", None, "extra"), ("a",)):
        with pytest.raises(ValueError, match="2 fields"):
            rows.append(bad)  # type: ignore[arg-type]
        assert rows.columns == ([], [])


# -- answers read as they did before they went column-wise --------------------------


def test_a_token_twice_stale_and_garbage_tokens_in_one_complete() -> None:
    """One complete naming a token twice, a stale token (its job failed), a garbage
    token and a good one answers each item in order: the repeated token completes
    its job once, keeping the first result, and the HTTP answer is a 409
    stale_token with a result per item, a status only on the ok ones."""
    state = queue_of(3, NOW)
    jobs = T.apply(state, Claim("w", 3, 10_000), NOW).jobs
    T.apply(state, Fail((FailItem(jobs[2].token, "x", 0),)), NOW)
    body = {"items": [{"token": jobs[0].token, "result": {"a": 1}},
                      {"token": jobs[0].token, "result": {"a": 2}},
                      {"token": jobs[2].token}, {"token": "nonsense"},
                      {"token": jobs[1].token}]}
    answers = T.apply(state, Complete(parsers.parse_complete(body)), NOW + 1).items
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
    """A complete repeated after its commit (20 s later) answers as the first did
    and changes nothing; the HTTP answers are the same."""
    state = queue_of(1, NOW)
    [job] = T.apply(state, Claim("w", 1, 10_000), NOW).jobs
    op = Complete(CompleteItems.of([CompleteItem(job.token, b"1")]))
    first = T.apply(state, op, NOW).items
    committed(state, NOW)
    again = T.apply(state, op, NOW + 20_000)
    assert again.items == first and not again.changed
    assert routes._batch_answer(again.items) == routes._batch_answer(first)


def test_heartbeat_and_fail_answers_read_as_before() -> None:
    """Heartbeat and fail answers read as they did before results went column-wise:
    a repeated token is answered ok twice, an unknown job's reason says why; a
    fail naming one token twice fails the job once."""
    state = queue_of(1, NOW)
    [job] = T.apply(state, Claim("w", 1, 10_000), NOW).jobs
    gone = tagged("j0000000009.1")
    hb = T.apply(state, Heartbeat((job.token, job.token, gone), 10_000), NOW)
    assert parsers.items_to_json(hb.items) == [
        {"token": job.token, "ok": True, "reason": None},
        {"token": job.token, "ok": True, "reason": None},
        {"token": gone, "ok": False,
         "reason": "job is gone (completed, purged or never existed)"}]
    failed = T.apply(state, Fail((FailItem(job.token, "e"), FailItem(job.token, "e"))),
                     NOW + 1).items
    assert [(a.ok, a.status) for a in failed] == [(True, PENDING), (True, PENDING)]
    assert state.counters.failed == 1


def test_empty_results_compare_and_serialise_as_before() -> None:
    """Empty claim and complete results compare, test false and serialise as empty
    lists do; a complete body without items is refused."""
    state = new_queue(NOW)
    jobs = T.apply(state, Claim("w", 5, 10_000), NOW).jobs
    assert jobs == [] and [].__eq__(jobs) is NotImplemented and not jobs and list(jobs) == []
    assert parsers.claimed_to_json(jobs) == []
    assert orjson.dumps({"jobs": parsers.claimed_to_json(jobs)}) == b'{"jobs":[]}'
    with pytest.raises(InvalidRequest):
        parsers.parse_complete({"items": []})
    answers = T.apply(state, Complete(CompleteItems()), NOW).items
    assert answers == [] and routes._batch_answer(answers) == (200, {"results": []})


def test_columns_behave_as_sequences() -> None:
    """Claimed-job columns behave as a sequence of rows: slices, negative indexes,
    membership, index, count, reversed, pickling and deep copies give what the
    list of rows gives."""
    state = queue_of(4, NOW)
    jobs = T.apply(state, Claim("w", 4, 10_000), NOW).jobs
    rows = list(jobs)
    assert jobs[::-1] == rows[::-1] and jobs[1:3] == rows[1:3] and jobs[-1] == rows[-1]
    assert rows[2] in jobs and jobs.index(rows[2]) == 2 and jobs.count(rows[0]) == 1
    assert list(reversed(jobs)) == rows[::-1]
    assert pickle.loads(pickle.dumps(jobs)) == rows
    assert copy.deepcopy(jobs) == rows
    assert list(plain_rows(jobs)) == [tuple(r) for r in rows]


def test_claim_json_is_what_a_list_of_leased_jobs_gave() -> None:
    """The JSON of a column-wise claim is byte for byte the JSON of the same jobs as
    a list of LeasedJob rows."""
    state = queue_of(3, NOW)
    jobs = T.apply(state, Claim("w", 3, 10_000), NOW).jobs
    listed = [LeasedJob(*r) for r in plain_rows(jobs)]
    dumped = orjson.dumps(parsers.claimed_to_json(jobs))
    assert dumped == orjson.dumps(parsers.claimed_to_json(listed))
    assert parsers.claimed_to_json(jobs)[0]["lease_expires_at"] == "2026-01-01T00:00:10.000Z"


def test_a_claim_through_direct_queue_and_archive(tmp_path: Path) -> None:
    """Claims and completes through DirectQueue answer column-wise too, and the
    archive records each job's token, worker and result."""
    from tests.support.direct import DirectQueue

    store = FileStore(tmp_path)
    q = DirectQueue(store, "q")
    q.apply(PushPayloads((b"1", b"2")))
    jobs = q.apply(Claim("w", 2, 30_000)).jobs
    assert len(jobs) == 2
    items = CompleteItems.of([CompleteItem(j.token, b"7") for j in jobs])
    out = q.apply(Complete(items)).items
    assert [r.ok for r in out] == [True, True]
    q.apply(PushPayloads((b"3",)))  # archives the completions
    recs = archive.read_all(store, "q")
    assert sorted((r["token"], r["worker"], r["result"]) for r in recs) == sorted(
        (stored_part(j.token), "w", 7) for j in jobs)  # the archive keeps the stored token
