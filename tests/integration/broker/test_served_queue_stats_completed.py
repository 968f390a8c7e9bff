"""Stats say how many jobs were done, not only how many await their archive
object: ``completed_total`` and ``completed_per_min`` (the broker serving the
queue: broker.service.served_queue.RecentRate), on a clock only the test
moves; and the ``osqueue stats`` table names them so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from broker.model.ops import CompleteItem
from broker.service.served_queue import RecentRate
from broker.storage import FileStore
from osqueue_spark import start_broker
from osqueue_spark.cli import main
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored, until


def test_the_recent_rate_is_over_the_last_minute_and_falls_to_zero_when_idle() -> None:
    rate = RecentRate()
    assert rate.per_min(0.0) is None
    rate.observe(100.0, 5)
    assert rate.per_min(100.5) is None  # (under a second: nothing to say yet)
    rate.observe(100.5, 10)  # (the same second: the total moves, no new sample)
    rate.observe(110.0, 35)
    assert rate.per_min(130.0) == 60.0  # 30 jobs in the 30 s since the first sample
    rate.observe(170.0, 95)
    assert rate.per_min(170.0) == 60.0  # 60 jobs from 110 s to 170 s
    assert rate.per_min(200.0) == 60.0  # (the 60 at 170 s are within the last minute)
    assert rate.per_min(231.0) == 0.0  # none since 171 s


def test_stats_count_completed_jobs_after_they_left_the_queue_object(tmp_path: Path) -> None:
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock)
        b = await started(store, "http://b", clock=clock)
        try:
            await a.push("q", [b"%d" % i for i in range(40)])
            jobs = await a.claim("q", "w", 30)
            await a.complete("q", [CompleteItem(j.token) for j in jobs])
            await until(lambda: not stored(store).completed)
            clock.advance(30)
            s = await a.stats("q")
            assert s["counts"]["completed"] == 0  # archived: none awaits it
            assert s["completed_total"] == 30 and s["completed_per_min"] == 60.0
            elsewhere = await b.stats("q")  # read from the store: no rate there
            assert elsewhere["completed_total"] == 30
            assert elsewhere.get("completed_per_min") is None
        finally:
            await b.stop(5)
            await a.stop(5)

    run(go())


def test_the_stats_table_names_totals_and_what_awaits_the_archive(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with start_broker(f"file://{tmp_path}") as broker:
        base = ["--broker", broker.url, "--queue", "q"]
        assert main([*base, "push", "1", "2"]) == 0
        capsys.readouterr()
        assert main([*base, "claim", "--max-jobs", "2"]) == 0
        tokens = [line.split('"token":"')[1].split('"')[0]
                  for line in capsys.readouterr().out.splitlines()]
        assert main([*base, "complete", *tokens]) == 0
        capsys.readouterr()
        assert main([*base, "stats"]) == 0
        rows = {(cells := re.split(r"\s{2,}", line.strip(), maxsplit=1))[0]: cells[-1]
                for line in capsys.readouterr().out.splitlines()[2:]}
        assert rows["completed (all time)"] == "2"
        assert "completed (awaiting archive)" in rows and "completed / min (last minute)" in rows
        assert "completed" not in rows  # (the bare name read as "0 done")
