"""Workers against a broker in a dict (no Spark, no broker process): each job's row
and outcome, budgets, lost leases, and ``claim_one``."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import InvalidRequest
from broker.limits import MAX_CLAIM_JOBS, MAX_LEASE_S
from osqueue_spark.workers import (
    RESULT_COLUMNS,
    TRACEBACK_CHARS,
    ProcessConfig,
    claim_one,
    error_text,
    process,
    run_worker,
)
from tests.support.fake_broker import FakeBroker


def work(payload: Any) -> Any:
    if isinstance(payload, dict) and "boom" in payload:
        raise ValueError(payload["boom"])
    if isinstance(payload, dict):
        return {"done": payload}
    return payload * 2


def config(fake: FakeBroker, **kw: Any) -> ProcessConfig:
    return ProcessConfig(fake.url, "q", **{"batch_size": 2, "idle_s": 0, **kw})


def rows_by_id(fake: FakeBroker, cfg: ProcessConfig) -> dict[str, dict[str, Any]]:
    rows = run_worker(work, cfg, fake.client())
    return {r[0]: dict(zip(RESULT_COLUMNS, r, strict=True)) for r in rows}


def test_each_job_is_completed_or_failed_with_a_row() -> None:
    fake = FakeBroker()
    fake.client().push_many([1, {"boom": "bad doc"}, {"boom": "poison", "fail_as": "dead"},
                             {"x": 1}, 5])
    rows = rows_by_id(fake, config(fake))
    assert {i: r["status"] for i, r in rows.items()} == {
        "j0": "completed", "j1": "failed", "j2": "dead", "j3": "completed", "j4": "completed"}
    assert rows["j0"]["result"] == "2" and rows["j3"]["result"] == '{"done":{"x":1}}'
    assert rows["j1"]["error"].startswith("ValueError: bad doc\n")
    assert rows["j1"]["result"] is None and rows["j0"]["error"] is None
    assert all(r["attempts"] == 1 and r["started"] <= r["finished"] for r in rows.values())
    assert all(r["started"].tzinfo is not None for r in rows.values())
    assert all(r["worker"].startswith("spark-") for r in rows.values())
    assert fake.outcomes["j0"] == ("completed", 2)
    assert fake.outcomes["j1"][0] == "failed" and "bad doc" in fake.outcomes["j1"][1]
    assert fake.pending == {} and fake.held == {}


def test_a_job_whose_lease_was_lost_is_reported_lost() -> None:
    fake = FakeBroker()
    fake.client().push_many([1, 2, {"boom": "x"}])
    fake.lost_tokens.update({"t-j1", "t-j2"})
    rows = rows_by_id(fake, config(fake, batch_size=10))
    assert {i: r["status"] for i, r in rows.items()} == {
        "j0": "completed", "j1": "lost", "j2": "lost"}
    assert set(fake.outcomes) == {"j0"}


def test_budgets_stop_the_worker() -> None:
    fake = FakeBroker()
    fake.client().push_many(range(10))
    rows = rows_by_id(fake, config(fake, batch_size=3, max_jobs=4))
    assert sorted(rows) == ["j0", "j1", "j2", "j3"] and len(fake.pending) == 6
    claims = [r.json()["max_jobs"] for r in fake.requests if r.url.endswith("/claim")]
    assert claims == [3, 1]  # never more than the budget left
    assert rows_by_id(fake, config(fake, max_seconds=0)) == {}
    assert len(fake.pending) == 6


def test_failures_carry_the_retry_delay_and_the_traceback_tail() -> None:
    fake = FakeBroker()
    fake.client().push({"boom": "y" * 5000})
    rows = rows_by_id(fake, config(fake, retry_in_s=7.5))
    fail = next(r.json() for r in fake.requests if r.url.endswith("/fail"))
    assert fail["items"][0]["retry_in_s"] == 7.5
    assert len(rows["j0"]["error"]) == TRACEBACK_CHARS


def test_error_text_names_the_error_and_keeps_the_tail() -> None:
    try:
        raise KeyError("k" * 10_000)
    except KeyError as exc:
        text = error_text(exc)
    head, _, tail = text.partition("\n")
    assert head == f"KeyError: {KeyError('k' * 10_000)}" and len(tail) == TRACEBACK_CHARS
    assert tail.endswith("kk'\n")  # the tail: where the traceback names the error


def test_process_checks_its_arguments() -> None:
    with pytest.raises(InvalidRequest, match="callable"):
        process("not a function", broker="http://b:1", queue="q")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="batch_size"):
        process(work, broker="http://b:1", queue="q", batch_size=0)
    with pytest.raises(InvalidRequest, match="batch_size"):
        process(work, broker="http://b:1", queue="q", batch_size=MAX_CLAIM_JOBS + 1)
    with pytest.raises(InvalidRequest, match="lease_s"):
        process(work, broker="http://b:1", queue="q", lease_s=MAX_LEASE_S * 2)
    assert "token" not in repr(ProcessConfig("http://b:1", "q", token="s3cret"))
    assert "s3cret" not in repr(ProcessConfig("http://b:1", "q", token="s3cret"))


def test_claim_one_completes_on_success_and_fails_on_error() -> None:
    fake = FakeBroker()
    client = fake.client()
    client.push_many([{"n": 1}, {"n": 2}])
    with claim_one(client, "me") as ctx:
        assert ctx is not None and ctx.payload == {"n": 1}
        ctx.result = "ok"
    with pytest.raises(RuntimeError, match="broken"), claim_one(client, "me") as ctx:
        raise RuntimeError("broken")
    with claim_one(client, "me") as ctx:
        assert ctx is None  # nothing left
    assert fake.outcomes["j0"] == ("completed", "ok")
    assert fake.outcomes["j1"][0] == "failed" and "broken" in fake.outcomes["j1"][1]
