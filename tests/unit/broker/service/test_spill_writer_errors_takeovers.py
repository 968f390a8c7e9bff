"""broker.service.spill_writer and the takeover keep each job's error history
when a job fails more than ERRORS_KEPT times across owners: twelve failures
of every job, claimed inline, from pending spill objects and at spill parts,
the owner killed right after a fail was answered (its spill of the failed
jobs maybe in flight), the next owner's spill write or head write faulted
(not landed, lost reply, a 412 after a landed write). At the end every job is
dead exactly once with attempts [1, 6..12] and each attempt's text, nothing
claimed or held, and once purged and swept no spill object is left. A fail
repeated (its first write's reply lost; on the owner and after a takeover)
adds no entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.limits import ERRORS_KEPT
from broker.model.job import CLAIMED, DEAD
from broker.model.ops import FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import EIO, LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import crash, run, stored, successor, until
from tests.support.spill_store import (
    dead_everywhere,
    held_at_spill_parts,
    spill_keys,
    spilled_jobs,
)

N = 20
FAILURES = 12
SPILLING = {"spill_jobs": 10, "spill_pending": True, "segment_grace_s": 60.0}
LEASE_S = 3600.0
#: (round after whose fail the owner is killed, the fault on the next owner's writes)
TAKEOVERS = {2: ("create_if_absent", LOST_REPLY, "/spills/"),
             4: ("write_if_match", LOST_REPLY_412, "queue.json"),
             7: ("create_if_absent", EIO, "/spills/"),
             9: ("write_if_match", NOT_LANDED, "queue.json"),
             11: ("create_if_absent", NOT_LANDED, "/spills/")}


def _text(n: int) -> str:
    return f"ValueError: failure {n}"


@pytest.mark.parametrize("kill_rounds", [sorted(TAKEOVERS), [5, 6, 7, 8, 9, 10, 11]])
def test_twelve_failures_across_killed_owners_keep_first_and_latest_histories(
        tmp_path: Path, kill_rounds: list[int]) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock(1_767_225_600_000)

    async def go() -> None:
        owner: Broker = await successor(store, clock, "http://b0", **SPILLING)
        ids = await owner.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=FAILURES)
                                     for i in range(N)])
        for n in range(1, FAILURES + 1):
            got = await owner.claim("q", "w", max_jobs=N, lease_s=LEASE_S)
            assert sorted(j.id for j in got) == sorted(ids), n
            assert {j.attempt for j in got} == {n}
            clock.advance(1)
            answers = await owner.fail("q", [FailItem(j.token, _text(n), 0) for j in got])
            assert all(a.ok for a in answers), n
            clock.advance(1)
            if n in kill_rounds:
                await crash(owner)
                method, kind, key = TAKEOVERS.get(n, ("read", None, "-"))
                if kind is not None:
                    store.inject(method, kind, key_contains=key)
                owner = await successor(store, clock, f"http://b{n}", **SPILLING)
        assert [(m, k) for m, k, _ in store.injected] == [
            TAKEOVERS[n][:2] for n in kill_rounds if n in TAKEOVERS]  # (each fault fired)
        want = [1, *range(FAILURES - ERRORS_KEPT + 2, FAILURES + 1)]
        assert dead_everywhere(inner) == sorted(ids)  # (lost 0, duplicated 0)
        head = stored(inner)
        inline = {j.id: j.errors for j in head.jobs.touched() if j.status == DEAD}
        spilled = {j.id: j.errors for j in spilled_jobs(inner)}
        for job_id, errors in {**inline, **spilled}.items():
            assert [e.attempt for e in errors] == want, job_id
            assert [e.text for e in errors] == [_text(k) for k in want], job_id
            assert [e.failed_ms for e in errors] == sorted(e.failed_ms for e in errors)
        assert not [j for j in head.jobs.touched() if j.status == CLAIMED]
        assert not head.claim_records
        shown = await owner.job("q", ids[0])
        assert [e["attempt"] for e in shown["errors"]] == want
        assert await owner.purge("q", [DEAD]) == N
        await owner.sweep_staging()  # (the listing starts the objects' grace)
        clock.advance(61)
        await owner.sweep_staging()
        await until(lambda: spill_keys(inner) == [], timeout_s=30)
        await owner.stop()

    run(go(), timeout_s=240)


def test_a_repeated_fail_adds_no_entry_on_the_owner_or_after_a_takeover(
        tmp_path: Path) -> None:
    """A fail whose head write landed with its reply lost (a 412 on the retry),
    repeated with the same tokens on the owner and again on the next owner:
    one entry per attempt, the first text kept."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock(1_767_225_600_000)
    spilling = {"spill_jobs": 3, "spill_pending": True}

    async def go() -> None:
        a = await successor(store, clock, "http://a", **spilling)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=5) for i in range(6)])
        first = await a.claim("q", "w", max_jobs=6, lease_s=LEASE_S)
        store.inject("write_if_match", LOST_REPLY_412, key_contains="queue.json")
        for text in ("first", "first again"):
            answers = await a.fail("q", [FailItem(j.token, text, 0) for j in first])
            assert all(x.ok for x in answers)
        assert [kind for _, kind, _ in store.injected] == [LOST_REPLY_412]
        second = await a.claim("q", "w", max_jobs=6, lease_s=LEASE_S)
        assert {j.attempt for j in second} == {2}
        await crash(a)
        b = await successor(store, clock, "http://b", **spilling)
        for tokens, text in ((first, "first once more"), (second, "second"),
                             (second, "second again")):
            answers = await b.fail("q", [FailItem(j.token, text, 0) for j in tokens])
            assert all(x.ok for x in answers)
        head = stored(inner)
        jobs = [*head.jobs.touched(), *spilled_jobs(inner, kind="pending"),
                *held_at_spill_parts(inner)]
        assert sorted(j.id for j in jobs) == sorted(ids)  # (lost 0, duplicated 0)
        assert {j.id: [(e.attempt, e.text) for e in j.errors] for j in jobs} == {
            i: [(1, "first"), (2, "second")] for i in ids}
        await b.stop()

    run(go(), timeout_s=120)
