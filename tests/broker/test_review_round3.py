"""Regressions found by adversarial review round 3 of the failure-path work (F1-F6).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import urllib3

from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from tests.support.faults import FaultyStore
from tests.support.inprocess import stored

# -- F3 ----------------------------------------------------------------------
# F3: a QueueClient inherited across fork() still shares its kept-alive HTTP
# connections with the parent, so parent and child read each other's answers.
#
# da952a3 made a forked client draw a new client id (``_Requests.begin`` checks
# ``os.getpid()``), but the urllib3 ``PoolManager`` (``QueueClient._http``) is not
# renewed: the child inherits the parent's idle keep-alive socket, and both pool
# copies hand the *same* TCP connection out. When the parent's call is still
# being served on it and the child sends its own call on it, the broker answers
# them in order on that one connection: the child reads the parent's answer and
# the parent reads the child's. Here both push: each is told the id of the
# other's job (a producer that records the id, e.g. to track or cancel the job,
# records the wrong one; with a claim on one side and a push on the other, the
# pusher gets a claim answer and the claimer a push answer).
#
# The only scheduling imposed: the parent reads its answer after the child has
# read one (a process switch at that point; nothing is faked in the broker, whose
# store is merely slow to write the parent's push, as a loaded S3 is).
#
# Responsible: osqueue_spark/client.py ``_Requests.begin`` renews the id on fork
# but ``QueueClient`` keeps ``self._http`` (and ``self._lock``) from before it.

def test_forked_client_reads_its_own_answers(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q", timeout_s=20)
        client.push("before-fork")  # leaves one kept-alive connection in the pool
        go_r, go_w = os.pipe()
        done_r, done_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: push once the parent's push is on the wire
            try:
                os.read(go_r, 1)
                job_id = client.push("child")
                os.write(out_w, job_id.encode())
            finally:
                os.write(done_w, b"x")
                os._exit(0)
        # the parent: its push's write is slow on the store (1 s)
        store.inject("write_if_match", None, key_contains="q/queue.json",
                     before=lambda _k: time.sleep(1.0))
        original = urllib3.connection.HTTPConnection.getresponse
        once = threading.Event()

        def getresponse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if not once.is_set():
                once.set()
                os.write(go_w, b"x")  # request sent; the child pushes now
                os.read(done_r, 1)    # and reads an answer before we do
            return original(self, *args, **kwargs)

        urllib3.connection.HTTPConnection.getresponse = getresponse
        try:
            parent_id = client.push("parent")
        finally:
            urllib3.connection.HTTPConnection.getresponse = original
        child_id = os.read(out_r, 100).decode()
        os.waitpid(pid, 0)
    finally:
        server.stop()
    payloads = {j.id: j.payload for j in stored(inner).jobs.values()}
    assert payloads.get(parent_id) == b'"parent"' and payloads.get(child_id) == b'"child"', (
        f"parent was told its job is {parent_id} ({payloads.get(parent_id)!r}), the child "
        f"{child_id} ({payloads.get(child_id)!r}); the queue holds {payloads}")
