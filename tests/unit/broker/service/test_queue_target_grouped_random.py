"""broker.service.queue_target's grouped claims under random runs with the
broker's defaults (claims of segments held in records, grouped segments):
pushes into groups (inline, or by reference into grouped segments), claims,
completes, fails, releases, cancels, heartbeats, purges, redrives, the clock
moved past leases, injected store faults (lost replies, writes that never
land, failed segment reads) and the owner killed and succeeded by a new
broker reading the stored head, the owner's wall clock stepping back, group
settings changed between claims. One kind of group setting a run: limits
(with an override, changed), fifo order (dead jobs held or skipped), or a
per-group rate.

After every step the STORED head decodes, and the claimed jobs it holds per
group (rebuilt from its claim records) are within the group's limit (fifo:
one; once limits were changed, checked for the groups a claim served). In
fifo order every job a claim answered was, in the head that claim wrote, its
group's oldest job not finished (a dead one counts as finished while dead
jobs are skipped). With a rate, the jobs claims answered per group never
exceed ``burst * brokers + rate * elapsed`` (the latest time less the start;
a new broker starts full buckets; a re-read after a lost reply keeps them). Then the
faults heal and the queue is drained: every job pushed is archived exactly
once unless a purge took it. In-process brokers on a file store."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.groups.counts import held_by_group
from broker.model.job import CANCELLED, COMPLETED, DEAD
from broker.model.ops import CompleteItem, FailItem, NewJob, groups_of
from broker.service.broker import Broker
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, until

HEAD = paths.state_key("q")
EXPECTED = {"outcome_unknown", "storage_unavailable", "conflict", "invalid_request",
            "not_the_broker", "broker_unavailable", "unknown_queue"}
OPS = ["push", "push", "claim", "claim", "claim", "complete", "fail", "release", "cancel",
       "heartbeat", "advance", "fault", "crash", "purge", "redrive", "step_back", "configure"]
GROUPS = ["g0", "g1", "g2", "g3"]
RATE, BURST = 1.0, 2
MODES: dict[str, dict[str, Any]] = {
    "limit": {"group_limit": 2, "group_limits": {"g0": 1}},
    "fifo": {"group_order": "fifo", "group_dead": "hold"},
    "rate": {"group_limit": 3, "group_rate_per_s": RATE, "group_burst": BURST},
}


class _Run:
    def __init__(self, seed: int, mode: str, store: FaultyStore, clock: Clock) -> None:
        self.rnd = random.Random(seed)
        self.mode, self.store, self.clock = mode, store, clock
        self.ids: list[str] = []
        self.tokens: list[str] = []
        self.purged = 0
        self.purge_unknown = False
        self.pushed = 0
        self.brokers = 1
        self.start_ms = self.latest_ms = clock.now_ms()
        self.settings = dict(MODES[mode])
        self.claimed: Counter[str | None] = Counter()  # jobs claims answered, per group
        self.lowered = False  # (limits changed: a group may hold more than a lowered one)

    def config(self) -> dict[str, object]:
        return {"segment_push_jobs": 5}

    def some(self, items: list[str], most: int) -> list[str]:
        return self.rnd.sample(items, min(len(items), self.rnd.randint(1, most)))

    def fault(self) -> None:
        rnd, store = self.rnd, self.store
        if rnd.random() < 0.7:
            store.inject("write_if_match", rnd.choice([LOST_REPLY, NOT_LANDED, LOST_REPLY_412]),
                         key_contains=HEAD, times=rnd.choice([1, 2]))
        else:
            store.inject(rnd.choice(["read", "get"]), NOT_LANDED, key_contains="/segments/",
                         times=rnd.choice([1, 3]))

    def limit(self, group: str | None) -> int | None:
        if group is None:
            return None
        if self.mode == "fifo":
            return 1
        settings = self.settings
        return (settings.get("group_limits") or {}).get(group, settings["group_limit"])

    def check_store(self, groups: set[str | None] | None = None) -> None:
        """The stored head decodes; no group (of ``groups``: None, every one) holds
        more than its limit now."""
        try:
            head = stored(self.store.inner)
        except KeyError:
            return  # (not written yet)
        held = held_by_group(head.claim_records.values(), head.jobs)
        for group, n in held.items():
            limit = self.limit(group)
            if groups is None or group in groups:
                assert limit is None or n <= limit, (group, held, self.settings)

    def check_claim(self, got: Any) -> None:
        """The groups a claim answered are its jobs' groups in the head it wrote;
        in fifo order each was its group's oldest unfinished job there; with a
        rate, no group was answered past its buckets."""
        head = stored(self.store.inner)
        named = groups_of(got)
        self.check_store({head.jobs[int(i[1:])].group for i in got.ids})  # (limits lowered)
        for i, job_id in enumerate(got.ids):
            job = head.jobs[int(job_id[1:])]
            assert named.get(i) == job.group, (job_id, named.get(i), job.group)
            self.claimed[job.group] += 1
            if self.mode == "fifo" and job.group is not None:
                done = (COMPLETED, CANCELLED) if self.settings.get("group_dead") == "hold" \
                    else (COMPLETED, CANCELLED, DEAD)  # (skip: a dead job holds nothing)
                older = [j.id for j in head.jobs.values() if j.group == job.group
                         and j.seq < job.seq and j.status not in done]
                assert older == [], (job_id, older)
        if self.mode == "rate":
            elapsed_s = (self.latest_ms - self.start_ms) / 1000  # (the clock steps back too)
            bound = BURST * self.brokers + RATE * elapsed_s
            for group, n in self.claimed.items():
                assert group is None or n <= bound, (group, n, bound, self.brokers)

    async def step(self, b: Broker, op: str, at: int) -> Broker:
        rnd = self.rnd
        if op == "push":
            k = rnd.choice([1, 2, 3, 8, 20])
            body = [b'{"n":%d}' % (self.pushed + i) for i in range(k)]
            self.pushed += k
            # (one set of options a push: a push of 5 or more then goes by reference)
            attempts, priority = rnd.choice([1, 2]), rnd.choice([0, 0, 1])
            delay = rnd.choice([0, 0, 0, 3_000])
            jobs = [NewJob(p, group=rnd.choice([None, *GROUPS]), max_attempts=attempts,
                           priority=priority, delay_ms=delay) for p in body]
            self.ids += await b.push("q", jobs)
        elif op == "claim":
            got = await b.claim("q", "w", rnd.randint(1, 12), lease_s=rnd.choice([5, 60]))
            self.tokens += [j.token for j in got]
            self.check_claim(got)
        elif op == "complete" and self.tokens:
            await b.complete("q", [CompleteItem(t, None) for t in self.some(self.tokens, 6)])
        elif op == "fail" and self.tokens:
            await b.fail("q", [FailItem(t, "x", rnd.choice([0, None]))
                               for t in self.some(self.tokens, 4)])
        elif op == "release" and self.tokens:
            await b.release("q", self.some(self.tokens, 4))
        elif op == "cancel" and self.ids:
            await b.cancel("q", self.some(self.ids, 4))
        elif op == "heartbeat" and self.tokens:
            await b.heartbeat("q", self.some(self.tokens, 4), 60)
        elif op == "advance":
            self.clock.advance(rnd.choice([0.2, 1, 10, 70]))
            self.latest_ms = max(self.latest_ms, self.clock.now_ms())
        elif op == "step_back":  # (the wall clock only: the monotonic one never goes back)
            self.clock.ms -= rnd.choice([300, 2_000, 20_000])
        elif op == "configure" and self.mode != "rate":
            if self.mode == "limit":
                change: dict[str, Any] = {"group_limit": rnd.choice([1, 2, 3]),
                                          "group_limits": {"g0": rnd.choice([0, 1, None])}}
            else:
                change = {"group_dead": rnd.choice(["hold", "skip"])}
            await b.create_queue("q", change)
            self.settings.update(change)
            self.lowered = True
        elif op == "fault":
            self.fault()
        elif op == "crash":
            await crash(b)
            self.store.heal()
            b = await started(self.store, f"http://s{at}", self.clock, **self.config())
            self.brokers += 1
            self.clock.advance(31)  # (a broker lease: the dead owner's queue is free)
            await b.watch()
        elif op == "purge" and rnd.random() < 0.3:
            self.purge_unknown = True
            self.purged += await b.purge("q", [rnd.choice(["claimed", "dead", "pending"])])
            self.purge_unknown = False
        elif op == "redrive" and self.ids:
            await b.redrive("q")
        return b

    async def drain(self, b: Broker) -> None:
        """No group setting; past every lease, dead jobs redriven, everything
        claimed and completed."""
        await b.create_queue("q", {name: None for name in (
            "group_limit", "group_limits", "group_order", "group_dead", "group_rate_per_s",
            "group_burst")})
        for _ in range(200):
            self.clock.advance(700)
            await b.redrive("q")
            got = await b.claim("q", "w", 1000, lease_s=600)
            if got:
                await b.complete("q", [CompleteItem(t, None) for t in got.tokens])
            elif not any(stored(self.store).count_by_status().values()):
                return
        raise AssertionError(f"not drained: {stored(self.store).count_by_status()}")


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("seed", range(6))
def test_grouped_claims_keep_limits_order_and_rates_in_a_random_run(
        tmp_path: Path, seed: int, mode: str) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def main() -> None:
        r = _Run(seed, mode, store, clock)
        b = await started(store, clock=clock, **r.config())
        try:
            await b.create_queue("q", MODES[mode])
            for at in range(r.rnd.randint(60, 120)):
                op = r.rnd.choice(OPS)
                try:
                    b = await r.step(b, op, at)
                except OsqueueError as exc:
                    assert exc.code in EXPECTED, (seed, at, op, exc.code, str(exc))
                if not r.lowered:
                    r.check_store()
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
        finally:
            await b.stop(5)

    run(main(), timeout_s=240)
