"""The segment sweep against a push by reference whose commit is being retried
(found while sizing the chaos runner's short grace period).

A push by reference writes its segment objects, then commits their references.
While that commit is in flight, the loop's state holds the references and the
sweep (SegmentStore.sweep_served) keeps the objects. But when the write's
outcome is unknown (a timeout), the loop drops its state and re-reads the queue
object; meanwhile the sweep sees no in-memory state, asks only the landed head
(which does not reference the new segment yet) and deletes the object once it
has listed it for ``segment_grace_s``. The loop's retry then lands the
references, and the push is acknowledged with its jobs in an object that no
longer exists: every claim of them fails with segment_missing. So the objects
a push has written are held from the sweep until the push is answered
(SegmentStore.hold / release), and their grace period starts again then.

With the defaults (600 s of grace, a 30 s commit timeout after which the loop
gives up) this needs a write that lands minutes late; with a short grace it
needs a commit that fails and re-reads for longer than what is left of it.
Real file store, store checked.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import orjson

from broker import paths
from broker.storage.files import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, segment_objects, started, stored, until

QUEUE_KEY = paths.state_key("q")


def test_a_sweep_keeps_the_segments_of_a_push_whose_commit_is_retried(
        tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))
    held, release = threading.Event(), threading.Event()

    def hold(_key: str) -> None:  # the loop's re-read, held as a slow store holds it
        held.set()
        release.wait(30)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=10, segment_grace_s=10.0)
        await a.push("q", [b'{"n":0}'])
        # the reservation's commit is the 1st write of the state, the refs' the 2nd: it
        # times out without landing, and the loop re-reads the object
        store.inject("write_if_match", NOT_LANDED, nth=2, key_contains=QUEUE_KEY)
        store.inject("read", None, key_contains=QUEUE_KEY, before=hold)
        push = asyncio.create_task(a.push("q", [orjson.dumps({"n": i}) for i in range(1, 51)]))
        await until(held.is_set)
        written = segment_objects(store)
        assert len(written) == 1  # written at once: well inside half the grace period
        await a.sweep_staging()  # lists it
        clock.advance(11)  # the write's timeout and the re-read took 11 s
        await a.sweep_staging()
        release.set()
        ids = await push
        assert len(ids) == 50  # acknowledged
        refs = [ref.key for ref in stored(store).segment_refs]
        assert refs == written
        # every acknowledged job is in an object the head references
        assert segment_objects(store) == refs
        await a.stop()

    try:
        run(go())
    finally:
        release.set()
