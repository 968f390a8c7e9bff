"""broker.service.spill_writer keeps each job's error history (the error text of
each attempt, bounded per job, so a dead job shows why it failed each time,
not only the last): a real Broker on a file
store, jobs failed, spilled as pending, claimed back from the spill object (held
at a claim record's spill part), failed again, spilled again and finally dead;
the spill objects' own bytes, read from the store, hold every attempt with the
time its commit failed it. With a spill write faulted the jobs stay in the head
with their histories (its line's ``"errors"``) and a later commit spills them,
nothing lost and nothing left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from broker import timefmt
from broker.model.job import DEAD, PENDING
from broker.model.ops import FailItem, NewJob
from broker.service.broker import Broker
from broker.storage import ObjectStore
from broker.storage.files import FileStore
from tests.support.faults import EIO, LOST_REPLY, Clock, FaultyStore
from tests.support.inprocess import run, started, stored, until
from tests.support.spill_store import dead_everywhere, spill_keys

N = 20
SPILLING = {"spill_jobs": 10, "spill_pending": True}
LEASE_S = 3600.0


def _object_histories(store: ObjectStore, kind: str) -> dict[str, list[list[Any]]]:
    """Each job's ``err`` in the landed head's spill objects of ``kind``, read
    from the objects' bytes, its text indexes resolved through the header's table."""
    out: dict[str, list[list[Any]]] = {}
    for ref in stored(store).spill_refs:
        if ref.kind != kind:
            continue
        header, *lines = store.read(ref.key).data.splitlines()
        table = orjson.loads(header)["errors"]
        for line in lines:
            job = orjson.loads(line)
            out[job["id"]] = [[a, at, table[i]] for a, at, i in job.get("err", [])]
    return out


def _head_histories(store: ObjectStore) -> dict[str, list[list[Any]]]:
    """Each job line's ``"errors"`` in the landed head's bytes (the newest text
    is the line's ``last_error``)."""
    raw = orjson.loads(store.read("q/queue.json").data)
    return {job["id"]: [[a, at, job.get("last_error", "") if text is None else text]
                        for a, at, text in job["errors"]]
            for job in raw["jobs"] if "errors" in job}


async def _fail_all(broker: Broker, clock: Clock, attempt: int, text: str) -> str:
    """Claim the ``N`` jobs (their ``attempt``-th claim) and fail them with
    ``text``, retry due at once; when the commit failed them."""
    got = await broker.claim("q", "w", max_jobs=N, lease_s=LEASE_S)
    assert len(got) == N and {j.attempt for j in got} == {attempt}
    clock.advance(1)
    at = timefmt.fmt(clock.now_ms())
    answers = await broker.fail("q", [FailItem(j.token, text, 0) for j in got])
    assert all(a.ok for a in answers)
    clock.advance(1)
    return at


def test_a_job_failed_spilled_claimed_back_and_failed_again_keeps_every_attempt(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock(1_767_225_600_000)

    async def go() -> None:
        a = await started(store, clock=clock, **SPILLING)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=3) for i in range(N)])
        t1 = await _fail_all(a, clock, 1, "ValueError: first")
        assert set(_object_histories(store, PENDING)) == set(ids)  # (spilled, pending)
        t2 = await _fail_all(a, clock, 2, "ValueError: second")  # (from its spill part)
        pending = _object_histories(store, PENDING)
        assert pending == {i: [[1, t1, "ValueError: first"], [2, t2, "ValueError: second"]]
                           for i in ids}
        t3 = await _fail_all(a, clock, 3, "ValueError: third")
        want = [[1, t1, "ValueError: first"], [2, t2, "ValueError: second"],
                [3, t3, "ValueError: third"]]
        assert _object_histories(store, DEAD) == {i: want for i in ids}
        shown = await a.job("q", ids[0])
        assert shown["location"] == "spill" and shown["last_error"] == "ValueError: third"
        assert shown["errors"] == [{"attempt": n, "failed_at": at, "error": text}
                                   for n, at, text in want]
        await a.stop()

    run(go())


@pytest.mark.parametrize("fault", [EIO, LOST_REPLY])
def test_a_faulted_spill_write_keeps_the_histories_inline_and_the_next_commit_spills_them(
        tmp_path: Path, fault: str) -> None:
    """The dead jobs' spill write fails (not landed, or landed with its reply
    lost): they stay in the head, each line's history whole; the next commit
    writes them out with it. Every job is dead exactly once, and once purged
    no spill object is left (the one whose reply was lost is swept)."""
    store = FaultyStore(FileStore(tmp_path))
    clock = Clock(1_767_225_600_000)

    async def go() -> None:
        a = await started(store, clock=clock, segment_grace_s=60.0, **SPILLING)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=2) for i in range(N)])
        t1 = await _fail_all(a, clock, 1, "ValueError: first")
        store.inject("create_if_absent", fault, key_contains="/spills/")
        t2 = await _fail_all(a, clock, 2, "ValueError: second")
        assert [kind for _, kind, _ in store.injected] == [fault]
        want = [[1, t1, "ValueError: first"], [2, t2, "ValueError: second"]]
        assert _head_histories(store) == {i: want for i in ids}  # (inline, whole)
        assert _object_histories(store, DEAD) == {}
        await a.push("q", [NewJob(b'{"next":1}')])  # (a later commit: it spills them)
        assert _object_histories(store, DEAD) == {i: want for i in ids}
        assert dead_everywhere(store) == sorted(ids)  # (lost 0, duplicated 0)
        assert await a.purge("q", [DEAD]) == N
        await a.sweep_staging()  # (the listing starts the objects' grace)
        clock.advance(61)
        await a.sweep_staging()
        await until(lambda: spill_keys(store) == [], timeout_s=30)
        assert not [j for j in stored(store).jobs.touched() if j.status == DEAD]
        await a.stop()

    run(go(), timeout_s=120)
