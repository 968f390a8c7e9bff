"""broker.service.spill_writer on the broker's defaults (spills on: ``spill_jobs``
1,024, ``spill_pending``) through a bad deploy in miniature: a claim of 2,000
jobs (``max_attempts`` 2, no retry delay) all failed twice, the owner killed
between the first fail's spill write and its commit, and again after the second
fail's commit landed with its reply lost. Afterwards the store holds every job
dead exactly once (in spill objects, the head small), listed once, redriven by
reference, drained and archived exactly once, and no spill object is left once
drained and swept. Real file store; the faults are the head's write not landed
and its reply held back, each followed by a crash."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest

from broker import paths
from broker.errors import OutcomeUnknown
from broker.model.job import DEAD, PENDING
from broker.model.ops import CompleteItem, FailItem
from broker.service.broker import Broker
from broker.service.config import BrokerConfig
from broker.storage.files import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    bodies,
    crash,
    run,
    started,
    stored,
    successor,
    until,
)
from tests.support.spill_store import dead_everywhere, spill_keys, spilled_ids

N = 2_000
QUEUE_KEY = paths.state_key("q")
GRACE_S = 60.0


async def _listed(broker: Broker, status: str) -> list[str]:
    """The ids of every ``status`` job, page by page (100 a page)."""
    out: list[str] = []
    while True:
        page = await broker.jobs("q", status, 100, out[-1] if out else None)
        out += [row["id"] for row in page]
        if len(page) < 100:
            return out


@pytest.mark.slow
def test_a_bad_deploy_in_miniature_kills_every_job_once_and_recovers(tmp_path: Path) -> None:
    assert (BrokerConfig().spill_jobs, BrokerConfig().spill_pending) == (1024, True)
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    landed, release = threading.Event(), threading.Event()

    def hold_the_reply(_key: str) -> None:  # (in the store's executor thread)
        landed.set()
        release.wait(30)

    async def go() -> None:
        a = await started(store, clock=clock, segment_push_jobs=100, segment_grace_s=GRACE_S,
                          commit_timeout_s=1.0)
        await a.create_queue("q", {"max_attempts": 2})
        ids = await a.push("q", bodies(N))
        got = await a.claim("q", "w", N, lease_s=600)
        assert sorted(j.id for j in got) == sorted(ids)
        first = [FailItem(j.token, "boom 1", 0) for j in got]

        # 1. the first fail's spill object lands, its commit does not; the owner dies
        before = inner.read(QUEUE_KEY).data
        store.inject("write_if_match", NOT_LANDED, key_contains=QUEUE_KEY, times=None)
        try:
            await a.fail("q", first)
            raise AssertionError("the fail was answered though its commit never landed")
        except OutcomeUnknown:
            pass
        await crash(a)
        store.heal()
        assert inner.read(QUEUE_KEY).data == before
        orphans = spill_keys(inner)  # (written by each attempt, named by no landed head)
        assert orphans
        assert stored(inner).spill_refs == []

        # 2. the worker's retry on the successor: retry-waiting, spilled as pending
        b = await successor(store, clock, segment_grace_s=GRACE_S, commit_timeout_s=1.0)
        assert all(x.ok for x in await b.fail("q", first))
        head = stored(inner)
        assert sorted(spilled_ids(inner, kind=PENDING)) == sorted(ids)
        assert not [j for j in head.jobs.touched() if j.status == PENDING]
        again = await b.claim("q", "w", N, lease_s=600)
        assert sorted(j.id for j in again) == sorted(ids)
        assert {j.attempt for j in again} == {2}

        # 3. the second fail lands (all dead, spilled) but its reply is lost: the owner dies
        store.inject("write_if_match", None, key_contains=QUEUE_KEY, after=hold_the_reply)
        second = [FailItem(j.token, "boom 2", 0) for j in again]
        failing = asyncio.ensure_future(b.fail("q", second))
        while not landed.is_set():
            assert not failing.done(), failing
            await asyncio.sleep(0.01)
        await crash(b)
        failing.cancel()
        release.set()
        assert dead_everywhere(inner) == sorted(ids)

        c = await successor(store, clock, url="http://c", segment_grace_s=GRACE_S)
        try:
            repeat = await c.fail("q", second)  # (the worker's retry of the lost answer)
            assert all(x.ok for x in repeat), [x for x in repeat if not x.ok][:3]
            head = stored(inner)
            assert dead_everywhere(inner) == sorted(ids)  # each dead once
            assert not list(head.jobs.touched()) and not head.claim_records
            assert len(inner.read(QUEUE_KEY).data) < 64 * 1024
            assert (await c.stats("q"))["counts"][DEAD] == N
            assert sorted(await _listed(c, DEAD)) == sorted(ids)
            shown = await c.job("q", ids[7])
            assert (shown["status"], shown["attempts"], shown["last_error"]) == (
                DEAD, 2, "boom 2")

            # 4. redrive by reference: one small commit, no job line in the head
            assert await c.redrive("q") == N
            head = stored(inner)
            assert not list(head.jobs.touched())
            assert sorted(spilled_ids(inner, kind=PENDING)) == sorted(ids)
            assert (await c.stats("q"))["counts"][PENDING] == N

            # 5. drained by a fixed deploy, archived once, no spill object left
            drained = await c.claim("q", "w", N, lease_s=600)
            assert sorted(j.id for j in drained) == sorted(ids)
            done = await c.complete("q", [CompleteItem(j.token, b'"ok"') for j in drained])
            assert all(x.ok for x in done)
            await archived_and_dropped(c, inner, clock)
            head = stored(inner)
            assert head.spill_refs == [] and not list(head.jobs.touched())
            assert Counter(r["id"] for r in archive_lines(inner)) == Counter(
                {job_id: 1 for job_id in ids})
            assert head.counters.completed == N
            await c.sweep_staging()  # (the listing starts each object's grace)
            clock.advance(GRACE_S + 1)
            await c.sweep_staging()
            await until(lambda: spill_keys(inner) == [])
        finally:
            await c.stop(5)

    run(go(), timeout_s=120)
