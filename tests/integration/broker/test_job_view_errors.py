"""The job views over HTTP give a job's error history as ``errors`` wherever
the job is: ``[]`` for one that never failed (as ``spark.read``'s errors
column gives), its failures oldest first for one that did, and null for an
archived job (an archive line keeps ``last_error`` alone): ``GET
jobs/{id}`` for a job of the head, of a segment and claimed, and every row of
``GET jobs``. Through a real broker process. Before: a never-failed job's view
had no ``errors`` at all."""

from __future__ import annotations

from pathlib import Path

import orjson
import urllib3

from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.inprocess import stored


def _get(url: str) -> dict:  # type: ignore[type-arg]
    r = urllib3.request("GET", url, retries=False)
    assert r.status == 200, r.data
    out: dict = orjson.loads(r.data)  # type: ignore[type-arg]
    return out


def test_every_job_view_has_errors_empty_for_a_job_that_never_failed(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "10") as broker:
        client = QueueClient(broker.url, "q", retry_s=5)
        client.create(max_attempts=3)
        head = client.push_many([{"n": i} for i in range(4)])
        in_segment = client.push_many([{"s": i} for i in range(12)])
        assert stored(FileStore(tmp_path)).segment_refs  # (they went by reference)
        failed, held, done = client.claim("w-1", 3)
        client.fail(failed.token, "boom", retry_in_s=0)
        client.complete(done.token, {"ok": True})
        base = f"{broker.url}/v1/queues/q/jobs"

        views = {job_id: _get(f"{base}/{job_id}") for job_id in (head[3], held.id,
                                                                  in_segment[5], failed.id)}
        assert views[head[3]]["location"] == "queue" and views[head[3]]["errors"] == []
        assert views[held.id]["status"] == "claimed" and views[held.id]["errors"] == []
        assert views[in_segment[5]]["location"] == "segment"
        assert views[in_segment[5]]["errors"] == []
        [entry] = views[failed.id]["errors"]
        assert (entry["attempt"], entry["error"]) == (1, "boom")

        rows = [row for row in _get(f"{base}?limit=1000")["jobs"] if row["id"] != done.id]
        assert len(rows) == 15 and all("errors" in row for row in rows), rows
        assert {row["id"]: len(row["errors"]) for row in rows if row["errors"]} == {failed.id: 1}
        assert all(row["errors"] == [] for row in client.jobs("pending", 1000)
                   if row["id"] != failed.id)

        archived = eventually(lambda: (view := _get(f"{base}/{done.id}"))["location"]
                              == "archive" and view, what="archived")
        assert "errors" in archived and archived["errors"] is None  # (not kept: unknown)
