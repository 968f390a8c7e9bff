"""Group names released and reused (broker.model.groups.sweep) through a real
in-process broker whose store loses replies and refuses writes, with stats
read between every call, cancels, a purge and a crash taken over by a second
broker: names that come and go (a sweep at every claim: the floor and cap
patched to 0), ``group_limit`` 1. No claim hands out a job of a group that
holds one, nor a job already held; at the end every job pushed was completed
exactly once or cancelled/purged, and the head holds no pending or claimed job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.errors import OsqueueError
from broker.model.groups import names as names_module
from broker.model.groups import sweep
from broker.model.job import CLAIMED, PENDING
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.model.segments import grouped
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started, stored, successor

RELEASED: list[int] = []


def _release_counted(groups: Any, live: Any) -> int:
    n = sweep.release_unused(groups, live, floor=0)
    groups.names.cap = 0  # (the next claim sweeps again)
    RELEASED.append(n)
    return n


@pytest.fixture(autouse=True)
def sweep_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep at every claim (the names table's first cap and floor 0)."""
    monkeypatch.setattr(names_module, "SWEEP_FLOOR", 0)
    monkeypatch.setattr(grouped, "release_unused", _release_counted)
    RELEASED.clear()


async def _retry(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``await call(*args, **kwargs)``, again while the store's injected faults
    make it fail retryably (the client's retry), 20 times at most."""
    for _ in range(20):
        try:
            return await call(*args, **kwargs)
        except OsqueueError as exc:
            if not getattr(exc, "retryable", True):
                raise
    raise AssertionError("still failing")


SETTINGS = [
    ({"group_limit": 1}, 1),
    ({"group_order": "fifo", "group_limit": 1, "group_dead": "hold"}, 1),
    ({"group_limit": 2, "group_rate_per_s": 50, "group_burst": 2}, 2),
]


@pytest.mark.parametrize("by_reference", [False, True])
@pytest.mark.parametrize("settings, limit", SETTINGS)
def test_reused_group_ids_through_faults_and_a_takeover(
        tmp_path: Path, settings: dict[str, Any], limit: int, by_reference: bool) -> None:
    """``by_reference``: each round's push is a grouped segment (segment_push_jobs 5)."""
    config = {"segment_push_jobs": 5} if by_reference else {}
    store = FaultyStore(FileStore(tmp_path))
    clock = Clock()

    async def main() -> None:
        broker = await started(store, "http://a", clock, **config)
        await broker.create_queue("q", settings)
        pushed: set[str] = set()
        held: dict[str, str | None] = {}  # token -> group of each job held
        held_ids: dict[str, str] = {}  # token -> id
        done: list[str] = []
        gone: set[str] = set()
        for r in range(24):
            clock.advance(0.2)  # (per-group buckets refill a little: full ones are dropped)
            if r == 12:
                await crash(broker)
                broker = await successor(store, clock, **config)
            if r % 5 == 3:
                store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
            if r % 7 == 4:
                store.inject("write_if_match", NOT_LANDED, key_contains="queue.json")
            names = [f"r{r}-{i % 3}" for i in range(5)] + [f"k{r % 4}", None]
            jobs = [NewJob(b'{"r":%d,"i":%d}' % (r, i), group=g, max_attempts=1 + r % 2)
                    for i, g in enumerate(names)]
            ids = await _retry(broker.push, "q", jobs, request=f"p-{r}")
            pushed.update(ids)
            if by_reference and r == 0:  # (by reference: one segment, runs r0-0..2, k0, None)
                assert [ref.groups for ref in stored(store.inner).segment_refs] == [5]
            await broker.stats("q")
            got = await _retry(broker.claim, "q", "w", 6, lease_s=3600)
            await broker.stats("q")
            groups_held = [g for g in held.values() if g is not None]
            for i, (job_id, token) in enumerate(zip(got.ids, got.tokens, strict=True)):
                group = got.groups.get(i) if got.groups else None
                assert job_id not in held_ids.values(), f"{job_id} claimed while held"
                assert job_id not in done, f"{job_id} claimed after it completed"
                if group is not None:
                    assert groups_held.count(group) < limit, (group, groups_held)
                    groups_held.append(group)
                held[token], held_ids[token] = group, job_id
            # cancel the first pending job of this round
            page = await broker.jobs("q", PENDING, limit=1000)
            mine = [j["id"] for j in page if j["id"] in ids]
            if mine:
                answers = await _retry(broker.cancel, "q", mine[:1])
                if answers[0].ok and answers[0].status == "cancelled":
                    gone.add(mine[0])
            await broker.stats("q")
            # fail one held job (dead if it had one attempt), complete every other one
            if held:
                token = sorted(held)[-1]
                await _retry(broker.fail, "q", [FailItem(token, "boom", 0)])
                del held[token], held_ids[token]
            if r % 6 == 5:
                await _retry(broker.redrive, "q")
            for token in sorted(held)[::2]:
                res = await _retry(broker.complete, "q", [CompleteItem(token)])
                if res[0].ok:
                    done.append(held_ids[token])
                del held[token], held_ids[token]
            if r == 18:
                before = {j["id"] for j in await broker.jobs("q", PENDING, limit=1000)}
                await _retry(broker.purge, "q", ["pending"])
                gone |= before
        store.heal()
        for _ in range(50):
            await broker.redrive("q")
            await broker.stats("q")
            got = await broker.claim("q", "w", 20, lease_s=3600)
            if not got.ids and not held:
                break
            for job_id, token in zip(got.ids, got.tokens, strict=True):
                assert job_id not in held_ids.values() and job_id not in done, job_id
                held[token], held_ids[token] = None, job_id
            for token in list(held):
                res = await broker.complete("q", [CompleteItem(token)])
                if res[0].ok:
                    done.append(held_ids[token])
                del held[token], held_ids[token]
        head = stored(store.inner)
        assert not [j for j in head.jobs.values() if j.status in (PENDING, CLAIMED)]
        assert head.segment_refs == []
        assert len(done) == len(set(done)), "a job completed twice"
        assert not set(done) & gone, "a cancelled or purged job completed"
        assert set(done) | gone == pushed, ("lost", pushed - set(done) - gone)
        assert sum(RELEASED) > 10, RELEASED  # (names were released, and their ids reused)
        await broker.stop(drain_s=5)

    run(main(), timeout_s=120)
