"""Group commits: the calls batched into one write each get their own answer, for
the call as it was made, and one bad call does not fail the others."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.errors import OsqueueError
from broker.model.ops import CompleteItem, CompleteItems, ItemResults, NewJob
from broker.storage import FileStore
from tests.support.faults import FaultyStore
from tests.support.inprocess import run, started, stored, until


def test_concurrent_completes_in_one_group_commit_get_their_own_answers(
        tmp_path: Path) -> None:
    """Six completes in one group commit each get their own answer, for their own
    tokens (the sixth names a job the first also completes, and an unknown
    token); five jobs end completed and none is claimable again."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"%d" % i) for i in range(6)])
        jobs = await a.claim("q", "w", 6, 30.0)
        calls = [CompleteItems.of([CompleteItem(j.token, b"1")]) for j in jobs]
        calls[5] = CompleteItems.of([CompleteItem(jobs[0].token, b"9"),
                                       CompleteItem("j0000000099.77")])
        got = await asyncio.gather(*(a.complete("q", c) for c in calls))
        for j, answers in zip(jobs[:5], got[:5], strict=True):
            assert [(r.token, r.ok) for r in answers] == [(j.token, True)]
        assert [(r.token, r.ok) for r in got[5]] == [(jobs[0].token, True),
                                                     ("j0000000099.77", False)]
        assert len({id(g) for g in got}) == 6
        assert len({id(g.tokens) for g in got if isinstance(g, ItemResults)}) == 6
        claims = await asyncio.gather(*(a.claim("q", "v", 1, 30.0) for _ in range(3)))
        assert all(c == [] for c in claims)
        await a.stop(drain_s=5)
        assert stored(store).counters.completed == 5  # jobs[5] was never completed

    run(main())


def test_caller_items_mutated_after_the_call_do_not_change_the_op(tmp_path: Path) -> None:
    """broker.complete takes its items as they are when called: a caller that
    appends to its CompleteItems while the call is in flight (before the group
    commit applies it) does not get the appended item completed by this call
    (found by review: the op had shared the caller's lists)."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"1"), NewJob(b"2")])
        jobs = await a.claim("q", "w", 2, 30.0)
        items = CompleteItems.of([CompleteItem(jobs[0].token, b"1")])
        task = asyncio.ensure_future(a.complete("q", items))
        await asyncio.sleep(0)  # the op is submitted, not yet applied
        items.append(CompleteItem(jobs[1].token, b"2"))
        answers = await task
        assert len(answers) == 1, answers
        await a.stop(drain_s=5)

    run(main())


#: an id whose digits int() refuses (more than 4,300); isdecimal() accepts it
BAD_AFTER = "j" + "1" * 5000


@pytest.mark.parametrize("bad", ["jobs_read", "redrive_ids"])
def test_a_bad_call_does_not_fail_other_callers_ops(tmp_path: Path, bad: str) -> None:
    """A call whose transition raises something other than an OsqueueError (a jobs
    read after an id of 5,001 digits, or a redrive of one: int() refuses more than
    4,300 digits) in the same group commit as an unrelated producer's push does
    not fail that push. The error once escaped the batch: every op of it was
    answered a non-retryable 500 and the queue was marked faulted."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate, entered = threading.Event(), threading.Event()

    def slow(_key: str) -> None:
        entered.set()
        gate.wait(10)

    async def main() -> tuple[object, object]:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        # one write in flight, so the next two calls buffer into one batch
        store.inject("write_if_match", None, key_contains="q/queue.json", before=slow)
        busy = asyncio.create_task(a.push("q", [NewJob(b'"busy"')]))
        await until(entered.is_set)
        producer = asyncio.create_task(a.push("q", [NewJob(b'"order-42"')], request="r-p-0",
                                              floor=0))
        if bad == "jobs_read":  # GET /v1/queues/q/jobs?after=j111...1
            reader = asyncio.create_task(a.jobs("q", after=BAD_AFTER))
        else:  # POST /v1/queues/q/redrive {"ids": ["j1000...0"]} (same int() limit, in seq_of)
            reader = asyncio.create_task(a.redrive("q", ids=["j1" + "0" * 5000]))
        # both wait in the loop's buffer behind the held write: the next batch is theirs
        loop = a._queues["q"].loop
        await until(lambda: len(loop._buffer) == 2 or producer.done() or reader.done())
        assert len(loop._buffer) == 2, (producer, reader)
        gate.set()
        await busy
        got = await asyncio.gather(producer, reader, return_exceptions=True)
        health = a.health()
        await a.stop(drain_s=5)
        return got[0], (got[1], health["faulted_queues"])

    pushed, (read, faulted) = run(main())
    payloads = [j.payload for j in stored(inner).jobs.values()]
    assert not isinstance(pushed, OsqueueError), (
        f"an unrelated producer's push was answered {pushed!r} because a reader in the same "
        f"batch asked for jobs after a 5001-char id (reader got {type(read).__name__}: "
        f"{read}); queue faulted: {faulted}; stored payloads {payloads}")
