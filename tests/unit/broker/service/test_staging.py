"""Staging and publish (broker/service/staging.py) through brokers: which staging of a
write id is published, a publish retried after it landed, and the sweep of
stagings nobody publishes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from broker import timefmt
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started, stored


def test_second_staging_of_a_write_id_is_the_one_published(tmp_path: Path) -> None:
    """Staging a write id again, on another broker whose clock is 5 s behind the
    first's, replaces the first staging: publish pushes the second one's jobs.
    Which staging was newer was once decided by the brokers' wall clocks, so the
    replaced one was published."""
    store = FileStore(tmp_path)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms - 5_000)  # broker b's clock is 5 s behind a's

    async def main() -> dict:
        a = await started(store, "http://a", clock_a)
        b = await started(store, "http://b", clock_b)
        await a.stage("q", "w-1/p0-t7-c0", b'\t"old"\n')
        clock_a.advance(1)
        clock_b.advance(1)
        await b.stage("q", "w-1/p0-t7-c0", b'\t"new-1"\n\t"new-2"\n')  # replaces it
        out = await a.publish("q", "w-1/", ["w-1/p0-t7-c0"], once="write:w-1/")
        await b.stop(drain_s=5)
        await a.stop(drain_s=5)
        return out

    out = run(main())
    payloads = sorted(j.payload for j in stored(store).jobs.values())
    assert payloads == [b'"new-1"', b'"new-2"'], (out, payloads)


def test_a_publish_retried_after_it_landed_answers_success(tmp_path: Path) -> None:
    """Defect 8: a publish outlives the client's timeout; the client's retry lists
    the staging objects just before the first publish removes them, and must
    answer that the jobs were published (not NotFound, not a second copy)."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    keep = ["w-1/p0-c0", "w-1/p1-c0"]

    async def main() -> list[dict[str, Any]]:
        a = await started(store)
        await a.stage("q", keep[0], b'\t{"n":1}\n\t{"n":2}\n')
        await a.stage("q", keep[1], b'\t{"n":3}\n')
        # the first publish lands; its clean-up is slow (it has not happened yet)
        store.inject("delete", NOT_LANDED, key_contains="staging", times=1)
        first = await a.publish("q", "w-1/", keep, once="write:w-1")
        # the retry lists the chunks, then each is removed just before it is read
        # (if it reads them: a broker that knows the write's key answers at once)
        store.inject("get", None, key_contains="staging", times=None, before=inner.delete)
        retry = await a.publish("q", "w-1/", keep, once="write:w-1")
        await a.stop(drain_s=5)
        return [first, retry]

    first, retry = run(main())
    assert first["published"] == 3 and not first["duplicate"]
    assert retry["duplicate"] and retry["published"] == 0
    assert sorted(orjson.loads(j.payload)["n"] for j in stored(inner).jobs.values()) == [1, 2, 3]
    assert inner.list("q/staging/") == []


def test_restaging_a_write_id_replaces_what_it_held(tmp_path: Path) -> None:
    """Defect 13: staging the same write id again must replace the staged jobs."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.stage("q", "w-2/p0-c0", b'\t"old"\n')
        await a.stage("q", "w-2/p0-c0", b'\t"new-1"\n\t"new-2"\n')
        out = await a.publish("q", "w-2/", ["w-2/p0-c0"], once="write:w-2")
        assert out["published"] == 2
        await a.stop(drain_s=5)

    run(main())
    assert sorted(j.payload for j in stored(store).jobs.values()) == [b'"new-1"', b'"new-2"']
    assert store.list("q/staging/") == []


def test_restaging_on_another_broker_replaces_whatever_the_clocks(tmp_path: Path) -> None:
    """Review R10: "the newest staging wins" was judged by the staging brokers'
    clocks. A staging object is now named by its write id alone."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a", Clock())
        b = await started(store, "http://b", Clock(timefmt.now_ms() - 3600_000))
        await a.stage("q", "w-3/p0-c0", b'\t"first"\n')
        await b.stage("q", "w-3/p0-c0", b'\t"second"\n')  # a retry, on a slower clock
        await a.publish("q", "w-3/", ["w-3/p0-c0"], once="write:w-3")
        await b.stop(drain_s=5)
        await a.stop(drain_s=5)

    run(main())
    assert [j.payload for j in stored(store).jobs.values()] == [b'"second"']


def test_staging_of_a_vanished_writer_is_swept_after_the_ttl_on_our_clock(
        tmp_path: Path) -> None:
    """A staging object whose writer vanished is swept once staged_ttl_s has passed
    on this broker's clock since it first saw the object, and not before."""
    clock = Clock()
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, clock=clock)
        await a.create_queue("q", {"staged_ttl_s": 60})
        await a.stage("q", "w-4/c0", b"\t1\n")
        assert await a.sweep_staging() == 0  # first seen now
        clock.advance(59)
        assert await a.sweep_staging() == 0
        clock.advance(2)
        assert await a.sweep_staging() == 1
        await a.stop(drain_s=5)

    run(main())
    assert store.list("q/staging/") == []


def test_a_write_id_kept_twice_in_one_publish_is_pushed_once(tmp_path: Path) -> None:
    """``keep`` naming one write id twice publishes its chunk once: the second
    read of the chunk once found the staged cache emptied by the first and read
    the object again, so its jobs were pushed twice."""
    store = FileStore(tmp_path)

    async def main() -> dict:
        broker = await started(store, "http://a", Clock())
        await broker.stage("q", "w-1/p0-t1-c0", b'\t"a"\n\t"b"\n')
        out = await broker.publish("q", "w-1/", ["w-1/p0-t1-c0", "w-1/p0-t1-c0"],
                                   once="write:w-1/")
        await broker.stop(drain_s=5)
        return out

    out = run(main())
    payloads = sorted(j.payload for j in stored(store).jobs.values())
    assert payloads == [b'"a"', b'"b"'] and out["published"] == 2, (out, payloads)
