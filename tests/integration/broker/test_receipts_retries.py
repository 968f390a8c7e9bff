"""Receipts through a broker: a call repeated (a client's retry after a lost
answer, on the same broker or on the one that took over, with clocks apart, after
busy seconds) answers as the first did and applies nothing twice."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import orjson
import pytest

from broker.http import routes
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor


def test_a_repeated_claim_answers_the_same_json(tmp_path: Path) -> None:
    """A keyed claim repeated through the HTTP routes answers the same JSON and
    claims nothing more; after a crash and a takeover the repeat hands back no
    token still held (the jobs were completed), a repeated complete answers as
    the first did, and an unkeyed claim gets the one job left."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b'{"i":%d}' % i) for i in range(3)])
        key = ("c-1", None)
        body = {"worker": "w", "max_jobs": 2, "lease_s": 30}
        first = await routes.claim(a, "q", body, key)
        again = await routes.claim(a, "q", body, key)
        assert orjson.dumps(first) == orjson.dumps(again)
        assert (await a.stats("q"))["counts"]["claimed"] == 2
        tokens = [j["token"] for j in first[1]["jobs"]]
        done = await routes.complete(a, "q", {"items": [{"token": t} for t in tokens]}, key)
        await crash(a)
        b = await successor(store, Clock())
        repeated = await routes.claim(b, "q", body, key)
        assert [j["token"] for j in repeated[1]["jobs"]] == []  # completed: none still held
        assert await routes.complete(b, "q", {"items": [{"token": t} for t in tokens]},
                                     key) == done
        third = await routes.claim(b, "q", body, (None, None))
        assert len(third[1]["jobs"]) == 1  # the third job, not one of the completed two
        await b.stop(drain_s=5)

    run(main())


#: the new owner's clock ahead of the old owner's, s (retry_ttl_s is 600 s; 0: the control)
SKEWS = [0.0, 700.0]


@pytest.mark.parametrize("skew_s", SKEWS)
def test_push_retried_after_failover_is_not_enqueued_twice(tmp_path: Path, skew_s: float) -> None:
    """A push whose answer was lost when its broker died, retried with the same
    request key on the broker that took over, answers the first push's ids and
    enqueues nothing, also when the new owner's clock is 700 s ahead (more than
    retry_ttl_s; no skew is the control).

    Receipts were once trimmed by comparing the times the old owner wrote with the
    new owner's clock: after a takeover by a broker whose clock was ahead by more
    than retry_ttl_s, every receipt written seconds before was dropped at once and
    the retry was applied as a new push."""
    store = FileStore(tmp_path)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + round(skew_s * 1000))

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store, "http://a", clock_a)
        first = await a.push("q", [NewJob(b'"order-42"')], request="r-1")
        # the HTTP answer of that push was lost; broker a dies
        await crash(a)
        b = await started(store, "http://b", clock_b)
        clock_b.advance(31)  # b watched a's object for one broker lease
        await b.watch()      # and takes the queue over (its first commit)
        # the client retries the push (same request key), well within retry_ttl_s
        again = await b.push("q", [NewJob(b'"order-42"')], request="r-1")
        await b.stop(drain_s=5)
        return list(first), list(again)

    first, again = run(main())
    payloads = [j.payload for j in stored(store).jobs.values()]
    assert again == first, f"retry answered {again}, first answer was {first}"
    assert payloads.count(b'"order-42"') == 1, payloads


@pytest.mark.parametrize("skew_s", SKEWS)
def test_complete_retried_after_failover_is_not_called_stale(tmp_path: Path, skew_s: float) -> None:
    """A complete that landed before its broker died, retried by the worker on the
    broker that took over (which has archived and dropped the job), is answered ok,
    not stale, also when the new owner's clock is 700 s ahead (the receipt
    trimming across clocks of the push test above)."""
    store = FileStore(tmp_path)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + round(skew_s * 1000))

    async def main() -> tuple[bool, str | None]:
        a = await started(store, "http://a", clock_a)
        await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 60.0)
        [done] = await a.complete("q", [CompleteItem(job.token, b"1")])
        assert done.ok
        await crash(a)  # the worker never saw that answer
        b = await started(store, "http://b", clock_b)
        clock_b.advance(31)
        await b.watch()  # takes over; archives the completion, then drops the job
        for _ in range(500):  # (the drop follows the archive object on b's clock)
            if not stored(store).jobs:
                break
            clock_b.advance(0.1)
            b._queues["q"].loop.poke()
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the new owner never dropped the archived job")
        [again] = await b.complete("q", [CompleteItem(job.token, b"1")])  # worker's retry
        await b.stop(drain_s=5)
        return again.ok, again.reason

    ok, reason = run(main())
    assert [r["id"] for r in archive_lines(store)] == ["j0000000001"]  # it did complete
    assert ok, f"a completion that landed was answered stale: {reason}"


def test_retried_push_after_busy_seconds_is_not_a_second_job(tmp_path: Path) -> None:
    """A keyed push retried after 1,100 other jobs of the queue were completed (more
    settled tokens than retry_keys, set here to its minimum of 1,000) answers the
    first push's ids and makes no second job: settled tokens do not push request
    receipts out of their bound. (On a queue completing 5,000 jobs/s a push's
    receipt was once gone ~20 s later, well inside the client's retry budget.)"""
    store = FileStore(tmp_path)

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store)
        await a.create_queue("q", {"retry_keys": 1000})
        first = list(await a.push("q", [NewJob(b'"invoice-7"')], request="r-push"))
        # (the HTTP answer of that push was lost; the client backs off and retries)
        # meanwhile other workers complete 1100 jobs of the same queue
        await a.push("q", [b"0"] * 1100)
        claimed = await a.claim("q", "w", 1101, 60.0)
        await a.complete("q", [CompleteItem(j.token) for j in claimed
                               if j.payload != b'"invoice-7"'])
        again = list(await a.push("q", [NewJob(b'"invoice-7"')], request="r-push"))
        await a.stop(drain_s=5)
        return first, again

    first, again = run(main())
    copies = [j.id for j in stored(store).jobs.values() if j.payload == b'"invoice-7"']
    assert again == first and len(copies) == 1, (first, again, copies)


def test_a_repeated_purge_does_not_remove_a_later_acknowledged_push(tmp_path: Path) -> None:
    """A purge whose write is slow (1.5 s, past the admin client's 0.5 s timeout) is
    repeated by the client; a push acknowledged between the two attempts is not
    removed by the repeat. (The purge once carried no request key and had no
    receipt, so its second execution removed whatever was pending by then.)"""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    server = start_broker(store)
    try:
        producer = QueueClient(server.url, "q")
        admin = QueueClient(server.url, "q", timeout_s=0.5, retry_s=20)
        producer.push("old")
        slow_once = threading.Event()

        def slow(_key: str) -> None:
            slow_once.set()
            time.sleep(1.5)  # a slow PUT: it lands, after the client's timeout

        store.inject("write_if_match", None, key_contains="q/queue.json", before=slow)
        purged: list[int] = []
        t = threading.Thread(target=lambda: purged.append(admin.purge()))
        t.start()
        assert slow_once.wait(5), "the purge's write never started"
        new_id = producer.push("new")  # acknowledged after the purge
        t.join(30)
        assert purged, "purge did not return"
    finally:
        server.stop()
    jobs = {j.id: j.payload for j in stored(inner).jobs.values()}
    assert new_id in jobs, (
        f"push of 'new' was acknowledged as {new_id} after the purge, but the purge's "
        f"retry removed it (purge answered {purged}); queue now {jobs}")


#: jobs claimed and settled, alternately completed and failed (retry_keys is 1,000)
N = 1100


def test_repeated_fail_right_after_it_landed_is_not_stale(tmp_path: Path) -> None:
    """A fail repeated right after it landed is answered ok, not stale, when the
    settled tokens' runs outnumber retry_keys (1,100 claims, alternately completed
    and failed, with retry_keys=1000): the bound drops the oldest settlements,
    never those of the newest time bucket."""
    store = FileStore(tmp_path)

    async def main() -> tuple:
        a = await started(store)
        await a.create_queue("q", {"retry_keys": 1000})
        await a.push("q", [b"0"] * N)
        claimed = await a.claim("q", "w", N, 60.0)
        assert len(claimed) == N
        odd, even = claimed[0::2], claimed[1::2]
        await a.complete("q", [CompleteItem(j.token) for j in odd])
        answers = await a.fail("q", [FailItem(j.token, "boom", 60_000) for j in even])
        assert all(r.ok for r in answers)
        # the worker did not get that answer; it repeats the fail of its last job
        [again] = await a.fail("q", [FailItem(even[-1].token, "boom", 60_000)])
        stats = await a.stats("q")
        await a.stop(drain_s=5)
        return again, stats["settled_runs"]

    again, runs = run(main())
    assert again.ok, f"a fail that landed one commit ago was answered stale: {again.reason} " \
                     f"(settled runs kept: {runs})"
