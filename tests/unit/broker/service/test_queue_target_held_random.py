"""broker.service.queue_target with ``held_in_records`` under random runs: pushes
into segments, claims, completes, fails, releases, cancels, heartbeats, purges,
redrives, a group setting taken up and dropped, the clock moved past leases,
injected store faults (lost replies and writes that never land on the head,
failed segment reads, archive writes and segment deletes) and the owner killed
and succeeded by a broker with the flag on or off and a 1 MiB or a large
held-jobs cache. Then the faults heal and the queue is drained: every job
pushed is archived exactly once (completed or cancelled) unless a purge took
it, and the head is empty, no segment referenced or named (a segment object
left after a lost reply to the commit that dropped it, or a failed delete, is
the sweep's). Every refusal met on the way is one the faults explain. The
seeds include runs that main before these fixes failed (a head refused as
corrupt, jobs stranded in expired records). In-process brokers on a file
store."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.service.broker import Broker
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, until

HEAD = paths.state_key("q")
#: refusals a random call may get while faults are injected (nothing else)
EXPECTED = {"outcome_unknown", "storage_unavailable", "conflict", "invalid_request",
            "not_the_broker", "broker_unavailable", "unknown_queue"}
OPS = ["push", "push", "claim", "claim", "complete", "fail", "release", "cancel",
       "heartbeat", "advance", "fault", "fault", "crash", "purge", "redrive", "groups"]


class _Run:
    def __init__(self, seed: int, store: FaultyStore, clock: Clock) -> None:
        self.rnd = random.Random(seed)
        self.store, self.clock = store, clock
        self.ids: list[str] = []
        self.tokens: list[str] = []
        self.purged = 0
        self.purge_unknown = False  # a purge whose answer was lost: its count unknown
        self.pushed = 0

    def config(self) -> dict[str, object]:
        return {"held_in_records": self.rnd.random() < 0.7, "segment_push_jobs": 5,
                "held_cache_mb": self.rnd.choice([1, 256])}

    def some(self, items: list[str], most: int) -> list[str]:
        return self.rnd.sample(items, min(len(items), self.rnd.randint(1, most)))

    def fault(self) -> None:
        rnd, store = self.rnd, self.store
        r = rnd.random()
        if r < 0.5:
            store.inject("write_if_match", rnd.choice([LOST_REPLY, NOT_LANDED, LOST_REPLY_412]),
                         key_contains=HEAD, times=rnd.choice([1, 2]))
        elif r < 0.7:
            store.inject(rnd.choice(["read", "get"]), NOT_LANDED, key_contains="/segments/",
                         times=rnd.choice([1, 3]))
        elif r < 0.85:
            store.inject("put", NOT_LANDED, key_contains=paths.archive_prefix("q"),
                         times=rnd.choice([1, 5]))
        else:
            store.inject("delete", NOT_LANDED, key_contains="/segments/", times=2)

    async def step(self, b: Broker, op: str, at: int) -> Broker:
        rnd = self.rnd
        if op == "push":
            k = rnd.randint(1, 400)
            pad = b"y" * rnd.randint(0, 3000)
            body = [b'{"n":%d,"p":"%s"}' % (self.pushed + i, pad) for i in range(k)]
            self.pushed += k
            if rnd.random() < 0.2:  # (a grouped push: a grouped segment)
                self.ids += await b.push("q", [NewJob(p, group=f"g{i % 3}")
                                               for i, p in enumerate(body)])
            else:
                self.ids += await b.push("q", body)
        elif op == "claim":
            got = await b.claim("q", "w", rnd.randint(1, 500), lease_s=rnd.choice([5, 60, 600]))
            self.tokens += [j.token for j in got]
        elif op == "complete" and self.tokens:
            await b.complete("q", [CompleteItem(t, None) for t in self.some(self.tokens, 300)])
        elif op == "fail" and self.tokens:
            await b.fail("q", [FailItem(t, "x", rnd.choice([0, None]))
                               for t in self.some(self.tokens, 300)])
        elif op == "release" and self.tokens:
            await b.release("q", self.some(self.tokens, 50))
        elif op == "cancel" and self.ids:
            await b.cancel("q", self.some(self.ids, 50))
        elif op == "heartbeat" and self.tokens:
            await b.heartbeat("q", self.some(self.tokens, 50), 600)
        elif op == "advance":
            self.clock.advance(rnd.choice([1, 10, 70, 700]))
        elif op == "fault":
            self.fault()
        elif op == "crash":
            await crash(b)
            self.store.heal()
            b = await started(self.store, f"http://s{at}", self.clock, **self.config())
            self.clock.advance(31)  # (a broker lease: the dead owner's queue is free)
            await b.watch()
        elif op == "purge" and rnd.random() < 0.3:
            self.purge_unknown = True
            self.purged += await b.purge("q", [rnd.choice(["claimed", "dead"])])
            self.purge_unknown = False
        elif op == "redrive" and self.ids:
            await b.redrive("q")
        elif op == "groups" and rnd.random() < 0.3 and self.ids:
            await b.create_queue("q", {"group_limit": rnd.choice([2, None])})
        return b

    async def drain(self, b: Broker) -> None:
        """No group limit; past every lease, dead jobs redriven, everything claimed
        and completed."""
        if self.ids:
            await b.create_queue("q", {"group_limit": None})
        for _ in range(200):
            self.clock.advance(700)
            if self.ids:
                await b.redrive("q")
            got = await b.claim("q", "w", 1000, lease_s=600)
            if got:
                await b.complete("q", [CompleteItem(t, None) for t in got.tokens])
            elif not any(stored(self.store).count_by_status().values()):
                return
        raise AssertionError(f"not drained: {stored(self.store).count_by_status()}")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 23, 34, 35, 39, 48, 50, 54, 79, 139, 198])
def test_every_job_is_archived_once_or_purged_after_a_random_run(
        tmp_path: Path, seed: int) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        r = _Run(seed, store, clock)
        b = await started(store, clock=clock, **{**r.config(), "held_in_records": True})
        try:
            for at in range(r.rnd.randint(40, 100)):
                op = r.rnd.choice(OPS)
                try:
                    b = await r.step(b, op, at)
                except OsqueueError as exc:
                    assert exc.code in EXPECTED, (seed, at, op, exc.code, str(exc))
            store.heal()
            await r.drain(b)
            await until(lambda: not stored(store).claim_records, 30)
            archived = Counter(rec["id"] for rec in archive_lines(store))
            assert [i for i, n in archived.items() if n > 1] == []
            assert set(archived) <= set(r.ids)
            if not r.purge_unknown:
                assert len(set(r.ids) - set(archived)) == r.purged
            head = stored(store)
            assert not any(head.count_by_status().values())
            assert not head.segment_refs and not head.seg_names
        finally:
            await b.stop(5)

    run(main(), timeout_s=240)
