"""``spark.read.format("osqueue")`` of a queue whose claims from a segment are
held in claim records (``held_in_records``), on a real local SparkSession and
the file store: jobs held at a record's segment part are read once, as
claimed, with the record's worker and expiry; one completed and awaiting its
archive object (a done entry), as completed; the rest of the segment as
pending; one partition per segment with jobs of either kind, beside the head's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.model import tokens
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.segment_format import segment_lines
from broker.model.ops import Claim, Complete, CompleteItem
from broker.model.state import SegmentWindows
from broker.storage import store_from_url
from tests.support.segmented import NOW, payload, put_head, write_segment
from tests.support.states import new_queue

pytestmark = pytest.mark.spark

LEASE_MS = 600_000


def test_held_and_done_segment_jobs_are_read_once_as_claimed_and_completed(
        spark: Any, tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    state = new_queue(NOW)
    tokens.bind(state, "q", lambda n: b"k" * n)
    ref = write_segment(store, "q", 1, 8)
    state.counters.enqueued = 8
    state.segment_refs = [ref]
    state.windows = SegmentWindows()
    state.windows.put(ref, 0, segment_lines(store.get(ref.key), ref))
    state.held_in_records = True
    got = T.apply(state, Claim("w-9", 5, LEASE_MS), NOW).jobs
    T.apply(state, Complete((CompleteItem(got.tokens[2], b'{"ok":1}'),)), NOW)
    codec.stamp(state, "b", NOW, "c-1")
    put_head(store, "q", state)
    assert not state.jobs  # (held and done in the record only)

    df = spark.read.format("osqueue").option("store", url).option("queue", "q").load()
    assert df.rdd.getNumPartitions() == 2  # the head, and the segment
    rows = sorted(df.selectExpr(
        "seq", "status", "payload", "attempts", "worker",
        "unix_millis(lease_expires_at) AS expires_ms", "spark_partition_id() AS part").collect(),
        key=lambda r: r["seq"])
    assert [(r["seq"], r["status"]) for r in rows] == [
        (1, "claimed"), (2, "claimed"), (3, "completed"), (4, "claimed"), (5, "claimed"),
        (6, "pending"), (7, "pending"), (8, "pending")]
    assert [r["payload"] for r in rows] == [payload(s).decode() for s in range(1, 9)]
    assert {r["part"] for r in rows} == {1}
    held = [r for r in rows if r["status"] == "claimed"]
    assert all((r["worker"], r["expires_ms"], r["attempts"]) == ("w-9", NOW + LEASE_MS, 1)
               for r in held)
    assert all(r["worker"] is None for r in rows if r["status"] == "pending")
