"""Regressions found by adversarial review round 2 of the failure-path work (N1-N6).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker import keys
from broker.storage import FileStore
from broker.transitions import NewJob
from osqueue_spark import QueueClient, start_broker
from tests.support.inprocess import run, started, stored

# -- N1 ----------------------------------------------------------------------
# N1: a queue object written by the previous release (commit 5932e4f, the same
# format VERSION 2) is refused as corrupt by the current code: the broker will not
# start, the queue is wedged, and a client's retry of a push whose answer was lost
# across the upgrade cannot be answered at all.
#
# The fixture ``fixtures/old_5932e4f_queue.json`` was written by the broker of
# commit 5932e4f itself (``make_old_object.py``, run with that tree on PYTHONPATH):
# two jobs pushed with request key r-0123456789ab-0, one claimed and completed.
# Its ``receipts`` is a list of per-commit receipt objects, the layout that
# release wrote; ``broker.receipts.Receipts.decode`` now requires a dict
# ``{"requests": ..., "settled": ...}`` and raises ValueError -> CorruptState.
# VERSION was not bumped, so the object is not even reported as "older/newer",
# and the failure-model rule "a corrupt object is never overwritten" makes it
# permanent. (An old broker reading a new object fails the same way, so a rolling
# upgrade with brokers of both versions on one store wedges every queue either
# way.)

FIXTURE = Path(__file__).parent / "fixtures" / "old_5932e4f_queue.json"


def test_current_broker_serves_a_queue_written_by_the_previous_release(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create_if_absent(keys.state_key("q"), FIXTURE.read_bytes())

    async def main() -> list[str]:
        b = await started(store, "http://new")  # raises CorruptState today
        # the producer's push (request key r-0123456789ab-0) had its answer lost
        # during the upgrade; its retry must answer the same ids
        again = await b.push("q", [NewJob(b'"a"'), NewJob(b'"b"')],
                             request="r-0123456789ab-0", floor=0)
        await b.stop(drain_s=5)
        return list(again)

    again = run(main())
    assert again == ["j0000000001", "j0000000002"]
    assert len(stored(store).jobs) <= 2


# -- N6 ----------------------------------------------------------------------
# N6: a QueueClient inherited across fork() keeps its client id and call counter,
# so parent and child send the same request keys; the broker answers the second
# push with the first one's ids and creates nothing: an acknowledged push is lost.
#
# ``_Requests`` (osqueue_spark/client.py) draws the client id once
# (``uuid.uuid4().hex[:12]``) and counts calls in the object; pickling makes a
# new one (``__setstate__``) but fork() copies it. A module-level client created
# before a pre-fork server (gunicorn --preload, Celery prefork, multiprocessing
# with the fork start method, a PySpark worker forked from its daemon after an
# import-time client) then has N processes numbering ``r-{same id}-{n}`` from the
# same n. The broker replays the receipt of key r-X-n (``transitions._push``:
# ``earlier = state.receipts.push_ids(op.request)``), so the child's push is
# answered with the parent's job id and its job is never enqueued. (The file
# store already re-arms its locks at fork: ``os.register_at_fork``.)

def test_push_from_a_forked_copy_of_a_client_is_enqueued(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q")  # e.g. created at import time
        client.push("before-fork")
        go_r, go_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: push once told to, report the id, leave
            try:
                os.read(go_r, 1)
                job_id = client.push("child")
                os.write(out_w, job_id.encode())
            finally:
                os._exit(0)
        parent_id = client.push("parent")
        os.write(go_w, b"x")
        child_id = os.read(out_r, 100).decode()
        os.waitpid(pid, 0)
    finally:
        server.stop()
    payloads = {j.id: j.payload for j in stored(store).jobs.values()}
    assert child_id != parent_id and payloads.get(child_id) == b'"child"', (
        f"child's push was answered {child_id!r} (parent's: {parent_id!r}); queue holds "
        f"{payloads}")
