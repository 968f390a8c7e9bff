"""The queue table's reader (``QueueReader``) over a queue whose claims hold
jobs at claim records' spill parts (no line in the head): each such job is
read once, from its spill object, as claimed with its worker and attempts (or
completed, awaiting its archive object); the object's untaken jobs pending.
Without a Spark session: partitions planned and read as the driver and the
executors would (pickled)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.storage.files import FileStore
from tests.integration.osqueue_spark.test_queue_read import queue_reader, read_part
from tests.support.inprocess import crash, run, started, stored
from tests.support.spill_store import held_at_spill_parts


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
