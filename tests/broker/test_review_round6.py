"""Regressions found by adversarial review round 6 of the failure-path work (the carry
of unwritten state).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.storage import FileStore
from broker.transitions import NewJob
from tests.support.faults import LATE, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started, stored

C = "r-0123456789ab"
D = "r-ba9876543210"

# -- R6-1 --------------------------------------------------------------------
# Review 6 (commit ed3575d): carried refusals.
#
# R6-1: the refusal carried from a dropped state is one nobody was ever answered
# (the batch holding it got OutcomeUnknown); a retry of that push is then answered
# QueueFull from memory, with room in the queue and without a write, while the
# push's earlier attempt (answered OutcomeUnknown too) is still in flight: it
# lands afterwards. The client, told "nothing from it was written", pushes again.



def test_carried_unanswered_refusal_duplicates_push(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    order = NewJob(b'"order-42"')
    big = NewJob(b'"' + b"o" * 10_000 + b'"')
    filler = NewJob(b'"' + b"f" * 56_000 + b'"')
    log: list[str] = []

    async def attempt(coro: object) -> str:
        try:
            return repr(await coro)  # type: ignore[misc]
        except Exception as exc:
            return type(exc).__name__

    async def main() -> None:
        a = await started(store, "http://a", clock, commit_timeout_s=0.4)
        await a.create_queue("q", {"max_state_bytes": 65_536})
        # 1. producer C's push (call 0): its first PUT is held in the network (it
        #    lands later); every other write fails until the batch gives up.
        store.inject("write_if_match", LATE, key_contains="q/queue.json")
        store.inject("write_if_match", NOT_LANDED, times=None, key_contains="q/queue.json")
        r1 = await attempt(a.push("q", [order, big], request=f"{C}-0", floor=0))
        log.append(f"call0 attempt1: {r1}")
        assert r1 == "OutcomeUnknown"
        # 2. C retries call 0 (OutcomeUnknown is retryable); producer D's big push
        #    joins the same batch first. Storage still failing: OutcomeUnknown to both.
        r2 = await asyncio.gather(attempt(a.push("q", [filler], request=f"{D}-0", floor=0)),
                                  attempt(a.push("q", [order, big], request=f"{C}-0", floor=0)))
        log.append(f"batch2 (D filler, C call0 retry): {r2}")
        assert r2 == ["OutcomeUnknown", "OutcomeUnknown"]
        store.heal()
        # (D's client gives up; nothing of batch 2 ever landed: queue still has room)
        # 3. C retries call 0 once more
        r3 = await attempt(a.push("q", [order, big], request=f"{C}-0", floor=0))
        log.append(f"call0 attempt3: {r3}")
        # 4. the held first PUT of call 0 arrives
        landed = store.land_late()
        log.append(f"late PUTs: {landed}")
        # 5. told QueueFull ("nothing from it was written"), C pushes the order again
        if r3 == "QueueFull":
            r5 = await attempt(a.push("q", [order, big], request=f"{C}-1", floor=1))
            log.append(f"call1: {r5}")
        await a.stop(drain_s=5)

    run(main())
    st = stored(inner)
    copies = [j.id for j in st.jobs.values() if j.payload == b'"order-42"']
    assert len(copies) == 1, (
        f"order pushed once by its producer, stored {len(copies)} times {copies}; "
        f"steps: {log}; approx bytes {st.size_estimate()}")
