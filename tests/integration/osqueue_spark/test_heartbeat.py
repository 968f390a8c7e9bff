"""The heartbeat thread outlives any failure of one beat.

A beat that raises something other than an ``OsqueueError`` (a 200 answer a
proxy mangled into HTML fails to parse as JSON, say) used to end the thread:
the leases it held then lapsed in the middle of the batch, and the jobs were
delivered again to other consumers while the batch was still running.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from osqueue_spark import QueueClient, start_broker
from osqueue_spark.heartbeat import Heartbeater


class FlakyHeartbeats:
    """A real client whose first heartbeat raises ``ValueError`` (not an
    ``OsqueueError``); every later one goes to the broker. ``beaten`` is set
    once ``want`` heartbeats reached the broker after the failure."""

    def __init__(self, client: QueueClient, want: int) -> None:
        self.client, self.want, self.calls = client, want, 0
        self.beaten = threading.Event()

    def heartbeat(self, tokens: Any, lease_s: float) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise ValueError("unexpected character: line 1 column 1 (char 0)")
        results = self.client.heartbeat(tokens, lease_s)
        if self.calls > self.want:
            self.beaten.set()
        return results


def test_a_beat_that_raises_does_not_end_the_heartbeats(tmp_path: Path) -> None:
    lease_s = 1.0
    with start_broker(f"file://{tmp_path}") as broker:
        client = QueueClient(broker.url, "hb")
        (job_id,) = client.push_many([{"payload": {"n": 1}}])
        (job,) = client.claim("holder", 1, lease_s)
        flaky = FlakyHeartbeats(client, want=4)  # 4 beats a third of a lease apart
        hb = Heartbeater(flaky, lease_s)
        hb.add([job.token])
        try:
            assert flaky.beaten.wait(10 * lease_s), "the heartbeats stopped after one failed"
            assert hb._thread.is_alive()
            # more than a lease after the claim, the job is still held: nobody else gets it
            assert client.claim("other", 1, lease_s) == []
            stats = client.stats()
            assert stats["counts"]["claimed"] == 1 and stats["reclaimed_total"] == 0
            assert hb.take_lost() == set()
        finally:
            hb.stop()
        assert client.complete(job.token).ok  # the holder still completes it, once
        assert client.stats()["completed_total"] == 1 and job.id == job_id
