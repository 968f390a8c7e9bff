"""Receipts through a broker: a call repeated (a client's retry after a lost
answer, on the same broker or on the one that took over, with clocks apart, after
busy seconds) answers as the first did and applies nothing twice."""

from __future__ import annotations

from pathlib import Path

import orjson

from broker import routes
from broker import transitions as T
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import crash, run, started, successor


def test_a_repeated_claim_answers_the_same_json(tmp_path: Path) -> None:
    """A keyed claim repeated through the HTTP routes answers the same JSON and
    claims nothing more; after a crash and a takeover the repeat hands back no
    token still held (the jobs were completed), a repeated complete answers as
    the first did, and an unkeyed claim gets the one job left."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [T.NewJob(b'{"i":%d}' % i) for i in range(3)])
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
