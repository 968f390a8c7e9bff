"""Regressions found by adversarial review round 4 of the failure-path work (G1-G4).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from broker import transitions as T
from broker.errors import (
    OsqueueError,
    OutcomeUnknown,
)
from broker.storage import FileStore
from broker.transitions import NewJob
from osqueue_spark import QueueClient, start_broker
from osqueue_spark import client as client_mod
from tests.support.faults import LATE, FaultyStore
from tests.support.inprocess import run, started, stored

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


# -- G4 ----------------------------------------------------------------------
# G4: ``CommitLoop._commit`` answers the call whose apply raised a non-OsqueueError
# with a final (non-retryable, 500) "internal error" BEFORE it looks at ``attempts``;
# when an earlier attempt of the same batch may still land (verdict "pending": the
# write timed out and the object is still the version it was written over), that
# attempt carries this very call, applied fine the first time. It lands later: the
# caller was told its call failed for good (QueueClient does not retry a 500), yet
# its push is in the queue; the producer's own re-push makes two.
#
# The trigger is simulated: a bug whose outcome depends on the state or the clock
# (the re-apply runs at another ``now``). The path exists only for such bugs, and
# promise 3 says a call that may have landed is answered OutcomeUnknown.

def test_bad_call_whose_earlier_attempt_may_land_is_not_told_it_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    real = T._HANDLERS[T.PushPayloads]
    seen = {"n": 0}

    def flaky(state, op, now_ms):  # type: ignore[no-untyped-def]
        if op.payloads == (b'"order-42"',):
            seen["n"] += 1
            if seen["n"] == 2:  # a bug that bites on the re-apply only
                raise RuntimeError("simulated bug")
        return real(state, op, now_ms)

    monkeypatch.setitem(T._HANDLERS, T.PushPayloads, flaky)

    async def main() -> object:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", LATE, key_contains="q/queue.json")
        try:
            await a.push("q", [b'"order-42"'], request="r-0123456789ab-0", floor=0)
            answer: object = "ids"
        except OsqueueError as exc:
            answer = exc
        store.land_late()  # the timed-out PUT of attempt 1 lands
        await a.stop(drain_s=5)
        return answer

    answer = run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == b'"order-42"']
    if copies:
        assert isinstance(answer, OutcomeUnknown) or answer == "ids", (
            f"the push was answered {type(answer).__name__} (retryable="
            f"{getattr(answer, 'retryable', None)}): {answer}; yet attempt 1 carrying it "
            f"landed: the queue holds it as {copies}")
