"""The readers of a queue whose jobs are partly in a grouped segment (format
3) and partly taken from it (its ``taken_at``): pages of jobs, a job by id,
stats per group, and the chaos checker's segment jobs show each job once,
with its group. Real file store, in-process broker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from broker.model.ops import CompleteItem, NewJob
from broker.storage.files import FileStore
from tests.support.inprocess import payloads, run, started, stored
from tools.chaos.checker import segment_jobs

GROUPS = 4


def test_pages_lookup_stats_and_the_checker_honour_taken_positions(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, segment_push_jobs=10, grouped_segments=True)
        await a.create_queue("q", {"group_limit": 2})
        ids = await a.push("q", [NewJob(orjson.dumps({"n": i}), group=f"g{i % GROUPS}")
                                 for i in range(40)])
        got = await a.claim("q", "w", max_jobs=40, lease_s=60)
        assert len(got) == 2 * GROUPS
        await a.complete("q", [CompleteItem(j.token) for j in got[:GROUPS]])
        [ref] = stored(store).segment_refs
        assert ref.taken == 2 * GROUPS and len(ref.taken_at) == 2 * GROUPS
        taken = {j.id for j in got}

        page: list[dict] = []
        after = None
        while rows := await a.jobs("q", "pending", limit=7, after=after):
            page += rows
            after = rows[-1]["id"]
        assert [r["id"] for r in page] == sorted(set(ids) - taken)
        assert all(r["group"] == f"g{r['payload']['n'] % GROUPS}"
                   for r in page)

        pending_id = page[0]["id"]
        assert (await a.job("q", pending_id))["status"] == "pending"
        claimed_id = next(j.id for j in got[GROUPS:])
        assert (await a.job("q", claimed_id))["status"] == "claimed"

        stats = await a.stats("q")
        busiest = {row["group"]: row for row in stats["groups"]["busiest"]}
        assert {g: (row["claimed"], row["pending"]) for g, row in busiest.items()} == {
            f"g{g}": (Counter(int(j.id[1:]) for j in got[GROUPS:]
                              if orjson.loads(j.payload)["n"] % GROUPS == g).total(), 8)
            for g in range(GROUPS)}

        state = stored(store)
        again: list[str] = []
        held = segment_jobs(store, state, again)
        assert sorted(held) == sorted(set(ids) - taken) and again == []
        assert sorted(p["n"] for p in payloads(store)) == list(range(40))
        await a.stop()

    run(go())
