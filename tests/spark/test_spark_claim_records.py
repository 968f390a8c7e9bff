"""``spark.read.format("osqueue")`` of a format-5 head on a real local SparkSession:
claimed rows come from claim records (worker, lease expiry, a cancel mark), one
record taking jobs from the head and from a segment, some of its positions
settled; every job once, and the per-status counts equal the broker's stats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths, timefmt
from broker.model.ops import CompleteItem, FailItem
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import bodies, run, started

pytestmark = pytest.mark.spark


def test_claimed_rows_and_counts_of_claim_records_match_the_broker(
        spark: Any, tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def fill() -> dict[str, Any]:
        a = await started(store, clock=clock, segment_push_jobs=4)
        await a.push("q", bodies(2))  # inline 1-2
        await a.push("q", bodies(6, 2))  # a segment: 3-8
        one = await a.claim("q", "w1", 5, 30.0)  # 1-5: the head's and the segment's
        await a.complete("q", [CompleteItem(one[0].token)])
        await a.release("q", [one[1].token])
        await a.fail("q", [FailItem(one[2].token, "boom", 60_000)])
        await a.cancel("q", [one[3].id])
        two = await a.claim("q", "w2", 1, 5.0)  # the released job 2, new fence
        assert [j.id for j in two] == [one[1].id]
        await a.stop(drain_s=5)
        # the stats of the stopped queue's head (a broker that does not serve it):
        # before the stop waited for the archive write, a completed job still counts
        b = await started(store, url="http://b", clock=clock)
        try:
            return await b.stats("q")
        finally:
            await b.stop(drain_s=5)

    stats = run(fill())
    head = orjson.loads(store.read(paths.state_key("q")).data)
    assert [(r["worker"], r["n"]) for r in head["claims"]] == [("w1", 5), ("w2", 1)]
    rows = spark.read.format("osqueue").option("store", f"file://{tmp_path}") \
        .option("queue", "q").load().selectExpr(
            "id", "status", "worker", "unix_millis(lease_expires_at) AS exp",
            "cancel_requested_at IS NOT NULL AS marked", "last_error").collect()
    got = {r["id"]: r.asDict() for r in rows}
    assert len(rows) == len(got)
    expires = {r["worker"]: r["expires_at"] for r in head["claims"]}

    claimed = {i: (r["worker"], r["exp"], r["marked"]) for i, r in got.items()
               if r["status"] == "claimed"}
    assert claimed == {
        "j0000000002": ("w2", timefmt.parse(expires["w2"]), False),
        "j0000000004": ("w1", timefmt.parse(expires["w1"]), True),
        "j0000000005": ("w1", timefmt.parse(expires["w1"]), False),
    }
    # the failed job is pending again with its error; the completed one is archived
    assert (got["j0000000003"]["status"], got["j0000000003"]["last_error"]) == ("pending", "boom")
    assert sorted(got) == [f"j{s:010d}" for s in range(2, 9)]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    assert counts == {k: v for k, v in stats["counts"].items() if v} == {"pending": 4, "claimed": 3}
