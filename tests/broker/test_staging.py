"""Staging and publish (broker/staging.py) through brokers: which staging of a
write id is published."""

from __future__ import annotations

from pathlib import Path

from broker.storage import FileStore
from tests.support.faults import Clock
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
