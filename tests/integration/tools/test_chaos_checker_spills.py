"""The chaos checker's reading of spill objects (tools/chaos/checker.spill_jobs)
against a store an in-process broker with ``spill_jobs`` on wrote: dead
objects, one redriven by reference and partly claimed, one job taken out by a
redrive by id: each job is found exactly once, in the head or in the object
whose ref still holds it, with the ref's status."""

from __future__ import annotations

import collections
from pathlib import Path

import orjson

from broker import paths
from broker.model.ops import FailItem, NewJob
from broker.storage.files import FileStore
from tests.support.inprocess import run, started, stored
from tools.chaos.checker import spill_jobs

QUEUE = "q"


def test_each_spilled_job_is_read_once_where_its_ref_holds_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> list[str]:
        a = await started(store, spill_jobs=10)
        ids: list[str] = []
        for n in (20, 25):
            batch = await a.push(QUEUE, [NewJob(b'{"n":%d}' % i, max_attempts=1)
                                         for i in range(n)])
            got = await a.claim(QUEUE, "w", max_jobs=n)
            await a.fail(QUEUE, [FailItem(j.token, "boom", 0) for j in got])
            ids += batch
        assert await a.redrive(QUEUE, [ids[25]]) == 1  # (out of the second object)
        state = stored(store)
        first = state.spill_refs[0]
        assert await a.redrive(QUEUE) == 44
        # (the job redriven by id first, due earliest, in the head; then 9 of the first
        # object, held at the claim's spill part)
        await a.claim(QUEUE, "w2", max_jobs=10)
        assert stored(store).spill_refs[0].key == first.key
        await a.stop()
        return ids

    ids = run(go())
    raw = orjson.loads(store.get(paths.state_key(QUEUE)))
    again: list[str] = []
    spilled = spill_jobs(store, raw, again)
    inline = {job["id"] for job in raw["jobs"]}
    assert again == [] and not inline & set(spilled)
    assert sorted(inline | set(spilled)) == sorted(ids)
    # (9 claimed held at the claim record's spill part: read from the object)
    assert len(spilled) == 45 - 1 and collections.Counter(
        j["status"] for j in spilled.values()) == {"pending": 35, "claimed": 9}
