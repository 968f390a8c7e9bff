"""The store checks and steps of the spill objects' seeded random runs
(tests/unit/broker/service/test_queue_target_spill*_adversary.py): every job
counted where the store holds it, a claim, a crash, a drain, the faults a
step injects."""

from __future__ import annotations

import asyncio
from collections import Counter

from broker.model.format.spill_format import read_checked
from broker.model.format.spill_refs import SpillRef, is_out
from broker.model.job import CANCELLED, COMPLETED, PENDING
from broker.model.ops import CompleteItem
from broker.service.broker import Broker
from broker.storage import ObjectStore
from tests.support.faults import EIO, LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock
from tests.support.inprocess import archive_lines, crash, stored, until
from tests.support.spill_store import held_at_spill_parts

SPILLS = "/spills/"
#: The sweep's grace (broker seconds, on the test's clock).
GRACE_S = 5.0
#: Claims' leases (s): none expires on the test's clock but across a takeover.
LEASE_S = 3600.0


def everywhere(store: ObjectStore) -> Counter[str]:
    """Each job id the store holds, counted where it is: the head's jobs that
    are not finished and the claimed ones held at records' spill parts (not
    the pending jobs of segments, nor those held at segment parts: the end of
    a run, drained, checks those by the archive),
    the jobs each spill ref still holds (a pending ref's from its cursor on;
    none taken out), read through the one check (a missing object fails), and
    the archive's lines."""
    state = stored(store)
    ids = Counter(job.id for job in state.jobs.values()
                  if job.status not in (COMPLETED, CANCELLED))
    ids.update(job.id for job in held_at_spill_parts(store))  # (claimed from a spill ref)
    for ref in state.spill_refs:
        assert isinstance(ref, SpillRef)
        got = store.read(ref.key)
        jobs = read_checked(ref, got.data, got.etag, store.url, 0, ref.count)
        lo = ref.taken if ref.kind == PENDING else 0
        ids.update(job.id for pos, job in enumerate(jobs) if pos >= lo and not is_out(ref, pos))
    archived = Counter(rec["id"] for rec in archive_lines(store))
    ids.update(archived)
    # (completed, not archived yet; one both archived and still in the head awaits its drop)
    ids.update(job.id for job in state.jobs.values()
               if job.status == COMPLETED and job.id not in archived)
    return ids


def where(store: ObjectStore, seen: Counter[str]) -> str:
    state = stored(store)
    twice = {i for i, n in seen.items() if n > 1}
    head = [(j.id, j.status) for j in state.jobs.values() if j.id in twice]
    arch = [(r["id"], r.get("status")) for r in archive_lines(store) if r["id"] in twice]
    return f"head {head} archive {arch} refs {state.spill_refs}"


async def claim_more(broker: Broker, held: list[str]) -> None:
    held += [j.token for j in await broker.claim("q", "w3", max_jobs=3, lease_s=LEASE_S)]


async def crash_soon(broker: Broker) -> None:
    await asyncio.sleep(0)
    await crash(broker)


async def drain(broker: Broker, store: ObjectStore, held: list[str]) -> None:
    """Complete the ``held`` claims, then redrive every dead job and complete
    every job until none is left."""
    await broker.complete("q", [CompleteItem(token) for token in held])
    for _ in range(50):
        await broker.redrive("q")
        got = await broker.claim("q", "drain", max_jobs=500)
        if got:
            await broker.complete("q", [CompleteItem(j.token) for j in got])
            continue
        counts = (await broker.stats("q"))["counts"]
        if not counts[PENDING] and not counts["dead"] and not counts["claimed"]:
            return
    raise AssertionError(f"the queue did not drain: {(await broker.stats('q'))['counts']} "
                         f"{stored(store).spill_refs}")


async def finished_archived(broker: Broker, store: ObjectStore, clock: Clock,
                            queue: str = "q") -> None:
    """Wait until the head of ``queue`` holds no completed or cancelled job (each
    archived, then dropped), moving ``clock`` a second a look and poking the
    queue's loop: the drop waits the archiver's ``DROP_DELAY_S`` on the broker's
    clock, which the test moves (left still, the loop's timer would drop them a
    second of wall time later). Fails after ``until``'s timeout."""

    def finished_gone() -> bool:
        clock.advance(1)
        broker._queues[queue].loop.poke()
        counts = stored(store, queue).count_by_status()
        return not counts[COMPLETED] and not counts[CANCELLED]

    await until(finished_gone)


#: Faults a step may inject into its next store call of that method and key.
FAULTS = [("write_if_match", LOST_REPLY, "queue.json"), ("write_if_match", LOST_REPLY_412,
                                                         "queue.json"),
          ("write_if_match", NOT_LANDED, "queue.json"), ("create_if_absent", EIO, SPILLS),
          ("create_if_absent", LOST_REPLY, SPILLS), ("read", EIO, SPILLS)]
