"""Regressions found by adversarial review round 4 of the failure-path work (G1-G4).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from osqueue_spark import client as client_mod
from tests.support.inprocess import stored

# -- G3 ----------------------------------------------------------------------
# G3: the fork rebuild in ``QueueClient.request`` is not atomic: a thread of the
# child that checks ``self._pid`` after another child thread has set it in
# ``_own()`` but before ``_own()`` has replaced ``self._requests`` (and ``self._http``)
# goes on with the PARENT's request numbering (same client id, same next number)
# and the parent's pooled connections. Its push carries the parent's next request
# key; when the parent later sends its own next push, the broker finds that key's
# receipt and replays the child's ids: the parent is told its push is durable
# (with the id of the child's job) and its job is never enqueued.
#
# ``_own`` assigns ``self._pid = os.getpid()`` FIRST, then the lock, the
# ``_Requests`` and the pool; ``request`` tests ``self._pid != os.getpid()`` without
# a lock. The scheduling imposed: the child's first thread is switched out inside
# ``_own`` right after ``_pid`` is set (a widened window, nothing else is faked).

def test_forked_threads_never_reuse_the_parents_request_keys(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q", timeout_s=20)
        client.push("p0")  # parent's call 0; its next call is number 1
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: two threads use the inherited client at once
            code = 1
            try:
                in_own, t2_done = threading.Event(), threading.Event()
                original = client_mod._Requests.__init__

                def slow_init(self: object) -> None:
                    if threading.current_thread().name == "T1":
                        in_own.set()  # _own() has set self._pid already
                        t2_done.wait(10)
                    original(self)  # type: ignore[arg-type]

                client_mod._Requests.__init__ = slow_init  # type: ignore[method-assign]
                got: dict[str, str] = {}
                t1 = threading.Thread(target=lambda: got.__setitem__("c1", client.push("c1")),
                                      name="T1")
                t1.start()
                in_own.wait(10)
                got["c2"] = client.push("c2")  # thread 2 (here: the child's main thread)
                t2_done.set()
                t1.join(20)
                os.write(out_w, f"{got.get('c1')},{got.get('c2')}".encode())
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        child_ids = os.read(out_r, 200).decode()
        parent_id = client.push("parent-1")  # the parent's call 1
    finally:
        server.stop()
    payloads = {j.id: j.payload for j in stored(store).jobs.values()}
    assert status == 0
    assert payloads.get(parent_id) == b'"parent-1"', (
        f"the parent was told its push 'parent-1' is job {parent_id}, which holds "
        f"{payloads.get(parent_id)!r}; the child's jobs were {child_ids}; the queue holds "
        f"{sorted(payloads.values())} (parent-1 was never enqueued)")
