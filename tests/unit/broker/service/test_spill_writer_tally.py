"""broker.service.spill_writer's tally of spill candidates
(broker.model.spill_tally) through an in-process broker: kept from the blocks
each commit changed, it equals a count of the whole head after every call of a
random mix (pushes plain and with options, claims, fails retried and dead,
releases, redrives, purges, completes, a takeover), spills happen when the
rule says, and a load of plain pushes never runs the rule's scan of the head."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker import paths
from broker.model import spill_tally, spills
from broker.model.job import DEAD, PENDING
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import bodies, crash, run, started, successor
from tests.support.spill_store import spill_keys


def _check(broker: Broker) -> None:
    served = broker._queues["q"]
    state, writer = served.loop.state, served.target.spills
    assert state is not None
    if writer.seen == id(state):  # (a state the writer has not met yet is counted whole)
        assert writer.tally == spill_tally.tally(state, writer.pending)


async def _step(rng: random.Random, broker: Broker, held: list[str]) -> None:
    what = rng.choice(["push", "push_options", "claim", "fail", "fail", "complete",
                       "release", "redrive", "purge_dead"])
    if what == "push":
        await broker.push("q", bodies(rng.randint(1, 300)))
    elif what == "push_options":
        await broker.push("q", [NewJob(b'{"o":%d}' % i, max_attempts=2, priority=1)
                                for i in range(rng.randint(1, 40))])
    elif what == "claim":
        held += [j.token for j in await broker.claim("q", "w", rng.randint(1, 200))]
    elif held and what in ("fail", "complete", "release"):
        rng.shuffle(held)
        n = rng.randint(1, len(held))
        take = held[:n]
        del held[:n]
        if what == "fail":
            await broker.fail("q", [FailItem(t, "boom", rng.choice([0, 0, 5_000])) for t in take])
        elif what == "complete":
            await broker.complete("q", [CompleteItem(t) for t in take])
        else:
            await broker.release("q", take)
    if what == "redrive":
        await broker.redrive("q")
    elif what == "purge_dead" and rng.random() < 0.3:
        await broker.purge("q", [DEAD])


@pytest.mark.parametrize("seed", [1, 2])
def test_the_tally_kept_from_changed_blocks_equals_a_count_of_the_whole_head(
        tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, clock=clock, spill_jobs=60, spill_bytes=1 << 30)
        await a.create_queue("q", {"max_attempts": 2})
        held: list[str] = []
        for _ in range(120):
            await _step(rng, a, held)
            _check(a)
        assert a._queues["q"].target.spills.written > 0  # (the rule spilled on the way)
        await crash(a)
        b = await successor(store, clock, spill_jobs=60, spill_bytes=1 << 30)
        held = []
        for _ in range(60):
            await _step(rng, b, held)
            _check(b)
        assert spill_keys(store)
        await b.stop()

    run(go(), timeout_s=120)


def test_the_rule_runs_past_spill_jobs_as_before(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store, spill_jobs=10)
        ids = await a.push("q", [NewJob(b'{"n":%d}' % i, max_attempts=1) for i in range(11)])
        got = await a.claim("q", "w", 11)
        assert len(got) == 11
        await a.fail("q", [FailItem(j.token, "boom", 0) for j in got[:10]])
        served = a._queues["q"]
        assert served.loop.state is not None  # (no dead ref; the pushed jobs' pending one,
        # whose jobs the claim holds at its spill part, stays until the claim settles)
        assert [r.kind for r in served.loop.state.spill_refs] == [PENDING]
        await a.fail("q", [FailItem(got[10].token, "boom", 0)])  # (the 11th: past 10)
        state = served.loop.state
        assert [(r.kind, r.count) for r in state.spill_refs] == [(DEAD, 11)]
        assert served.target.spills.tally == spill_tally.Tally()
        assert (await a.stats("q"))["counts"][DEAD] == len(ids)
        await a.stop()

    run(go())


def test_plain_pushes_and_claims_never_run_the_rules_scan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[int] = []
    plan = spills.plan_dead

    def counted(state, *args, **kwargs):  # type: ignore[no-untyped-def]
        scans.append(len(state.jobs))
        return plan(state, *args, **kwargs)

    monkeypatch.setattr(spills, "plan_dead", counted)
    store = FileStore(tmp_path)

    async def go() -> None:
        a = await started(store)  # (the defaults: spills on)
        for i in range(40):
            await a.push("q", bodies(500, i * 500))
        got = await a.claim("q", "w", 300)
        await a.complete("q", [CompleteItem(j.token) for j in got])
        state = a._queues["q"].loop.state
        assert state is not None and len(state.jobs) >= 19_000
        assert scans == []
        await a.stop()

    run(go())


def test_a_pending_candidate_counts_only_with_spill_pending(tmp_path: Path) -> None:
    async def go() -> None:
        for pending in (False, True):
            store = FileStore(tmp_path / str(pending))
            a = await started(store, spill_jobs=1000, spill_pending=pending)
            await a.push("q", [NewJob(b'{"n":1}', max_attempts=3)])
            served = a._queues["q"]
            state = served.loop.state
            assert state is not None
            assert served.target.spills.tally.jobs == sum(
                1 for j in state.jobs.touched() if j.status == PENDING and pending)
            await a.stop()

    run(go())


def test_a_state_the_target_decodes_is_counted_whole_even_at_a_freed_states_id(
        tmp_path: Path) -> None:
    """The writer knows a state by its ``id``, which Python reuses once the
    object is freed: a state the target decodes (a re-read after a lost reply
    or a takeover) may come at the id of the one it replaces, with other jobs.
    The target makes the writer forget the last state, so the next one is
    counted whole (here: the same object with a tally that is not its own
    stands for a new state at the old id)."""
    store = FileStore(tmp_path)

    async def go() -> None:
        broker = await started(store, spill_jobs=1024)
        try:
            await broker.push("q", [NewJob(b'{"o":%d}' % i, priority=1) for i in range(50)])
            served = broker._queues["q"]
            state, writer = served.loop.state, served.target.spills
            assert state is not None and writer.seen == id(state)
            whole = spill_tally.tally(state, writer.pending)
            assert writer.tally == whole and whole.jobs == 50
            writer.tally = spill_tally.Tally()  # (the tally of another state)
            served.target.decode(store.read(paths.state_key("q")).data)  # (a re-read)
            assert writer.seen is None
            state.dirty_blocks.clear()  # (no block told: only a whole count sees it)
            assert writer._may_spill(state) is False
            assert writer.tally == whole
        finally:
            await broker.stop(5)

    run(go())
