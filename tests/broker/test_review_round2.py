"""Regressions found by adversarial review round 2 of the failure-path work (N1-N6).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from tests.support.inprocess import stored

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
