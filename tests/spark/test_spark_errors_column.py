"""The queue table's ``errors`` column (``spark.read.format("osqueue")``) on a
real local SparkSession, classic and Connect: each job's error history as
``GET .../jobs/{id}`` shows it (oldest first, the same attempts, times and
texts), wherever the job lives: a job failed three times then dead in the head,
dead jobs in a spill object, a failed job claimed again (held, in the head);
a job that never failed has ``[]``, not null."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker import timefmt
from broker.model.ops import FailItem, NewJob
from broker.storage.files import FileStore
from tests.support.inprocess import run, started, stored

pytestmark = pytest.mark.spark

SPILL_JOBS = 4


def _queue_with_histories(root: Path) -> dict[str, list[tuple[int, int, str]]]:
    """Six dead jobs in a spill object (one failure each, SPILL_JOBS 4), a job
    failed three times and dead (inline: alone, under SPILL_JOBS), one failed
    once and claimed again (held), one never failed: each job's history as
    the broker's job view gives it, ``(attempt, failed_ms, error)``."""
    store = FileStore(root)

    async def go() -> dict[str, list[tuple[int, int, str]]]:
        a = await started(store, spill_jobs=SPILL_JOBS)
        spilled = await a.push("q", [NewJob(b'{"s":%d}' % i, max_attempts=1) for i in range(6)])
        got = await a.claim("q", "w", max_jobs=6)
        await a.fail("q", [FailItem(j.token, f"gone {j.id}\n  at line {i}", 0)
                           for i, j in enumerate(got)])
        [thrice] = await a.push("q", [NewJob(b'{"t":1}', max_attempts=3)])
        for attempt in range(1, 4):
            [job] = await a.claim("q", "w", max_jobs=1)
            assert job.id == thrice
            await a.fail("q", [FailItem(job.token, f"attempt {attempt} failed", 0)])
        [held] = await a.push("q", [NewJob(b'{"h":1}', max_attempts=3)])
        [job] = await a.claim("q", "w", max_jobs=1)
        await a.fail("q", [FailItem(job.token, "", 0)])  # (a failure without text: "")
        [job] = await a.claim("q", "w-2", max_jobs=1, lease_s=3600)
        assert job.id == held
        [never] = await a.push("q", [b'{"n":1}'])
        views = {job_id: await a.job("q", job_id) for job_id in [*spilled, thrice, held, never]}
        await a.stop()
        return {job_id: [(e["attempt"], timefmt.parse(e["failed_at"]), e["error"])
                         for e in view.get("errors", [])] for job_id, view in views.items()}

    return run(go())


def test_the_errors_column_is_each_jobs_history_as_the_job_view_shows_it(
        any_spark: Any, tmp_path: Path) -> None:
    want = _queue_with_histories(tmp_path)
    state = stored(FileStore(tmp_path))
    assert [ref.kind for ref in state.spill_refs] == ["dead"]  # the six, off the head
    ids = sorted(want)
    thrice, held, never = ids[6:]
    assert {state.job(i).status for i in (thrice, held)} == {"dead", "claimed"}  # inline
    df = any_spark.read.format("osqueue").option("store", f"file://{tmp_path}") \
        .option("queue", "q").load()
    assert df.columns[-1] == "errors" and df.columns[:14][-1] == "group"
    rows = df.selectExpr(
        "id", "status", "last_error", "transform(errors, e -> named_struct("
        "'attempt', e.attempt, 'ms', unix_millis(e.failed_at), 'error', e.error)) AS errors"
    ).collect()
    got = {r["id"]: [(e["attempt"], e["ms"], e["error"]) for e in r["errors"]] for r in rows}
    assert got == want
    assert [attempt for attempt, _, _ in got[thrice]] == [1, 2, 3]
    assert got[thrice][-1][2] == "attempt 3 failed" and got[held] == [(1, want[held][0][1], "")]
    assert got[ids[0]][0][2] == f"gone {ids[0]}\n  at line 0"  # (the whole text, kept)
    assert got[never] == []
    last = {r["id"]: r["last_error"] for r in rows}
    assert all(last[i] == (want[i][-1][2] or None) for i in ids if want[i])
