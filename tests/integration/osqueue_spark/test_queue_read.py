"""The queue table's reader (``QueueReader``) over a queue with segments, without a
SparkSession: ``partitions`` and ``read`` called as Spark calls them, every
partition and the reader through pickle, on the file store and on S3 (moto).
(On a real SparkSession: tests/spark/test_spark_segments.py.)"""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import paths
from broker.errors import SegmentMissing, StateError
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.storage import ObjectStore, store_from_url
from broker.storage.files import FileStore
from osqueue_spark.datasource import reader as reader_module
from osqueue_spark.datasource.reader import (
    QUEUE_SCHEMA,
    HeadPart,
    QueueReader,
    SegmentPart,
    column_names,
)
from osqueue_spark.datasource.source import OsqueueDataSource
from tests.support.inprocess import crash, run, started, stored
from tests.support.segmented import NOW, Segmented, put_head, write_segment, write_segmented
from tests.support.spill_store import held_at_spill_parts
from tests.support.states import new_queue

COLUMNS = column_names(QUEUE_SCHEMA)


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}"
    return str(request.getfixturevalue("s3_url"))


def roundtrip(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


def queue_reader(url: str, queue: str = "q", extra: str = "") -> QueueReader:
    from pyspark.sql.types import StringType, StructField, StructType

    ddl = QUEUE_SCHEMA + extra
    schema = StructType([StructField(name, StringType()) for name in column_names(ddl)])
    reader = OsqueueDataSource({"store": url, "queue": queue}).reader(schema)
    assert isinstance(reader, QueueReader)
    return reader


def read_part(reader: QueueReader, part: Any) -> list[dict[str, Any]]:
    """The rows of one partition, read as an executor reads it (both pickled)."""
    rows = []
    for row in roundtrip(reader).read(roundtrip(part)):
        got = dict(zip(COLUMNS, row, strict=False))
        for name in ("created_at", "run_at", "lease_expires_at"):
            got[name] = None if got[name] is None else round(got[name].timestamp() * 1000)
        rows.append(got)
    return rows


def as_expected(row: dict[str, Any]) -> dict[str, Any]:
    """A row in the form of ``Segmented.expected`` (without the id)."""
    return {"seq": row["seq"], "status": row["status"], "priority": row["priority"],
            "payload": row["payload"], "attempts": row["attempts"],
            "max_attempts": row["max_attempts"], "created_ms": row["created_at"],
            "run_ms": row["run_at"], "worker": row["worker"]}


def snapshot(store: ObjectStore) -> dict[str, bytes]:
    return {key: store.get(key) for key in store.list("")}


def taken_from_b(seg: Segmented, store: ObjectStore, n: int) -> str:
    """Write the next version of ``seg``'s head as the broker does when it claims
    ``n`` jobs from segment B: B's cursor advanced, the jobs in the head as
    claimed. (The broker cannot yet, so the object is edited as JSON.) Returns
    the new etag."""
    raw = orjson.loads(codec.encode(seg.state))
    b = raw["segments"][1]
    template = next(job for job in raw["jobs"] if job["status"] == "claimed")
    lease = next(r for r in raw["claims"] if r["fence"] == template["claim"])
    base = raw["counters"]["fence"] + 1  # (one claim: one record, its fences from here)
    for seq in range(b["first_seq"], b["first_seq"] + n):
        raw["counters"]["fence"] += 1
        raw["jobs"].append({
            **template, "id": f"j{seq:010d}", "seq": seq, "priority": b["priority"],
            "run_at": b["run_at"], "max_attempts": 4,
            "payload": orjson.loads(b'{"n":%d,"doc":"d%d"}' % (seq, seq)), "claim": base})
    lease = {k: v for k, v in lease.items() if k not in ("settled", "cancel")}
    raw["claims"].append({**lease, "fence": base, "n": n,
                          "parts": [{"seq": [b["first_seq"], n]}]})
    b["taken"] = n
    raw["seq"] += 1
    return store.write_if_match(paths.state_key("q"), orjson.dumps(raw), seg.etag)


def test_the_queue_reader_reads_the_head_and_the_untaken_part_of_each_segment(
        store_url: str) -> None:
    """One partition for the head and one per segment with jobs left (A and B;
    C is fully taken, its object gone, and not read): every job once, segment
    jobs from the cursor on only, with the fields they would have in the head.
    The read changes nothing in the store."""
    store = store_from_url(store_url)
    seg = write_segmented(store)
    before = snapshot(store)
    reader = queue_reader(store_url)
    parts = roundtrip(reader).partitions()
    values = [part.value for part in parts]
    assert [type(v) for v in values] == [HeadPart, SegmentPart, SegmentPart]
    assert values[0].etag == seg.etag and values[0].segments == 2
    assert values[0].data == store.read(paths.state_key("q")).data
    assert [v.ref for v in values[1:]] == seg.refs[:2]
    per_part = [read_part(reader, part) for part in parts]
    assert [[row["seq"] for row in rows] for rows in per_part] == [
        [1, 2, 6, 7], [3, 4, 5], [8, 9, 10]]
    rows = [row for part_rows in per_part for row in part_rows]
    assert Counter(row["id"] for row in rows) == dict.fromkeys(seg.expected(), 1)
    assert {row["id"]: as_expected(row) for row in rows} == seg.expected()
    segment_rows = per_part[1] + per_part[2]
    assert {(row["lease_expires_at"], row["last_error"]) for row in segment_rows} == {
        (None, None)}
    assert all(row["errors"] == [] for row in segment_rows)  # (a segment's jobs never failed)
    assert snapshot(store) == before


def test_payload_schema_columns_fill_from_segment_jobs(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    write_segmented(store_from_url(url))
    reader = queue_reader(url, extra=", n long, doc string")
    assert reader.extra == ["n", "doc"]
    rows = [row for part in reader.partitions() for row in roundtrip(reader).read(part)]
    assert sorted(row[len(COLUMNS):] for row in rows) == sorted(
        (seq, f"d{seq}") for seq in range(1, 11))


def test_a_job_taken_from_a_segment_while_the_read_runs_is_read_once(tmp_path: Path) -> None:
    """The plan is of one version (V0): after the broker takes jobs 8 and 9 from
    segment B (V1 holds them claimed, B's cursor at 2), the read still shows
    every job of V0 once, 8 and 9 pending; a read planned after shows V1."""
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    seg = write_segmented(store)
    reader = queue_reader(url)
    planned = reader.partitions()
    taken_from_b(seg, store, 2)
    rows = [row for part in planned for row in read_part(reader, part)]
    assert Counter(row["id"] for row in rows) == dict.fromkeys(seg.expected(), 1)
    assert {row["seq"]: row["status"] for row in rows if row["seq"] in (8, 9, 10)} == {
        8: "pending", 9: "pending", 10: "pending"}
    later = [row for part in reader.partitions() for row in read_part(reader, part)]
    assert Counter(row["id"] for row in later) == dict.fromkeys(seg.expected(), 1)
    assert {row["seq"]: row["status"] for row in later if row["seq"] in (8, 9, 10)} == {
        8: "claimed", 9: "claimed", 10: "pending"}


def test_an_unshipped_head_must_be_the_planned_version_when_segments_were_planned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A head too large to ship in its partition is read again by its task: at
    the planned etag it reads as shipped; if it changed, its jobs could
    overlap the planned segments' (a job taken meanwhile), so the read fails
    saying the queue moved on."""
    monkeypatch.setattr(reader_module, "MAX_SHIPPED_HEAD_BYTES", 0)
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    seg = write_segmented(store)
    reader = queue_reader(url)
    planned = reader.partitions()
    head = planned[0].value
    assert head.data is None and head.etag == seg.etag and head.segments == 2
    assert [row["seq"] for row in read_part(reader, planned[0])] == [1, 2, 6, 7]
    taken_from_b(seg, store, 1)
    with pytest.raises(StateError, match=r"q/queue\.json changed since this read was "
                                         r"planned.*moved on; read it again") as caught:
        read_part(reader, planned[0])
    assert caught.value.__notes__ == ["osqueue error code: state_error"]
    assert [row["seq"] for row in read_part(reader, planned[2])] == [8, 9, 10]


def test_an_unshipped_head_alone_reads_the_version_it_finds_with_its_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planned without segments, the head task may read a later version: it then
    reads that version's segments itself (one version, one task)."""
    monkeypatch.setattr(reader_module, "MAX_SHIPPED_HEAD_BYTES", 0)
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    state = new_queue(NOW)
    etag = put_head(store, "q", state)
    reader = queue_reader(url)
    planned = reader.partitions()
    assert len(planned) == 1 and planned[0].value.segments == 0
    state.segment_refs = [write_segment(store, "q", 1, 3, taken=1)]
    state.counters.enqueued = 3
    put_head(store, "q", state, etag)
    assert [(row["seq"], row["status"]) for row in read_part(reader, planned[0])] == [
        (2, "pending"), (3, "pending")]
    store.delete(paths.state_key("q"))
    assert read_part(reader, planned[0]) == []  # gone since planned: nothing


def test_a_missing_or_changed_segment_fails_the_read_naming_it(store_url: str) -> None:
    """Still referenced by the head, a segment object that is missing or has
    another etag is refused (``segment_missing``, naming the object), never
    read as fewer rows; the store is left as it was."""
    store = store_from_url(store_url)
    seg = write_segmented(store)
    a, b = seg.refs[:2]
    reader = queue_reader(store_url)
    store.delete(b.key)
    before = snapshot(store)
    parts = reader.partitions()
    with pytest.raises(SegmentMissing) as missing:
        read_part(reader, parts[2])
    assert str(missing.value) == (f"queue 'q' references segment {store.url}/{b.key}, which "
                                  "is missing (deleted behind the broker's back?)")
    assert missing.value.__notes__ == ["osqueue error code: segment_missing"]
    assert snapshot(store) == before
    state = decode_state(store.read(paths.state_key("q")).data)
    state.segment_refs[0] = type(a)(a.key, "other-etag", a.first_seq, a.count, a.priority,
                                    a.run_at_ms, a.taken)
    put_head(store, "q", state, store.read(paths.state_key("q")).etag)
    with pytest.raises(SegmentMissing, match=(
            rf"references segment {store.url}/{a.key} at etag 'other-etag', but the object "
            r"has etag '.+' \(rewritten behind the broker's back\?\)")):
        read_part(reader, reader.partitions()[1])


def test_a_segment_dropped_and_deleted_since_the_plan_means_the_queue_moved_on(
        tmp_path: Path) -> None:
    """The broker deletes a segment once the commit that dropped it (all taken,
    or purged) has landed: a read planned before that says the queue moved on
    and to read again, naming the object; so does one whose queue is gone."""
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    seg = write_segmented(store)
    b = seg.refs[1]
    reader = queue_reader(url)
    planned = reader.partitions()
    seg.state.segment_refs = [seg.refs[0]]  # B purged, say
    put_head(store, "q", seg.state, seg.etag)
    store.delete(b.key)
    moved_on = (rf"segment {url}/{b.key} of queue 'q' is gone or changed, and the queue no "
                r"longer references it: the queue moved on since this read was planned .*"
                r"read it again")
    with pytest.raises(SegmentMissing, match=moved_on):
        read_part(reader, planned[2])
    store.delete(paths.state_key("q"))
    with pytest.raises(SegmentMissing, match=moved_on):
        read_part(reader, planned[2])
    assert [row["seq"] for row in read_part(reader, planned[1])] == [3, 4, 5]  # A is there


def test_jobs_held_at_spill_parts_are_read_once_as_claimed_or_completed(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> list[str]:
        a = await started(store, spill_jobs=10, spill_pending=True)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=3) for i in range(30)])
        got = await a.claim("q", "w", max_jobs=30)
        await a.fail("q", [FailItem(j.token, "boom", 0) for j in got])  # (spilled, pending)
        held = await a.claim("q", "w-2", max_jobs=12, lease_s=3600)
        await a.complete("q", [CompleteItem(held[0].token, b"1")])  # (a done entry)
        await crash(a)  # (at once: its drop waits for the archive object and a delay)
        return list(ids)

    ids = run(go())
    assert len(held_at_spill_parts(store)) == 11
    state = stored(store)
    assert not state.jobs.entries and state.done_commits  # (the completion awaits its drop)
    reader = queue_reader(f"file://{tmp_path}")
    rows = [row for part in reader.partitions() for row in read_part(reader, part)]
    assert sorted(row["id"] for row in rows) == sorted(ids)  # each once
    assert Counter(row["status"] for row in rows) == {"claimed": 11, "completed": 1,
                                                      "pending": 18}
    for row in rows:
        if row["status"] in ("claimed", "completed"):
            assert (row["worker"], row["attempts"]) == ("w-2", 2)
        else:
            assert (row["worker"], row["attempts"]) == (None, 1)
    # each keeps its history through the spill object and the record: one failure,
    # all in one commit
    assert {(len(row["errors"]), row["errors"][0][0], row["errors"][0][2]) for row in rows} \
        == {(1, 1, "boom")}
    assert len({row["errors"][0][1] for row in rows}) == 1
