"""The job table's lines against Jobs: a state whose bulk-pushed jobs are kept as
their encoded lines (broker/model/jobtable.py) behaves, answers and encodes exactly as
the same state with every job a Job, and under lost, late and 412-answered
writes, a crash and a takeover every bulk-pushed job is in the store exactly
once. (Ways to lose, duplicate or strand a job, corrupt the object or answer a
call wrongly through the lines; every one held when first written.)
"""

from __future__ import annotations

import copy
import pickle
import random
from pathlib import Path

import orjson
import pytest

from broker import paths, timefmt
from broker.errors import OsqueueError
from broker.model import lifecycle
from broker.model import state as S
from broker.model import transitions as T
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, DEAD, PENDING, job_id_for
from broker.model.job_lines import job_line
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Configure,
    DropArchived,
    Fail,
    FailItem,
    Heartbeat,
    NewJob,
    Op,
    Purge,
    Push,
    PushPayloads,
    ReadJobs,
    ReadStats,
    Reclaim,
    Redrive,
    Result,
    TakeOver,
)
from broker.model.views import list_jobs, stats
from broker.storage import FileStore
from tests.support.direct import DirectQueue
from tests.support.faults import LATE, LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor
from tests.support.spill_store import held_at_spill_parts
from tests.support.states import new_queue, read_back, tagged

NOW = 1_700_000_000_123

# payloads that hold the markers the table searches lines for, a %, spaces
TRICKY = [
    b'{"run_at":"2020-01-01T00:00:00.000Z","status":"pending","attempts":0,"payload":1}',
    b'"\\"attempts\\":0,\\"status\\":\\"pending\\""',
    b'{"a":"%d %s %%"}',
    b" 2 ",
    b'[",", "}", "\\u00e9"]',
    b"null",
]


def _pushed(payloads: list[bytes], now: int = NOW, first_seq: int = 1,
            max_attempts: int = 3) -> S.QueueState:
    state = new_queue(now, S.QueueSettings(max_attempts=max_attempts))
    state.counters.enqueued = first_seq - 1
    T.apply(state, PushPayloads(tuple(payloads)), now)
    return state


def _lines(state: S.QueueState) -> int:
    return sum(isinstance(e, bytes) for e in state.jobs.entries.values())


def _written(state: S.QueueState, now: int, commit: str) -> bytes:
    return _written_alike((state,), now, commit)


def _written_alike(states: tuple[S.QueueState, ...], now: int, commit: str) -> bytes:
    """The bytes every one of ``states`` writes for ``commit``, which must be equal;
    each state's jobs equal the re-read's. (Equal bytes decode alike: the object is
    decoded and re-encoded once for them all.)"""
    datas = []
    for state in states:
        codec.stamp(state, "w", now, commit)
        datas.append(codec.encode(state))
    data = datas[0]
    assert all(d == data for d in datas)
    back = decode_state(data)
    assert codec.encode(back) == data  # a re-read writes the same bytes
    plain = orjson.loads(data)
    for state in states:
        assert plain == orjson.loads(codec.encode_full(state))
        assert state.jobs == back.jobs and back.jobs == state.jobs
    return data


def _answer(r: Result | OsqueueError) -> object:
    if isinstance(r, OsqueueError):
        return ("refused", type(r).__name__, str(r))
    view = orjson.dumps(r.view, default=str) if r.view is not None else None
    return (r.changed, list(r.ids), [tuple(j) for j in r.jobs], [tuple(i) for i in r.items],
            r.count, r.duplicate, r.replayed, view, None if r.error is None else str(r.error))


# -- 1. a state with lines against the same state with every job a Job --------------


def _random_op(rnd: random.Random, tokens: list[str], base: int) -> Op:
    k = rnd.random()
    if k < 0.16:
        n = rnd.choice([rnd.randint(1, 30), rnd.randint(900, 1300)])
        return PushPayloads(tuple(rnd.choice(TRICKY) for _ in range(n)),
                              request=rnd.choice([None, f"p{rnd.randint(0, 3)}"]))
    if k < 0.21:
        return Push(tuple(NewJob(rnd.choice(TRICKY), rnd.choice([0, 0, 2]),
                                     rnd.choice([0, 0, 3_000]), rnd.choice([None, 1]),
                                     rnd.choice([None, f"k{rnd.randint(0, 5)}"]))
                            for _ in range(rnd.randint(1, 4))))
    if k < 0.36:
        return Claim(rnd.choice(["w", 'w"\u00e9\\']), rnd.choice([rnd.randint(1, 15), 600]),
                       rnd.choice([1_000, 30_000]),
                       request=rnd.choice([None, None, f"c{rnd.randint(0, 3)}"]))
    if k < 0.46 and tokens:
        return Complete(tuple(CompleteItem(rnd.choice(tokens), rnd.choice([None, b"[1]"]))
                                for _ in range(rnd.randint(1, 6))))
    if k < 0.53 and tokens:
        return Fail(tuple(FailItem(rnd.choice(tokens), rnd.choice(["", "boom"]),
                                       rnd.choice([None, 0, 700]))
                            for _ in range(rnd.randint(1, 3))))
    if k < 0.58 and tokens:
        return Heartbeat(tuple(rnd.choice(tokens) for _ in range(2)), 20_000)
    if k < 0.61:
        # made-up tokens, most naming jobs still kept as lines
        made_up = [f"j{base + rnd.randint(1, 2000):010d}.{rnd.randint(1, 500)}"
                   for _ in range(3)]
        return rnd.choice([Complete(tuple(CompleteItem(t) for t in made_up)),
                           Fail(tuple(FailItem(t) for t in made_up)),
                           Heartbeat(tuple(made_up))])
    if k < 0.64:
        return Reclaim()
    if k < 0.66:
        ids = None if rnd.random() < 0.5 else tuple(sorted(
            {f"j{base + rnd.randint(1, 2000):010d}" for _ in range(3)}))
        return Redrive(ids)
    if k < 0.68:
        return Purge(rnd.choice([(DEAD,), (PENDING, DEAD), (CLAIMED,)]))
    if k < 0.70:
        return TakeOver(rnd.choice(["b1", "b2"]), "http://x", 30_000)
    if k < 0.74:
        return ReadJobs(rnd.choice([None, PENDING, CLAIMED, COMPLETED]),
                          rnd.randint(1, 40),
                          rnd.choice([None, f"j{base + rnd.randint(1, 1500):010d}"]),
                          rnd.random() < 0.5)
    if k < 0.77:
        return ReadStats()
    if k < 0.79:
        return Configure({"max_attempts": rnd.choice([1, 2, 3, 1000])})
    return Reclaim()


@pytest.mark.slow  # make test runs seed 0 (both bases), make long all three; make check none
@pytest.mark.parametrize("seed", [0, *(pytest.param(seed, marks=pytest.mark.long)
                                       for seed in (1, 2))])
@pytest.mark.parametrize("base", [0, 9_999_999_000])
def test_lines_answer_and_encode_as_jobs_would(seed: int, base: int) -> None:
    """Every op answered alike and every commit's bytes equal, whether the jobs
    are kept as lines (A) or every one is made a Job after each op (B); each
    commit re-reads as the same bytes; now and then both are reloaded."""
    rnd = random.Random(seed)
    now = NOW
    a, b = new_queue(now), new_queue(now)
    a.counters.enqueued = b.counters.enqueued = base
    tokens: list[str] = []  # (a list: ops pick from it by position)
    known: set[str] = set()
    for step in range(90):
        op = _random_op(rnd, tokens, base)
        answers = []
        for st in (a, b):
            try:
                r: Result | OsqueueError = T.apply(st, op, now)
            except OsqueueError as exc:
                r = exc
            answers.append(_answer(r))
        list(b.jobs.values())
        assert answers[0] == answers[1], (seed, step, op)
        fresh = [tagged(j.lease_token) for j in b.jobs.touched()
                 if j.lease_token and tagged(j.lease_token) not in known]
        tokens += fresh
        known.update(fresh)
        if rnd.random() < 0.25:
            data = _written_alike((a, b), now, f"c{step}")
            done = tuple(s for s in a.completed if s <= a.seq)
            if done:
                for st in (a, b):
                    T.apply(st, DropArchived(done), now)
            if rnd.random() < 0.1:
                a, b = read_back(data), read_back(data)
        now += rnd.choice([0, 1, 10, 600, 5_000, 40_000])


# -- 2. the line readers --------------------------------------------------------------


@pytest.mark.parametrize("first_seq", [1, 1023, 9_999_999_995, 99_999_999_999_998])
@pytest.mark.parametrize("max_attempts", [1, 1000])
def test_claimed_lines_across_digit_and_block_boundaries(
        first_seq: int, max_attempts: int) -> None:
    """A claim from lines whose seqs cross a digit count or a block boundary (1,024 seqs)
    hands out the payloads and ids pushed, caches lines equal to fresh encodes
    with the queue's max_attempts, and its jobs complete; the written counters
    count every push."""
    state = _pushed(TRICKY * 2, first_seq=first_seq, max_attempts=max_attempts)
    out = T.apply(state, Claim('w"\n', 7, 30_000), NOW).jobs
    assert [j.payload for j in out] == (TRICKY * 2)[:7]
    assert [j.id for j in out] == [job_id_for(s) for s in range(first_seq, first_seq + 7)]
    for job in state.jobs.touched():
        cached, job._enc = job._enc, None
        assert cached == job_line(job)
        assert job.max_attempts == max_attempts
    data = _written(state, NOW, "c1")
    done = T.apply(state, Complete(tuple(CompleteItem(j.token, b"1") for j in out)),
                   NOW + 1)
    assert all(i.ok for i in done.items)
    _written(state, NOW + 1, "c2")
    assert orjson.loads(data)["counters"]["enqueued"] == first_seq + len(TRICKY) * 2 - 1


def test_made_up_tokens_for_line_seqs_change_nothing() -> None:
    """Complete, fail and heartbeat with made-up tokens for jobs kept as lines (a
    fence the job never had, or another job's) are refused and change neither
    the counts nor the jobs written."""
    state = _pushed([b"%d" % i for i in range(20)])
    T.apply(state, Claim("w", 1, 30_000), NOW)  # fence 1 belongs to j1
    before = _written(state, NOW, "c1")
    for fence in (1, 2, 99):
        tok = f"j0000000005.{fence}"
        assert not T.apply(state, Complete((CompleteItem(tok, b"1"),)), NOW).items[0].ok
        assert not T.apply(state, Fail((FailItem(tok, "x"),)), NOW).items[0].ok
        assert not T.apply(state, Heartbeat((tok,)), NOW).items[0].ok
    assert state.count_by_status() == {PENDING: 19, CLAIMED: 1, DEAD: 0, COMPLETED: 0, CANCELLED: 0}
    after = _written(state, NOW, "c1")  # the same commit again: same bytes but the seq
    assert orjson.loads(after)["jobs"] == orjson.loads(before)["jobs"]


def test_a_repeated_claim_hands_back_the_jobs_it_took_from_lines() -> None:
    """A keyed claim repeated, in memory and after the object is re-read, hands
    back the very jobs it took from lines and takes no others."""
    state = _pushed([b"%d" % i for i in range(30)])
    first = T.apply(state, Claim("w", 10, 30_000, request="r1"), NOW).jobs
    again = T.apply(state, Claim("w", 10, 30_000, request="r1"), NOW + 5)
    assert again.replayed and [tuple(j) for j in again.jobs] == [tuple(j) for j in first]
    back = read_back(_written(state, NOW, "c1"))
    again = T.apply(back, Claim("w", 10, 30_000, request="r1"), NOW + 5)
    assert [tuple(j) for j in again.jobs] == [tuple(j) for j in first]
    assert _lines(state) == 20


def test_takeover_and_reclaim_reach_jobs_claimed_from_lines() -> None:
    """A takeover re-leases jobs claimed from lines on the new broker's clock; once
    those leases run out a reclaim returns them, and a later claim hands out all
    50 jobs under new tokens."""
    state = _pushed([b"%d" % i for i in range(50)])
    held = T.apply(state, Claim("w", 5, 1_000), NOW).jobs
    T.apply(state, TakeOver("b2", "http://b2", 30_000), NOW + 10_000)
    for job in state.jobs.touched():  # a fresh lease on the new broker's clock
        assert job.lease_expires_ms == NOW + 10_000 + 1_000
    assert T.apply(state, Reclaim(), NOW + 10_500).ids == []
    assert len(T.apply(state, Reclaim(), NOW + 11_001).ids) == 5
    assert state.count_by_status()[PENDING] == 50 and _lines(state) == 45
    # the retried ones come back after their backoff, the lines first
    got = T.apply(state, Claim("w", 100, 30_000), NOW + 20_000).jobs
    assert sorted(j.id for j in got) == [job_id_for(s) for s in range(1, 51)]
    assert not {j.token for j in got} & {j.token for j in held}
    _written(state, NOW + 20_000, "c1")


def test_purge_of_dead_jobs_keeps_every_pending_line() -> None:
    """A purge of dead jobs removes them only: the 37 pending lines stay and read
    back as written, a redrive naming purged ids does nothing, all 37 are
    claimable."""
    state = _pushed([b"%d" % i for i in range(40)], max_attempts=1)
    held = T.apply(state, Claim("w", 3, 30_000), NOW).jobs
    T.apply(state, Fail(tuple(FailItem(j.token, "x") for j in held)), NOW)
    assert T.apply(state, Purge((DEAD,)), NOW).count == 3
    assert state.count_by_status() == {PENDING: 37, CLAIMED: 0, DEAD: 0, COMPLETED: 0, CANCELLED: 0}
    back = decode_state(_written(state, NOW, "c1"))
    assert sorted(j.seq for j in back.jobs.values()) == list(range(4, 41))
    assert T.apply(state, Redrive((held[0].id, "j0000000009")), NOW).count == 0
    assert len(T.apply(state, Claim("w", 100, 30_000), NOW).jobs) == 37


def test_a_clock_moved_back_neither_strands_nor_doubles_a_line() -> None:
    """With the clock moved back before the push, nothing is due and stats names
    the push time as the next run; once the clock is back every line is claimed
    exactly once."""
    state = _pushed([b"%d" % i for i in range(10)])
    assert not T.apply(state, Claim("w", 10, 30_000), NOW - 5_000).jobs  # not due yet
    assert stats(state, NOW - 5_000)["next_delayed_run_at"] == timefmt.fmt(NOW)
    _written(state, NOW - 5_000, "c1")
    got = T.apply(state, Claim("w", 100, 30_000), NOW).jobs
    assert [j.id for j in got] == [job_id_for(s) for s in range(1, 11)]
    assert not T.apply(state, Claim("w", 100, 30_000), NOW + 1).jobs
    _written(state, NOW, "c2")


def test_views_of_several_pushes_equal_an_all_job_copy() -> None:
    """Stats and job listings of a state holding several pushes' lines (one pushed
    with the clock moved back) equal those of its re-read copy, whose jobs are
    all Jobs, at any time."""
    state = _pushed([b"1", b"2"], now=NOW)
    T.apply(state, PushPayloads((b"3",)), NOW - 60_000)  # clock went back
    T.apply(state, PushPayloads((b"4", b"5")), NOW + 60_000)
    T.apply(state, Claim("w", 1, 30_000), NOW + 61_000)
    back = decode_state(_written(state, NOW, "c1"))
    for now in (NOW - 120_000, NOW, NOW + 30_000, NOW + 120_000):
        assert stats(state, now) == stats(back, now)
        for status in (None, PENDING, CLAIMED):
            for after in (None, "j0000000001", "j0000000004"):
                assert ([j.to_plain() for j in list_jobs(state, status, 2, after)]
                        == [j.to_plain() for j in list_jobs(back, status, 2, after)])
    assert _lines(state) == 4


def test_copies_and_pickles_of_a_state_with_lines_encode_alike() -> None:
    """A deep copy and a pickled copy of a state holding lines write the same
    bytes as the state itself."""
    state = _pushed(TRICKY)
    T.apply(state, Claim("w", 2, 30_000), NOW)
    data = _written(copy.deepcopy(state), NOW, "c1")
    assert _written(pickle.loads(pickle.dumps(state)), NOW, "c1") == data
    assert _written(state, NOW, "c1") == data


def test_a_throwaway_job_from_peek_cannot_be_moved_in() -> None:
    """A Job from peek() is not the table's: move() takes it for a new job, and
    the only move from NEW (to pending) of an existing seq must not add a
    second line for it."""
    state = _pushed([b"1", b"2"])
    view = next(state.jobs.peek())
    with pytest.raises(lifecycle.IllegalMove):
        lifecycle.move(state, view, CLAIMED, NOW)
    assert len(orjson.loads(_written(state, NOW, "c1"))["jobs"]) == 2


def test_direct_queue_bulk_push_claim_complete(tmp_path: Path) -> None:
    """A bulk push, a claim and a complete through DirectQueue (no broker): once
    the completed jobs are archived and dropped, the stored object holds exactly
    the unclaimed lines' payloads."""
    q = DirectQueue(FileStore(tmp_path), "q")
    q.apply(PushPayloads(tuple(TRICKY)), NOW)
    held = q.apply(Claim("w", 3, 30_000), NOW).jobs
    q.apply(Complete(tuple(CompleteItem(j.token, b"2") for j in held)), NOW)
    q.apply(Reclaim(), NOW)  # archives and drops the completed ones
    state, _ = q.load()
    assert sorted(j.payload for j in state.jobs.values()) == sorted(TRICKY[3:])


# -- 3. through a broker, under faults -------------------------------------------------


@pytest.mark.parametrize("fault", [LOST_REPLY_412, LATE, NOT_LANDED, LOST_REPLY])
def test_lines_survive_every_write_fault_a_crash_and_a_takeover(
        tmp_path: Path, fault: str) -> None:
    """A bulk push, a claim from its lines, a heartbeat, a fail (retry) and a
    complete each hit a faulted write; a keyed claim is repeated; the broker
    dies and another takes over. Every job is in the store once."""
    clock = Clock(NOW)
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    def hit() -> None:
        store.inject("write_if_match", fault, key_contains="queue.json")

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store, clock=clock)
        await a.push("q", [b'{"n":-1}'])  # the queue exists
        hit()
        ids = await a.push("q", [b'{"n":%d}' % i for i in range(2500)], request="push-1")
        assert len(ids) == 2500
        store.land_late()
        again = await a.push("q", [b'{"n":%d}' % i for i in range(2500)], request="push-1")
        assert again == ids
        hit()
        held = await a.claim("q", "w1", 1200, 60.0, request="claim-1")
        store.land_late()
        repeat = await a.claim("q", "w1", 1200, 60.0, request="claim-1")
        assert [j.token for j in repeat] == [j.token for j in held]
        hit()
        assert all(r.ok for r in await a.heartbeat("q", [j.token for j in held[:100]], 90.0))
        store.land_late()
        hit()
        failed = await a.fail("q", [FailItem(j.token, "x", 0) for j in held[100:200]])
        assert all(r.ok for r in failed)
        store.land_late()
        hit()
        done = await a.complete("q", [CompleteItem(j.token, b"1") for j in held[200:700]])
        assert all(r.ok for r in done)
        store.land_late()
        await crash(a)
        b = await successor(inner, clock)
        done = await b.complete("q", [CompleteItem(j.token, b"1")
                                      for j in [*held[:100], *held[700:]]])
        assert all(r.ok for r in done)
        rest = await b.claim("q", "w2", 5000, 60.0)
        await b.stop(drain_s=5)
        return ([j.id for j in [*held[:100], *held[200:]]], [j.id for j in rest])

    completed_ids, rest = run(main())
    assert len(completed_ids) + len(rest) == 2501 and not set(completed_ids) & set(rest)
    state = stored(inner)
    assert state.counters.enqueued == 2501
    live = [j for j in state.jobs.values() if j.status != COMPLETED]
    # (the retried jobs spilled as pending; claimed again, held at a spill part: no line)
    held = held_at_spill_parts(inner)
    assert sorted([j.id for j in live] + [j.id for j in held]) == sorted(rest)
    completed = archive_lines(inner) + [j.to_plain() for j in state.jobs.values()
                                        if j.status == COMPLETED]
    assert sorted(rec["id"] for rec in completed) == sorted(completed_ids)  # each once
    got = sorted([orjson.loads(j.payload)["n"] for j in [*live, *held]]
                 + [rec["payload"]["n"] for rec in completed])
    assert got == list(range(-1, 2500))
    data = inner.read(paths.state_key("q")).data
    assert codec.encode(decode_state(data)) == data
