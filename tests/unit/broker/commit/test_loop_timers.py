"""The commit loop's timers (broker/commit/loop.py): whatever storage did, an idle or
faulted queue's loop neither spins (starving the event loop, or waking for ever
to write nothing) nor dies."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.errors import PayloadTooLarge
from broker.model.ops import CompleteItem, NewJob
from broker.storage import FileStore
from tests.support.broker_process import eventually
from tests.support.faults import LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started, until
from tests.support.pause import SkippedPause


def test_event_loop_keeps_running_after_a_lost_drop_commit(tmp_path: Path) -> None:
    """The broker's event loop keeps answering after the commit that drops archived
    jobs landed with its reply lost and the object unreadable for
    commit_timeout_s, storage then coming back.

    The archiver's record of landed archive objects was once cleaned only after a
    landed commit: the fault retry re-read, found nothing to drop, wrote nothing,
    and the timer kept asking for a drop now, so the commit loop spun without ever
    awaiting, freezing every queue and the HTTP server until a broker-record
    renewal fell due (for ever with a clock that does not move, as here)."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro, timeout: float = 20.0):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    def responsive(timeout: float = 3.0) -> bool:
        try:
            call(asyncio.sleep(0), timeout)
            return True
        except TimeoutError:
            return False

    gate = threading.Event()
    store.inject("put", None, key_contains="/archive/", before=lambda _k: gate.wait(10))

    # (the re-reads' backoff skipped on an injected pause, counted against
    # commit_timeout_s all the same; a faulted loop re-reads every 0.1 s, not 2 s)
    a = call(started(store, clock=clock, commit_timeout_s=0.5, pause=SkippedPause(),
                     fault_retry_s=0.1))
    call(a.push("q", [NewJob(b'"x"')]))
    [job] = call(a.claim("q", "w1", 1, 300.0))
    call(a.complete("q", [CompleteItem(job.token, b"1")]))  # commit N; archive write held
    qloop = a._queues["q"].loop
    # an idle timer commit (broker record renewal) lands meanwhile: last batch = 0 ops
    clock.advance(21)
    loop.call_soon_threadsafe(qloop.poke)
    eventually(lambda: qloop.stats.commits >= 4, 10, "the idle timer commit")
    assert qloop.stats.last_batch == 0
    # the commit that drops the archived job lands, its reply is lost, and storage
    # cannot be read for commit_timeout_s
    store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
    store.inject("read", NOT_LANDED, key_contains="queue.json", times=None)
    gate.set()  # the archive object lands; the drop commit goes out ~1 s later

    def dropped() -> bool:  # the drop commit landed (its reply then lost)
        return ("write_if_match", LOST_REPLY, "q/queue.json") in store.injected and \
            store.inner.read("q/queue.json").data.count(b'"status":"completed"') == 0

    eventually(dropped, 10, "the drop commit to land")
    eventually(lambda: qloop.fault is not None, 10, "the loop to give up reading (faulted)")
    clock.mono += 2.0  # monotonic time passes (the wall clock too, but less than lease/3)
    store.heal()  # storage is back; the fault retry re-reads within fault_retry_s
    # the re-read clears the fault; the loop then spun at once, never awaiting again
    eventually(lambda: qloop.fault is None, 10, "the fault retry's re-read")
    alive = responsive() and responsive()
    if not alive:
        clock.advance(20)  # only a due renewal ends the spin; let the test clean up
        responsive(10)
    call(a.stop(drain_s=5))
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    assert alive, "the broker's event loop stopped answering (commit loop spinning)"


def test_long_idle_streak_does_not_kill_the_commit_loop(tmp_path: Path) -> None:
    """A queue's commit loop survives 1024 idle timer commits in a row (set by hand;
    with --lease-s 3600 and many delayed jobs falling due at distinct times it
    takes 20 minutes) and still takes pushes. The idle back-off once computed
    2 ** 1024 as a float, raising OverflowError outside the loop's try block: the
    loop task ended and every later call waited for ever."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, lease_s=3600.0)
        await a.push("q", [NewJob(b"1")])
        loop = a._queues["q"].loop
        loop._idle_commits = 1024  # 1024 idle timer commits in a row
        loop.poke()
        # the loop wakes, looks at its timers (with the streak) and waits again,
        # clearing the wake-up; or its task ends
        await until(lambda: not loop._wake.is_set() or loop._task is None or loop._task.done())
        assert loop._task is not None and not loop._task.done(), (
            f"commit loop task ended: {loop._task.exception()!r}")
        await asyncio.wait_for(a.push("q", [NewJob(b"2")]), 5)
        await a.stop(drain_s=2)

    run(main())


# A 4 s window of wall time (what the loop does in it is what is counted): slow,
# so make test runs it and make check does not.
@pytest.mark.slow
def test_refused_keyed_push_to_a_new_queue_does_not_leave_a_timer_spinning(
        tmp_path: Path) -> None:
    """A keyed push refused (payload too large) as the first call to a new queue
    leaves no timer spinning: in 4 s its loop runs at most two empty timer
    commits. The lazy-write mark of a queue whose object does not exist was once
    never cleared, waking its loop every ~1.28 s for ever."""
    async def main() -> tuple[int, object, bool]:
        a = await started(FileStore(tmp_path), "http://a")
        with pytest.raises(PayloadTooLarge):
            await a.push("q2", [b'"' + b"p" * (2 << 20) + b'"'],
                         request="r-0123456789ab-0", floor=0)
        loop = a._queues["q2"].loop
        # a window, not a wait for an event: what is counted is what the loop does
        # (nothing, or a commit every ~1.28 s) in those 4 s
        await asyncio.sleep(4.0)
        out = (loop._idle_commits, loop.state.receipts.unwritten_since, loop.etag is None)
        await a.stop(drain_s=5)
        return out

    idle, since, absent = run(main())
    assert idle <= 2, (f"queue q2 has no object (absent={absent}); its loop ran {idle} "
                       f"empty timer commits in 4 s; unwritten_since={since} never clears")
