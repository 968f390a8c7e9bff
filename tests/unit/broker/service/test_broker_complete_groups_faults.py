"""Completions of grouped jobs through a real in-process broker
(broker.model.lifecycle.complete_held, which tells the groups of an
operation's settled jobs once: GroupState.settle_many) while the head's write
fails: one complete of a batch mixing groups (one group twice, a group at its
limit, a job without a group, a repeat of a token and an unknown one between
them, so the groups are told in two goes) whose write does not land, lands
with its reply lost or lands late (or, as the oracle, no fault), retried; then claims and
a takeover. After each: the groups' held counts are the claim records' (the
broker's own, and those a new owner rebuilds from the landed head), a claim
hands out exactly the places freed, oldest first, and the store holds every
job once, nothing stranded, no claim record left behind."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from broker import paths
from broker.model.format.decode import decode_state
from broker.model.groups.counts import held_by_group
from broker.model.ops import CompleteItem, NewJob, groups_of
from broker.storage import FileStore
from tests.support.faults import LATE, LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started

GROUPS = ["a"] * 4 + ["b"] * 3 + [None] * 2 + ["c"]  # seqs 1-10, in push order


def _head(store: FileStore):  # type: ignore[no-untyped-def]
    return decode_state(store.read(paths.state_key("q")).data)


def _groups(jobs) -> list[str | None]:  # type: ignore[no-untyped-def]
    named = groups_of(jobs)
    return [named.get(i) for i in range(len(jobs))]


def _held(store: FileStore) -> dict[str | None, int]:
    head = _head(store)
    return held_by_group(head.claim_records.values(), head.jobs)


@pytest.mark.parametrize("fault", [None, NOT_LANDED, LOST_REPLY, LATE])
def test_a_grouped_batch_completed_through_a_fault_frees_each_group_once(
        tmp_path: Path, fault: str | None) -> None:
    # (None: no fault, the broker's state kept in memory; a fault reloads the head,
    # whose held counts are rebuilt from the claim records)
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()

    async def main() -> None:
        b = await started(store, clock=clock, lease_s=5.0)
        await b.create_queue("q", {"group_limit": 2})
        ids = await b.push("q", [NewJob(b"%d" % i, group=g) for i, g in enumerate(GROUPS)])
        got = await b.claim("q", "w", 20, 300.0)
        # a and b at their limit (2), c holds 1, no group 2
        assert Counter(_groups(got)) == {"a": 2, "b": 2, None: 2, "c": 1}
        token = {j.id: j.token for j in got}
        a1, a2, b1, b2 = token[ids[0]], token[ids[1]], token[ids[4]], token[ids[5]]
        n1 = token[ids[7]]
        batch = [CompleteItem(a1), CompleteItem(b1), CompleteItem(a1),
                 CompleteItem("j0000000099.1-00"), CompleteItem(a2), CompleteItem(n1)]
        if fault is not None:
            store.inject("write_if_match", fault, key_contains="q/queue.json")
        try:
            first = await b.complete("q", batch)
        except Exception:  # (a refused or unknown outcome: the client retries)
            first = None
        store.land_late()
        again = await b.complete("q", batch)
        assert [a.ok for a in again] == [True, True, True, False, True, True], again
        if first is not None:
            assert [a.ok for a in first] == [a.ok for a in again]
        assert (await b.stats("q"))["groups"]["claimed"] == 3  # b2, the second None, c
        assert _held(inner) == {"b": 1, None: 1, "c": 1}
        more = await b.claim("q", "w", 20, 300.0)
        # a got two places back (its oldest pending: seqs 3, 4), b one (seq 7)
        assert sorted(zip([j.id for j in more], _groups(more), strict=True)) == [
            (ids[2], "a"), (ids[3], "a"), (ids[6], "b")]
        assert await b.claim("q", "w", 20, 300.0) == []
        assert _held(inner) == {"a": 2, "b": 2, None: 1, "c": 1}
        await crash(b)
        successor = await started(inner, "http://b", clock, lease_s=5.0)
        clock.advance(6)  # past the first broker's lease
        await successor.watch()
        stats = await successor.stats("q")
        assert stats["groups"]["claimed"] == 6 and stats["counts"]["claimed"] == 6
        assert await successor.claim("q", "w", 20, 300.0) == []  # every group still at limit
        done = await successor.complete("q", [CompleteItem(b2)] + [
            CompleteItem(j.token) for j in more])
        assert all(a.ok for a in done)
        last = await successor.claim("q", "w", 20, 300.0)
        assert last == []  # nothing pending is left
        await successor.stop(drain_s=5)

    run(main())
    head = _head(inner)
    statuses = Counter(job.status for job in head.jobs.values())
    seen = [job.id for job in head.jobs.values()]
    assert len(seen) == len(set(seen))  # every job once
    assert statuses["pending"] == 0
    # completed ones are archived away or still in the head; the claimed are the rest
    assert _held(inner) == {None: 1, "c": 1}
    assert statuses["claimed"] == 2
    assert head.counters.completed == 8
