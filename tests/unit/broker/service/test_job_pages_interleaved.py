"""Pages of jobs read while other batches run between their steps (deep
queues, broker.service.job_pages): claims moving segment jobs into the
head, fails putting them back, cancels of jobs inside segments. A client
following ``next_after`` (and the dashboard following ``has_next``) sees each
job once, in seq order, and never misses one nothing touched. In-process
broker over a memory store, segments of a few jobs so pages span many."""

from __future__ import annotations

import asyncio
import random

import pytest

from broker.model.ops import FailItem
from broker.service.broker import Broker
from broker.service.dashboard import Dashboard
from broker.service.history import History
from broker.storage import MemoryStore
from tests.support.inprocess import run, started


async def _listing(broker: Broker, limit: int) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = await broker.jobs("q", None, limit, after)
        seen += [job["id"] for job in page]
        if len(page) < limit:
            return seen
        after = page[-1]["id"]


async def _walk(dash: Dashboard, limit: int) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        got = await dash.view("q", "page", None, after, None, limit)
        seen += [row["id"] for row in got["rows"]]
        if not got["has_next"]:
            return seen
        assert len(got["rows"]) == limit
        after = got["rows"][-1]["seq"]


@pytest.mark.parametrize("seed", range(4))
def test_full_pages_skip_and_repeat_nothing_while_claims_fails_and_cancels_run(
        seed: int) -> None:
    rnd = random.Random(seed)

    async def main() -> None:
        broker = await started(MemoryStore(), segment_push_jobs=4)
        ids: list[str] = []
        for _ in range(40):
            k = rnd.choice([1, 2, 4, 5, 9, 13])
            ids += await broker.push("q", [b'{"n":%d}' % (len(ids) + i) for i in range(k)])
        dash = Dashboard(broker, History(broker))
        stop = False
        touched: set[str] = set()

        async def claims() -> None:
            while not stop:
                jobs = await broker.claim("q", "w", rnd.choice([1, 3, 7]))
                if jobs and rnd.random() < 0.5:
                    await broker.fail("q", [FailItem(j.token, "x", 0) for j in jobs])
                await asyncio.sleep(0)

        async def cancels() -> None:
            while not stop:
                pick = rnd.sample(ids, 2)
                touched.update(pick)
                await broker.cancel("q", pick)
                await asyncio.sleep(0)

        busy = [asyncio.ensure_future(claims()), asyncio.ensure_future(cancels())]
        try:
            for _ in range(6):
                limit = rnd.choice([1, 7, 50, 120, 200])
                for seen in (await _listing(broker, limit), await _walk(dash, limit)):
                    assert seen == sorted(set(seen))
                    assert [i for i in ids if i not in seen and i not in touched] == []
        finally:
            stop = True
            await asyncio.gather(*busy)
        # nothing lost: every job is still listed (pending or claimed), or was
        # cancelled (and archived)
        final = await _listing(broker, 100)
        assert final == sorted(set(final)) and set(final) | touched >= set(ids)
        await broker.stop(5)

    run(main())
