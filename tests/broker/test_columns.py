"""Column-wise results (broker.model.columns) and what they are for: the hot calls
(claim, complete) leave no object per job for the garbage collector to track,
and a claimed job holds its lease in its own fields. An embedded broker shares
the Spark driver's collector, which it may not tune (bench/spark_bench.py)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from broker.http import parsers
from broker.model import transitions as T
from broker.model.columns import plain_rows
from broker.model.job import Lease
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    CompleteItems,
    Heartbeat,
    ItemResults,
    LeasedJob,
    LeasedJobs,
    PushPayloads,
)
from broker.wire import ItemResult

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


def _queue(n: int) -> Any:
    state = T.new_state(NOW)
    T.apply(state, PushPayloads(tuple(b'{"n":%d}' % i for i in range(n))), NOW)
    return state


def test_a_claim_answers_column_wise_and_leaves_nothing_per_job_to_track() -> None:
    state = _queue(1000)
    jobs = T.apply(state, Claim("w", 1000, 60_000), NOW).jobs
    assert isinstance(jobs, LeasedJobs) and len(jobs) == 1000
    assert jobs[0] == LeasedJob("j0000000001", b'{"n":0}', "j0000000001.1", 1, NOW + 60_000)
    for column in jobs.columns:
        assert _tracked(column) == []
    # each claimed job refers to nothing the collector tracks (no Lease object)
    for job in state.jobs.values():
        assert job.lease_token is not None
        assert _tracked(r for r in gc.get_referents(job) if r is not type(job)) == [], job
    assert state.jobs[1].lease == Lease("j0000000001.1", "w", 60_000, NOW + 60_000, NOW)


def test_a_complete_parsed_from_http_answers_column_wise() -> None:
    state = _queue(500)
    jobs = T.apply(state, Claim("w", 500, 60_000), NOW).jobs
    assert isinstance(jobs, LeasedJobs)
    body = {"items": [{"token": t, "result": {"ok": i}} for i, t in enumerate(jobs.tokens)]
            + [{"token": "j0000009999.77"}]}
    items = parsers.parse_complete(body)
    assert isinstance(items, CompleteItems)
    assert items[0] == CompleteItem("j0000000001.1", b'{"ok":0}')
    assert _tracked(items.tokens) == [] and _tracked(items.results) == []
    answers = T.apply(state, Complete(items), NOW + 1).items
    assert isinstance(answers, ItemResults) and len(answers) == 501
    assert answers[0] == ItemResult("j0000000001.1", True, None, "completed")
    assert answers[-1].ok is False and answers[-1].reason
    for column in answers.columns:
        assert _tracked(column) == []
    assert state.counters.completed == 500
    assert state.jobs[2].result == b'{"ok":1}'
    out = parsers.items_to_json(answers)
    assert out[0] == {"token": "j0000000001.1", "ok": True, "reason": None,
                      "status": "completed"}
    assert out[-1]["ok"] is False and "status" not in out[-1]


def test_a_complete_of_named_items_answers_the_same() -> None:
    state = _queue(2)
    jobs = T.apply(state, Claim("w", 2, 60_000), NOW).jobs
    answers = T.apply(state, Complete((CompleteItem(jobs[1].token, b"7"),
                                         CompleteItem("nonsense"))), NOW).items
    assert [a.ok for a in answers] == [True, False]
    assert state.jobs[2].result == b"7"


def test_the_lease_fields_and_the_lease_value_agree() -> None:
    state = _queue(1)
    [held] = T.apply(state, Claim("w", 1, 10_000), NOW).jobs
    job = state.jobs[1]
    T.apply(state, Heartbeat((held.token,), 20_000), NOW + 5)
    assert job.lease == Lease(held.token, "w", 20_000, NOW + 20_005, NOW + 5)
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
