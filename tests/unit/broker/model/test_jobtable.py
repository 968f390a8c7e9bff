"""The job table: bulk-pushed jobs kept as their lines until first touched.

What is checked: a line reads as the job it encodes, whatever its payload
holds; the first claim's spliced line is the claimed job's encoding; reads
that must not make Jobs do not; the views answer as if every job were a Job;
a bulk push leaves nothing for the garbage collector; and under lost or
unlanded writes, a crash and a takeover, no bulk-pushed job is lost or
duplicated.
"""

from __future__ import annotations

import gc
from pathlib import Path

import orjson
import pytest

from broker import timefmt
from broker.model import lifecycle, transitions
from broker.model import state as S
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.job import CLAIMED, COMPLETED, DEAD, PENDING, Job, seq_of
from broker.model.job_lines import (
    job_line,
    line_due_stamp,
    new_pending_lines,
    pending_from_line,
    stored_dict,
)
from broker.model.jobtable import JobTable
from broker.model.ops import (
    Claim,
    Complete,
    CompleteItem,
    Fail,
    FailItem,
    NewJob,
    Purge,
    Push,
    PushPayloads,
    Redrive,
)
from broker.model.views import list_jobs, stats
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor
from tests.support.spill_store import held_at_spill_parts
from tests.support.states import new_queue

NOW = 1_700_000_000_123

# payloads whose text looks like the fields the table reads from a line
TRICKY = [
    b'{"run_at":"2020-01-01T00:00:00.000Z","status":"pending","attempts":0,"payload":1}',
    b'"\\"max_attempts\\":9,\\"created_at\\":\\""',
    b'[",", "}", "\\u00e9", 1.5e300]',
    b"12345678901234567890",
    b"null",
]


def _pushed(payloads: list[bytes], now_ms: int = NOW) -> S.QueueState:
    state = new_queue()
    transitions.apply(state, PushPayloads(tuple(payloads)), now_ms)
    return state


def _fresh_line(job: Job) -> bytes:
    """The job's line from its fields, leaving its cached line as it was."""
    cached, job._enc = job._enc, None
    try:
        return job_line(job)
    finally:
        job._enc = cached


@pytest.mark.parametrize("first_seq", [1, 1023, 9_999_999_998, 123_456_789_012_345])
@pytest.mark.parametrize("max_attempts", [1, 7, 100])
def test_a_line_reads_as_the_job_it_encodes(first_seq: int, max_attempts: int) -> None:
    lines = new_pending_lines(first_seq, TRICKY, NOW, max_attempts)
    for seq, (payload, line) in enumerate(zip(TRICKY, lines, strict=True), first_seq):
        job = pending_from_line(seq, line)
        expected = Job(seq, payload, PENDING, 0, NOW, 0, max_attempts, NOW)
        assert job.to_plain() == expected.to_plain()
        assert job.payload == payload  # the bytes as pushed, not re-encoded
        assert job._enc == line == _fresh_line(expected)
        assert line_due_stamp(line) == timefmt.fmt_bytes(NOW)


def test_the_first_claim_splices_the_claimed_jobs_line() -> None:
    state = _pushed(TRICKY)
    out = transitions.apply(state, Claim('w"\u00e9', 100, 30_000), NOW + 5).jobs
    assert [j.payload for j in out] == TRICKY
    for job in state.jobs.values():
        assert job.status == CLAIMED and job.attempts == 1
        assert job._enc is not None  # spliced at the claim, not left to the encode
        assert job._enc == _fresh_line(job) == b",\n" + orjson.dumps(stored_dict(job))


def test_reads_that_must_not_make_jobs_leave_lines_as_lines() -> None:
    state = _pushed([b"%d" % i for i in range(10)])
    table = state.jobs
    assert all(isinstance(e, bytes) for e in table.entries.values())
    peeked = list(table.peek())
    assert [j.seq for j in peeked] == list(range(1, 11))
    assert state.count_by_status()[PENDING] == 10 and len(table) == 10 and 5 in table
    stats(state, NOW)
    list_jobs(state, None, 5, "j3")
    assert all(isinstance(e, bytes) for e in table.entries.values())
    job = table.get(4)
    assert job is table[4] is table.get(4)  # made once and kept, so it can be changed
    assert not isinstance(table.entries[4], bytes)
    assert sum(isinstance(e, bytes) for e in table.entries.values()) == 9
    assert table.get(99) is None and 99 not in table
    with pytest.raises(KeyError):
        table[99]


def test_every_job_reads_in_seq_order_whichever_were_touched() -> None:
    state = _pushed([b"%d" % i for i in range(3000)])  # three blocks
    transitions.apply(state, Claim("w", 7, 30_000), NOW)
    state.jobs.get(2500)
    assert [j.seq for j in state.jobs.peek()] == list(range(1, 3001))
    assert list(state.jobs) == list(range(1, 3001))
    assert [j.seq for j in state.jobs.values()] == list(range(1, 3001))
    assert [seq for seq, _ in state.jobs.items()] == list(range(1, 3001))


def _all_jobs(state: S.QueueState) -> S.QueueState:
    """The same queue read back from its bytes: every job a Job."""
    codec.stamp(state, "test", NOW, "c-test")
    back = decode_state(codec.encode(state))
    assert not any(isinstance(e, bytes) for e in back.jobs.entries.values())
    back.claims = state.claims  # (the claim rate is the broker's, never stored)
    return back


def test_views_answer_as_if_every_job_were_a_job() -> None:
    state = new_queue()
    transitions.apply(state, PushPayloads((b"1", b"2", b"3")), NOW)
    transitions.apply(state, PushPayloads((b"4", b"5")), NOW + 60_000)  # due later
    transitions.apply(state, Push((NewJob(b"6", delay_ms=5_000),)),
                      NOW)
    [held] = transitions.apply(state, Claim("w", 1, 30_000), NOW + 10).jobs
    transitions.apply(state, Fail((FailItem(held.token, "boom", None),)), NOW + 20)
    transitions.apply(state, Complete((CompleteItem(
        transitions.apply(state, Claim("w", 1, 30_000), NOW + 30).jobs[0].token, b"1"),)),
        NOW + 40)
    for now in (NOW + 1_000, NOW + 120_000):
        back = _all_jobs(state)
        assert stats(state, now) == stats(back, now)
        assert state.count_by_status() == back.count_by_status()
        for status in (None, PENDING, CLAIMED, DEAD, COMPLETED):
            for after in (None, "j1", "j3"):
                page = [j.to_plain() for j in list_jobs(state, status, 2, after)]
                assert page == [j.to_plain() for j in
                                list_jobs(back, status, 2, after)]
        assert state.jobs == back.jobs and back.jobs == state.jobs
    assert state.jobs != _pushed([b"1"]).jobs


def test_a_bulk_push_leaves_nothing_for_the_garbage_collector() -> None:
    state = new_queue()
    transitions.apply(state, PushPayloads((b"0",)), NOW)  # the containers exist
    gc.collect()
    before = len(gc.get_objects())
    transitions.apply(state, PushPayloads(tuple(b"%d" % i for i in range(20_000))), NOW)
    grown = len(gc.get_objects()) - before
    assert grown < 100, f"{grown} objects for the collector after a push of 20,000 jobs"
    assert not any(gc.is_tracked(e) for e in state.jobs.entries.values())


def test_a_purge_and_a_redrive_reach_jobs_kept_as_lines() -> None:
    state = _pushed([b"%d" % i for i in range(50)])
    transitions.apply(state, Claim("w", 10, 30_000), NOW)
    result = transitions.apply(state, Purge((PENDING,)), NOW)
    assert result.count == 40 and len(state.jobs) == 10
    assert decode_state(codec.encode(state)).count_by_status()[CLAIMED] == 10


def test_a_table_compares_with_tables_and_dicts_only() -> None:
    table = JobTable()
    assert table == {} and table == JobTable()
    assert table != {1: Job(1, b"1")} and table != [] and table != 3
    with pytest.raises(TypeError):
        hash(table)


def test_an_illegal_move_of_a_line_made_job_is_refused() -> None:
    state = _pushed([b"1"])
    job = state.jobs[1]
    with pytest.raises(lifecycle.IllegalMove):
        lifecycle.move(state, job, COMPLETED, NOW)


# -- under faults: the store is checked afterwards ------------------------------------


@pytest.mark.parametrize("fault", [LOST_REPLY, NOT_LANDED])
def test_bulk_pushed_jobs_survive_lost_writes_a_crash_and_a_takeover(
        tmp_path: Path, fault: str) -> None:
    """A publish and a claim from its lines each hit a write whose outcome the
    broker must find out by re-reading (the state it re-applies on holds Jobs,
    not lines); then the broker dies and another takes over. Every job is in
    the store exactly once, the claimed ones under the tokens their workers
    hold, and the successor completes them and hands out the rest."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    chunks = [b"".join(b'\t{"n":%d}\n' % (c * 1000 + i) for i in range(1000)) for c in range(3)]

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store, clock=clock)
        await a.push("q", [NewJob(b'{"n":-1}')])  # the queue exists
        for c, chunk in enumerate(chunks):
            await a.stage("q", f"w-1/p{c}-c0", chunk)
        store.inject("write_if_match", fault, key_contains="queue.json")
        published = await a.publish("q", "w-1/", [f"w-1/p{c}-c0" for c in range(3)],
                                    once="write:w-1")
        assert published["published"] == 3000 and not published["duplicate"]
        store.inject("write_if_match", fault, key_contains="queue.json")
        held = await a.claim("q", "w1", 1500, 60.0)
        assert len(held) == 1500
        await crash(a)
        b = await successor(inner, clock)
        done = await b.complete("q", [CompleteItem(j.token, b"1") for j in held])
        assert all(r.ok for r in done)
        rest = await b.claim("q", "w2", 5000, 60.0)
        await b.stop(drain_s=5)
        return [j.id for j in held], [j.id for j in rest]

    held, rest = run(main())
    assert [kind for _, kind, _ in store.injected] == [fault, fault]  # both writes hit
    assert len(held) + len(rest) == 3001 and not set(held) & set(rest)
    state = stored(inner)
    assert state.counters.enqueued == 3001
    # (pushed lines re-read may spill as pending (test_spill_writer_pending_reread.py); a
    # claim from their object holds them at a spill part: no line, named by its record)
    spill_held = held_at_spill_parts(inner)
    pending_or_claimed = [j.id for j in state.jobs.values() if j.status != COMPLETED]
    assert sorted(pending_or_claimed + [j.id for j in spill_held]) == sorted(rest)
    assert all(state.jobs[seq_of(i) or 0].status == CLAIMED for i in pending_or_claimed)
    queued = sorted([orjson.loads(j.payload)["n"] for j in state.jobs.values()
                     if j.status != COMPLETED] + [orjson.loads(j.payload)["n"] for j in spill_held])
    completed = [rec for rec in archive_lines(inner)] + [
        j.to_plain() for j in state.jobs.values() if j.status == COMPLETED]
    assert sorted(rec["id"] for rec in completed) == sorted(held)  # each once
    assert sorted(queued + [rec["payload"]["n"] for rec in completed]) == list(range(-1, 3000))


def test_a_purge_of_dead_jobs_leaves_lines_as_lines() -> None:
    state = new_queue()
    state.settings.max_attempts = 1  # one failure makes a job dead
    transitions.apply(state, PushPayloads(tuple(b"%d" % i for i in range(100))), NOW)
    [held] = transitions.apply(state, Claim("w", 1, 30_000), NOW).jobs
    transitions.apply(state, Fail((FailItem(held.token, "boom", None),)), NOW)
    assert state.jobs[1].status == DEAD
    assert transitions.apply(state, Purge((DEAD,)), NOW).count == 1
    assert sum(isinstance(e, bytes) for e in state.jobs.entries.values()) == 99
    assert transitions.apply(state, Purge((PENDING,)), NOW).count == 99
    assert len(state.jobs) == 0


def test_a_redrive_naming_a_job_twice_redrives_it_once() -> None:
    state = new_queue()
    state.settings.max_attempts = 1
    transitions.apply(state, PushPayloads((b"1", b"2")), NOW)
    [held] = transitions.apply(state, Claim("w", 1, 30_000), NOW).jobs
    transitions.apply(state, Fail((FailItem(held.token, "boom", None),)), NOW)
    result = transitions.apply(state, Redrive(ids=(held.id, held.id, "j2")), NOW)
    assert result.count == 1 and list(result.ids) == [held.id]
    assert state.jobs[1].status == PENDING and state.count_by_status()[PENDING] == 2
