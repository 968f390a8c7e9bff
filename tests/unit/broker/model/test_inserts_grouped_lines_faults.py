"""Grouped pushes kept as lines (:func:`broker.model.job_lines.new_grouped_pending_lines`)
under storage faults: the push and a claim each hit a write whose outcome the
broker must find out by re-reading, then the broker dies and another takes
over. In the store afterwards every job is there exactly once, with its group;
no group ever had more claimed than its limit; fifo groups were served in push
order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from broker.model.job import CLAIMED, COMPLETED
from broker.model.ops import CompleteItem, NewJob
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor

GROUPS = ["a", 'q"\\', "é", "x" * 128]  # (names a line must escape, and the longest)


def _group_of(n: int) -> str | None:
    return None if n % 5 == 4 else GROUPS[n % 4]


@pytest.mark.parametrize("order", ["fair", "fifo"])
@pytest.mark.parametrize("fault", [LOST_REPLY, NOT_LANDED])
def test_grouped_lines_survive_lost_writes_a_crash_and_a_takeover(
        tmp_path: Path, fault: str, order: str) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    limit = 1 if order == "fifo" else 2
    jobs = [NewJob(b'{"n":%d}' % n, group=_group_of(n)) for n in range(400)]

    async def main() -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
        a = await started(store, clock=clock)
        await a.create_queue("q", {"group_limit": limit, "group_order": order})
        store.inject("write_if_match", fault, key_contains="queue.json")
        ids = await a.push("q", jobs, "push-1")
        assert len(ids) == 400
        store.inject("write_if_match", fault, key_contains="queue.json")
        held = await a.claim("q", "w1", 100, 60.0)
        await crash(a)
        b = await successor(inner, clock)
        again = await b.push("q", jobs, "push-1")  # (a repeat: the same ids, nothing new)
        assert list(again) == list(ids)
        done = await b.complete("q", [CompleteItem(j.token, b"1") for j in held])
        assert all(r.ok for r in done)
        rest = await b.claim("q", "w2", 1000, 60.0)
        await b.stop(drain_s=5)
        return ([(j.id, orjson.loads(j.payload)["n"]) for j in held],
                [(j.id, orjson.loads(j.payload)["n"]) for j in rest])

    held, rest = run(main())
    assert [kind for _, kind, _ in store.injected] == [fault, fault]
    # each claim took its limit of every group (the first also every ungrouped job)
    assert Counter(_group_of(n) for _, n in held) == {None: 80, **dict.fromkeys(GROUPS, limit)}
    assert Counter(_group_of(n) for _, n in rest) == dict.fromkeys(GROUPS, limit)
    if order == "fifo":  # (each group's jobs in push order: its first, then its second)
        for g in GROUPS:
            mine = [n for n in range(400) if _group_of(n) == g]
            assert [n for _, n in held if _group_of(n) == g] == mine[:1]
            assert [n for _, n in rest if _group_of(n) == g] == mine[1:2]
    state = stored(inner)
    assert state.counters.enqueued == 400
    completed = archive_lines(inner) + [j.to_plain() for j in state.jobs.values()
                                        if j.status == COMPLETED]
    assert sorted(rec["id"] for rec in completed) == sorted(i for i, _ in held)  # each once
    left = [j for j in state.jobs.values() if j.status != COMPLETED]
    assert {j.id for j in left if j.status == CLAIMED} == {i for i, _ in rest}
    everything = [(orjson.loads(j.payload)["n"], j.group) for j in left] + [
        (rec["payload"]["n"], rec.get("group")) for rec in completed]
    assert sorted(everything, key=lambda t: t[0]) == [(n, _group_of(n)) for n in range(400)]
