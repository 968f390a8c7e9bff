"""``spark.read.format("osqueue")`` of a deep queue (segment objects) on a real local
SparkSession: the queue object's jobs and the pending jobs of its segments, one
partition per segment with jobs left, each job once; a segment object missing
or of another etag fails the read naming it. On the file store and on S3 (moto).
(The reader's paths one by one, without Spark: test_queue_read.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker import paths
from broker.errors import UnknownQueue
from broker.model.format.decode import decode_state
from broker.storage import store_from_url
from tests.support.segmented import put_head, write_segmented

pytestmark = pytest.mark.spark


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}"
    return str(request.getfixturevalue("s3_url"))


def load(spark: Any, url: str, queue: str = "q", **options: str) -> Any:
    reader = spark.read.format("osqueue").option("store", url).option("queue", queue)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_deep_queue_reads_every_job_once_a_partition_per_segment(
        spark: Any, store_url: str) -> None:
    """Head jobs (1, 2 claimed; 6, 7 pending), segment A from its cursor (3-5),
    segment B whole (8-10), fully taken C not read: three partitions, every
    job once with its fields; payloadSchema and status filters work on
    segment rows as on head rows."""
    seg = write_segmented(store_from_url(store_url))
    df = load(spark, store_url)
    assert df.rdd.getNumPartitions() == 3  # the head, A and B
    rows = df.selectExpr(
        "id", "seq", "status", "priority", "payload", "attempts", "max_attempts",
        "unix_millis(created_at) AS created_ms", "unix_millis(run_at) AS run_ms", "worker",
        "lease_expires_at IS NULL AND last_error IS NULL AS plain",
        "spark_partition_id() AS part").collect()
    got = {row["id"]: row.asDict() for row in rows}
    assert len(rows) == len(got) == 10
    parts: dict[int, list[int]] = {}
    for row in sorted(rows, key=lambda r: r["seq"]):
        parts.setdefault(row["part"], []).append(row["seq"])
    assert parts == {0: [1, 2, 6, 7], 1: [3, 4, 5], 2: [8, 9, 10]}
    assert {id_: {k: v for k, v in row.items() if k not in ("id", "part", "plain")}
            for id_, row in got.items()} == seg.expected()
    assert all(got[f"j{seq:010d}"]["plain"] for seq in range(3, 11))
    typed = load(spark, store_url, payloadSchema="n long, doc string")
    pending = typed.where("status = 'pending'").select("id", "n", "doc").collect()
    assert sorted(tuple(row) for row in pending) == [
        (f"j{seq:010d}", seq, f"d{seq}") for seq in range(3, 11)]
    assert typed.where("status = 'claimed'").count() == 2
    assert typed.where("priority = 5 AND n > 8").count() == 2
    with pytest.raises(UnknownQueue, match="no-such-queue"):
        load(spark, store_url, "no-such-queue").count()
    assert load(spark, store_url, "no-such-queue", missingQueue="empty").count() == 0


def test_a_missing_or_changed_segment_fails_the_read_naming_it(spark: Any,
                                                              tmp_path: Path) -> None:
    """Never fewer rows: the task that reads the segment fails with
    ``segment_missing`` naming the object (deleted, or another etag)."""
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    seg = write_segmented(store)
    a, b = seg.refs[:2]
    store.delete(b.key)
    with pytest.raises(Exception, match=(
            rf"(?s)references segment {store.url}/{b.key}, which is missing.*"
            r"osqueue error code: segment_missing")):
        load(spark, url).collect()
    state = decode_state(store.read(paths.state_key("q")).data)
    state.segment_refs = [type(a)(a.key, "other", a.first_seq, a.count, a.priority,
                                  a.run_at_ms, a.taken)]
    put_head(store, "q", state, store.read(paths.state_key("q")).etag)
    with pytest.raises(Exception, match=(
            rf"(?s)references segment {store.url}/{a.key} at etag 'other', but the object "
            r"has etag .*osqueue error code: segment_missing")):
        load(spark, url).where("status = 'claimed'").collect()


def test_every_scan_of_one_dataframe_reads_the_segments_pushdown_or_not(
        any_spark: Any, tmp_path: Path) -> None:
    """One DataFrame, scanned after (or beside, in one query) a scan with
    ``status = 'claimed'``: each scan gets every row its filter passes, the
    segments' pending jobs included, with ``filterPushdown=true`` as without.
    (PySpark 4.3 hands every scan of one relation what its last pushdown
    planned: a reader that pruned segments for ``status = 'claimed'`` dropped
    them from ``df`` and from the other side of a union.) Classic and Spark
    Connect."""
    url = f"file://{tmp_path}"
    write_segmented(store_from_url(url))

    def scans(pushdown: bool) -> list[list[int]]:
        df = load(any_spark, url, filterPushdown=str(pushdown).lower())
        got = [df.where("status = 'claimed'").union(df), df.where("status = 'claimed'"), df,
               df.where("status = 'pending' OR priority = 5"),
               df.where("status = 'pending'").union(df.where("status = 'claimed'"))]
        return [sorted(row["seq"] for row in each.select("seq").collect()) for each in got]

    every = list(range(1, 11))
    assert scans(False) == [
        [1, 1, 2, 2, *every[2:]], [1, 2], every, [3, 4, 5, 6, 7, 8, 9, 10], every]
    assert scans(True) == scans(False)
