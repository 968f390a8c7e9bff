"""Probes for the OLD code (commit 7962099), run beside the copied tests.

Each probe repeats the scenario of one failure-path test, but where that test
stops at an assertion that is not the defect's own (an API that did not exist,
a first assertion about something else), the probe goes on and checks the
defect's observable result on the old code. A probe PASSES when the defect is
present: it asserts the defective behaviour. Nothing here is meant for the new
code.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import orjson
import pytest

from broker import state as S
from broker import transitions
from broker.direct import DirectQueue
from broker.errors import NotFound, NotTheBroker, StorageUnavailable, UnknownQueue
from broker.storage import FileStore
from broker.transitions import CompleteItem, NewJob
from tests.broker.faults import EIO, ENOSPC, LATE, LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.broker.inprocess import archive_lines, crash, run, started, stored


def test_probe_defect1_completion_is_lost(tmp_path: Path) -> None:
    """Scenario of test_completion_that_landed_under_a_takeover_is_answered_and_kept."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def other_broker_takes_over(_key: str) -> None:
        DirectQueue(inner, "q", writer="b-other").apply(
            transitions.TakeOver("b-other", "http://b", 30_000))

    async def main() -> str:
        a = await started(store)
        [jid] = await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 30.0)
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json",
                     after=other_broker_takes_over)
        with pytest.raises(NotTheBroker):  # the landed complete is denied
            await a.complete("q", [CompleteItem(job.token, b"1")])
        await crash(a)
        return jid

    jid = run(main())
    assert stored(inner).job(jid) is None  # not in the state (the landed commit removed it)
    assert [r for r in archive_lines(inner) if r["id"] == jid] == []  # archive undone: LOST


def test_probe_defect1_push_denied_then_duplicated(tmp_path: Path) -> None:
    """Scenario of test_push_with_an_unknowable_outcome_is_not_denied_and_its_retry_adds_nothing,
    without request keys (the old API had none)."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def other_broker_writes_a_lot(_key: str) -> None:
        other = DirectQueue(inner, "q", writer="b-other")
        other.apply(transitions.TakeOver("b-other", "http://b", 30_000))
        for i in range(S.LINEAGE + 2):
            other.apply(transitions.Push((NewJob(orjson.dumps(f"other-{i}")),)))
        other.apply(transitions.ClearBroker("b-other"))

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json",
                     after=other_broker_writes_a_lot)
        with pytest.raises(NotTheBroker):  # denied, although it landed
            await a.push("q", [NewJob(b'"mine"')])
        await crash(a)
        b = await started(inner, url="http://b")
        await b.push("q", [NewJob(b'"mine"')])  # what a client does after "not the broker"
        await b.stop(drain_s=5)

    run(main())
    mine = [j for j in stored(inner).jobs.values() if j.payload == b'"mine"']
    assert len(mine) == 2  # one push(), two jobs


def test_probe_defect2_late_landing_loses_the_completion(tmp_path: Path) -> None:
    """Scenario of test_a_write_that_lands_late_answers_its_own_results."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> tuple[str, transitions.ItemResult]:
        a = await started(store, clock=clock)
        [jid] = await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 10.0)
        store.inject("write_if_match", LATE, key_contains="queue.json")
        store.inject("read", None, key_contains="queue.json",
                     before=lambda _key: clock.advance(11))
        store.inject("write_if_match", None, key_contains="queue.json",
                     before=store.land_late)
        [answer] = await a.complete("q", [CompleteItem(job.token, b"1")])
        await a.stop(drain_s=5)
        return jid, answer

    jid, answer = run(main())
    assert not answer.ok and "stale" in (answer.reason or "")  # told "stale"
    assert stored(inner).job(jid) is None  # attempt 1 landed: the job left the state
    assert [r for r in archive_lines(inner) if r["id"] == jid] == []  # and its archive was undone


@pytest.mark.parametrize("skew_s", [31.0, 3600.0])
def test_probe_defect3_takeover_reclaims_first(tmp_path: Path, skew_s: float) -> None:
    """test_takeover_gives_claimed_jobs_fresh_leases_on_its_own_clock without its
    first check (the old broker takes every queue at start, lease or not)."""
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + round(skew_s * 1000))
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a", clock_a, lease_s=5.0)
        await a.push("q", [NewJob(b'"x"'), NewJob(b'"y"')])
        held = await a.claim("q", "w1", 2, 30.0)
        await crash(a)
        b = await started(store, "http://b", clock_b, lease_s=5.0)
        stats = await b.stats("q")
        assert stats["served_by_this_broker"]
        assert stats["reclaimed_total"] == 2 and stats["counts"]["claimed"] == 0  # reclaimed
        beats = await b.heartbeat("q", [j.token for j in held], 30.0)
        assert not any(r.ok for r in beats)  # the holders lost their jobs
        await b.stop(drain_s=5)

    run(main())


def test_probe_defect6_nan_setting_is_accepted(tmp_path: Path) -> None:
    """retry_ttl_s does not exist on the old code; an old float setting takes NaN."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.create_queue("q", {"dedup_ttl_s": float("nan")})  # accepted (no 422)
        assert b'"dedup_ttl_s":null' in store.read("q/queue.json").data  # written as null
        with pytest.raises(TimeoutError):  # a keyed push: round(NaN) kills the commit loop
            await asyncio.wait_for(a.push("q", [NewJob(b"1", key="k")]), 3)
        task = a._queues["q"].loop._task
        assert task is not None and task.done() and isinstance(task.exception(), ValueError)
        await crash(a)

    run(main())


def test_probe_defect8_publish_retry_gets_not_found(tmp_path: Path) -> None:
    """test_a_publish_retried_after_it_landed_answers_success: the old first publish
    already raised (its clean-up failed after the commit); the retry is probed here."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    keep = ["w-1/p0-c0", "w-1/p1-c0"]

    async def main() -> None:
        a = await started(store)
        await a.stage("q", keep[0], b'\t{"n":1}\n\t{"n":2}\n')
        await a.stage("q", keep[1], b'\t{"n":3}\n')
        store.inject("delete", NOT_LANDED, key_contains="staging", times=2)
        with pytest.raises(StorageUnavailable):  # published, but the caller is told it failed
            await a.publish("q", "w-1/", keep, once="write:w-1")
        assert len(stored(inner).jobs) == 3
        store.inject("get", None, key_contains="staging", times=None, before=inner.delete)
        with pytest.raises(NotFound):  # the retry: NotFound although published
            await a.publish("q", "w-1/", keep, once="write:w-1")
        await a.stop(drain_s=5)

    run(main())


@pytest.mark.parametrize("kind", [ENOSPC, EIO])
def test_probe_defect9_oserror_kills_the_commit_loop(tmp_path: Path, kind: str) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1")])
        await a.push("other", [NewJob(b"1")])
        store.inject("write_if_match", kind, key_contains="q/queue.json", times=None)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(a.push("q", [NewJob(b"2")]), 3)  # never answered
        task = a._queues["q"].loop._task
        assert task is not None and task.done() and isinstance(task.exception(), OSError)
        assert await a.push("other", [NewJob(b"2")])  # other queues still serve
        store.heal()
        with pytest.raises(TimeoutError):  # healed storage: the queue stays wedged
            await asyncio.wait_for(a.push("q", [NewJob(b"3")]), 3)
        await crash(a)

    run(main())


def test_probe_defect9_foreign_object_kills_the_commit_loop(tmp_path: Path) -> None:
    from broker import keys
    from broker.errors import ForeignState

    inner = FileStore(tmp_path)

    async def main() -> None:
        a = await started(inner)
        await a.push("q", [NewJob(b"1")])
        good = inner.read(keys.state_key("q"))
        inner.write_if_match(keys.state_key("q"), b'{"format":"other"}', good.etag)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(a.push("q", [NewJob(b"2")]), 3)
        task = a._queues["q"].loop._task
        assert task is not None and task.done() and isinstance(task.exception(), ForeignState)
        assert inner.read(keys.state_key("q")).data == b'{"format":"other"}'  # not overwritten
        bad = inner.read(keys.state_key("q"))
        inner.write_if_match(keys.state_key("q"), good.data, bad.etag)  # operator fixes it
        with pytest.raises(TimeoutError):  # still wedged
            await asyncio.wait_for(a.push("q", [NewJob(b"3")]), 3)
        await crash(a)

    run(main())


def test_probe_defect11_stop_hangs(tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1")])
        for method in ("write_if_match", "read", "put", "list", "delete", "head"):
            store.inject(method, NOT_LANDED, times=None)
        waiting = asyncio.create_task(a.push("q", [NewJob(b"2")]))
        await asyncio.sleep(0.2)
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(a.stop(drain_s=1.0), 10)  # bound 1 s; still running at 10 s
        assert time.monotonic() - began >= 10
        assert not waiting.done()  # and the push is still unanswered
        waiting.cancel()
        await crash(a)

    run(main(), timeout_s=30)


def test_probe_defect14_once_keys_never_trimmed(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> list[int]:
        a = await started(store, clock=clock)
        await a.create_queue("q", {"dedup_ttl_s": 60, "dedup_keys": 1})
        sizes = []
        for i in range(5):
            await a.stage("q", f"w-{i}/c0", b"\t1\n")
            await a.publish("q", f"w-{i}/", [f"w-{i}/c0"], once=f"write:w-{i}:" + "x" * 200)
            sizes.append((await a.stats("q"))["approx_state_bytes"])
        clock.advance(61)
        await a.push("q", [NewJob(b"1")])
        assert len(stored(store).once) == 5  # past dedup_ttl_s, none trimmed
        await a.stop(drain_s=5)
        return sizes

    sizes = run(main())
    steps = [b - a for a, b in itertools.pairwise(sizes)]
    print("approx_state_bytes after each publish:", sizes, "steps:", steps)
    # one job's estimate: the key is not counted
    assert all(s == steps[0] for s in steps) and steps[0] < 300


def test_probe_defect16_reads_create_loops_and_move_queues(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        b = await started(store, "http://b")  # started first: it has no queues
        a = await started(store, "http://a")
        await a.push("q", [NewJob(b"1"), NewJob(b"2")])
        await a.claim("q", "w", 1, 1.0)  # a lease that runs out in 1 s (a timer)
        assert (await b.stats("q"))["total"] == 2  # a read on the standby
        await asyncio.sleep(1.6)
        assert stored(store).broker is not None and stored(store).broker.url == "http://b"
        with pytest.raises(NotTheBroker):  # the healthy owner lost its queue to a read
            await a.push("q", [NewJob(b"3")])
        for name in ("nope", "nope-2"):
            with pytest.raises(UnknownQueue):
                await b.stats(name)
        assert {"nope", "nope-2"} <= set(b._queues)  # reads created loops
        await b.stop(drain_s=5)
        await crash(a)

    run(main())


def test_probe_defect18_orphan_archive_line(tmp_path: Path) -> None:
    from broker import archive

    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def foreign_push(_key: str) -> None:
        DirectQueue(inner, "q", writer="tool").apply(transitions.Push((NewJob(b'"t"'),)))

    async def main() -> str:
        a = await started(store)
        [jid] = await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 30.0)
        store.inject("write_if_match", NOT_LANDED, key_contains="queue.json",
                     before=foreign_push)
        store.inject("delete", NOT_LANDED, key_contains="archive", times=None)
        [answer] = await a.complete("q", [CompleteItem(job.token, b"1")])
        assert answer.ok
        await a.stop(drain_s=5)
        return jid

    jid = run(main())
    assert len([r for r in archive_lines(inner) if r["id"] == jid]) == 2
    assert [r["id"] for r in archive.read_all(inner, "q")].count(jid) == 2  # completed twice
