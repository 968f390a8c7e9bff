"""QueueClient.iter_jobs over a deep queue (segment objects): a page of jobs ends
before the first segment whose lines the broker has not loaded, so a page
shorter than asked is not the end of the queue. A real broker over HTTP; the
store is checked against what the listing shows."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.model.state import MAX_WINDOWS
from broker.service import by_reference
from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from tests.support.inprocess import payloads, stored


def test_iter_jobs_lists_every_job_of_a_queue_over_many_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(by_reference, "SEGMENT_MAX_BYTES", 400)  # about 45 jobs a segment
    with start_broker(f"file://{tmp_path}", segment_push_jobs=50) as broker:
        client = QueueClient(broker.url, "q")
        client.push_many([{"n": i} for i in range(3)])  # inline
        client.push_many([{"n": i} for i in range(3, 803)], batch_size=800)  # by reference
        store = FileStore(tmp_path)
        assert len(stored(store).segment_refs) > 2 * MAX_WINDOWS
        listed = list(client.iter_jobs(page=1000))
        assert [job["seq"] for job in listed] == list(range(1, 804))
        assert sorted(orjson.loads(job["payload"])["n"] if isinstance(job["payload"], str)
                      else job["payload"]["n"] for job in listed) == list(range(803))
        assert sorted(p["n"] for p in payloads(store)) == list(range(803))
