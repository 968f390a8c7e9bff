"""Regressions found by four adversarial reviews of the failure-path work (R1-R13, N1-N6,
F1-F6, G1-G4).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found
in. The reviewer's notes head each test.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import urllib3

from broker import api, archive, keys, receipts, transitions
from broker import state as S
from broker import transitions as T
from broker.errors import (
    InvalidRequest,
    NotFound,
    OsqueueError,
    OutcomeUnknown,
    PayloadTooLarge,
    QueueFull,
    StorageRefused,
    UnknownQueue,
)
from broker.storage import FileStore
from broker.transitions import CompleteItem, FailItem, NewJob
from osqueue_spark import QueueClient, start_broker
from osqueue_spark import client as client_mod
from tests.broker.faults import LATE, LOST_REPLY, NOT_LANDED, REFUSED, Clock, FaultyStore
from tests.broker.inprocess import archive_lines, crash, run, started, stored, successor

# -- R1 ----------------------------------------------------------------------
# R1: one accepted push of a payload nested 255..1023 levels deep makes the queue
# object the broker itself wrote undecodable, for good.
#
# The staged push path (POST /push with the staged content type, stage+publish,
# df.write.format("osqueue") with a string payload column) validates a payload
# with ``orjson.loads`` (depth limit 1024) and stores its bytes verbatim. On any
# re-read, ``state._Spans._span`` calls ``orjson.dumps(value)`` whose depth limit
# is 255: it raises ``JSONEncodeError`` (a TypeError), which ``decode`` turns into
# ``CorruptState``. The broker then "refuses to touch" its own object: the
# queue is dead, and at the next start-up ``Broker.start()`` refuses to start at
# all (every queue of the store is down). (With whitespace in the payload, Python's
# json scanner raises RecursionError near depth 1000 as well.)

DEPTH = 300
PAYLOAD = b"[" * DEPTH + b"1" + b"]" * DEPTH  # canonical, valid JSON, 601 bytes


def test_payloads_deeper_than_the_limit_are_refused_on_every_push_path() -> None:
    limit = api.MAX_DEPTH
    ok = b"[" * limit + b"1" + b"]" * limit
    assert api.parse_staged(b"\t" + ok + b"\n", check=True, max_payload_bytes=1 << 20) == [ok]
    for body in (b"\t" + PAYLOAD + b"\n", b'{"priority":1}\t' + PAYLOAD + b"\n"):
        with pytest.raises(InvalidRequest, match="nested 300 levels"):
            api.parse_staged(body, check=True, max_payload_bytes=1 << 20)
    with pytest.raises(InvalidRequest, match=r"jobs\[0\]\.payload"):
        api.parse_push(orjson.loads(b'{"jobs":[{"payload":' + PAYLOAD + b"}]}"))
    with pytest.raises(InvalidRequest, match="result"):
        api.parse_complete(orjson.loads(b'{"items":[{"token":"j1.1","result":' + PAYLOAD
                                        + b"}]}"))
    text = b'["[[[[", ' * 1 + b'"a\\"[[["]'  # brackets inside strings do not count
    api.check_depth(text * 300, "payload")


def test_an_object_holding_a_deep_payload_decodes_and_serves(tmp_path: Path) -> None:
    """Written by an older version, or by hand: it must still decode, verbatim."""
    store = FileStore(tmp_path)
    state = transitions.new_state(S.timefmt.now_ms())
    transitions.apply(state, transitions.Push((NewJob(PAYLOAD), NewJob(b" [1, 2] "))),
                      state.updated_ms)
    S.stamp(state, "old", state.updated_ms, "c-old")
    store.create_if_absent(keys.state_key("q"), S.encode(state))
    assert [j.payload for j in S.decode(store.read(keys.state_key("q")).data).jobs.values()] \
        == [PAYLOAD, b" [1, 2] "]

    async def main() -> list[bytes]:
        b = await started(store, "http://b")
        got = await b.claim("q", "w", 2, 30.0)
        await b.stop(drain_s=5)
        return [j.payload for j in got]

    assert run(main()) == [PAYLOAD, b" [1, 2] "]


# -- R2 ----------------------------------------------------------------------
# R2: receipts (and the key window) are trimmed by comparing times another
# broker wrote with this broker's clock.
#
# ``Receipt.at_ms`` is the writing broker's wall clock. After a takeover the new
# owner runs ``transitions._trim_windows`` (in the Reclaim of its very first
# commit) with ``now_ms`` from its own clock: ``Receipts.trim`` drops every
# receipt with ``at_ms < now - retry_ttl_s``. If the new owner's clock is ahead
# of the old one's by more than ``retry_ttl_s`` (600 s by default), every
# receipt the old owner wrote seconds ago is dropped at once, so the client's
# retry of a call whose answer was lost during the failover (exactly what
# receipts exist for) is answered as new: a push creates its jobs a second time,
# a repeated complete is told "stale" for a completion that landed.
#
# TakeOver re-bases lease expiries on the new clock (design claim: "no decision
# compares another machine's clock with this one"), but not receipt times.

# new owner's clock ahead of the old owner's (retry_ttl_s is 600 s); 0 is the control
SKEWS = [0.0, 700.0]


@pytest.mark.parametrize("skew_s", SKEWS)
def test_push_retried_after_failover_is_not_enqueued_twice(tmp_path: Path, skew_s: float) -> None:
    store = FileStore(tmp_path)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + round(skew_s * 1000))

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store, "http://a", clock_a)
        first = await a.push("q", [NewJob(b'"order-42"')], request="r-1")
        # the HTTP answer of that push was lost; broker a dies
        await crash(a)
        b = await started(store, "http://b", clock_b)
        clock_b.advance(31)  # b watched a's object for one broker lease
        await b.watch()      # and takes the queue over (its first commit)
        # the client retries the push (same request key), well within retry_ttl_s
        again = await b.push("q", [NewJob(b'"order-42"')], request="r-1")
        await b.stop(drain_s=5)
        return list(first), list(again)

    first, again = run(main())
    payloads = [j.payload for j in stored(store).jobs.values()]
    assert again == first, f"retry answered {again}, first answer was {first}"
    assert payloads.count(b'"order-42"') == 1, payloads


@pytest.mark.parametrize("skew_s", SKEWS)
def test_complete_retried_after_failover_is_not_called_stale(tmp_path: Path, skew_s: float) -> None:
    store = FileStore(tmp_path)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + round(skew_s * 1000))

    async def main() -> tuple[bool, str | None]:
        a = await started(store, "http://a", clock_a)
        await a.push("q", [NewJob(b'"x"')])
        [job] = await a.claim("q", "w1", 1, 60.0)
        [done] = await a.complete("q", [CompleteItem(job.token, b"1")])
        assert done.ok
        await crash(a)  # the worker never saw that answer
        b = await started(store, "http://b", clock_b)
        clock_b.advance(31)
        await b.watch()  # takes over; archives the completion, then drops the job
        for _ in range(50):
            clock_b.advance(0.1)
            b._queues["q"].loop.poke()
            await asyncio.sleep(0.02)
            if not stored(store).jobs:
                break
        [again] = await b.complete("q", [CompleteItem(job.token, b"1")])  # worker's retry
        await b.stop(drain_s=5)
        return again.ok, again.reason

    ok, reason = run(main())
    assert [r["id"] for r in archive_lines(store)] == ["j0000000001"]  # it did complete
    assert ok, f"a completion that landed was answered stale: {reason}"



# -- R3 ----------------------------------------------------------------------
# R3: one job whose payload starts with whitespace makes every later decode of
# the queue object re-encode ALL payloads and results through orjson, which turns
# every integer beyond 64 bits (in any other job) into a float: acknowledged
# payloads change on the next restart / takeover / conflict re-read, and the
# successor rewrites an existing archive object (same key) with different bytes.
#
# Path: the staged push path keeps payload bytes verbatim (``api.parse_staged``
# only checks ``orjson.loads``, which accepts leading whitespace; so does
# ``rows.arrow_staged_lines`` for a Spark string payload column). On decode,
# ``state._Spans._span`` cannot find a value at ``"payload":`` + whitespace
# (``raw_decode`` does not skip leading whitespace), raises ``_NotOurLayout``,
# and ``_decode_fields`` falls back to ``orjson.dumps(parsed value)`` for EVERY
# job (``state.jobs.clear(); _add_jobs(state, jobs, None)``).

BIG = b'{"account":123456789012345678901234567890}'
ODD = b' {"n":2}'  # valid JSON with a leading space


def staged(*payloads: bytes) -> list:
    body = b"".join(b"\t" + p + b"\n" for p in payloads)
    return api.parse_staged(body, check=True, max_payload_bytes=1 << 20)


def test_big_integer_payload_survives_a_takeover_when_another_job_is_odd(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> list[bytes]:
        a = await started(store, clock=clock)
        await a.push("q", staged(BIG))
        await a.push("q", staged(ODD))  # another producer, another job
        await crash(a)
        b = await started(store, "http://b", clock)
        clock.advance(31)
        await b.watch()
        got = await b.claim("q", "w", 2, 30.0)
        await b.stop(drain_s=5)
        return [j.payload for j in got]

    got = run(main())
    assert got[0] == BIG, f"acknowledged payload came back as {got[0]!r}"


def test_control_without_the_odd_job(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> list[bytes]:
        a = await started(store, clock=clock)
        await a.push("q", staged(BIG))
        await crash(a)
        b = await started(store, "http://b", clock)
        clock.advance(31)
        await b.watch()
        got = await b.claim("q", "w", 1, 30.0)
        await b.stop(drain_s=5)
        return [j.payload for j in got]

    assert run(main()) == [BIG]


def test_successor_rewrites_an_archive_object_with_other_bytes(tmp_path: Path) -> None:
    """A completes the big-int job and writes its archive object; A dies before the
    drop; B (takeover) writes the 'very same object' again: with a float."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> tuple[bytes, bytes]:
        a = await started(store, clock=clock)
        await a.push("q", staged(BIG, ODD))
        [job] = await a.claim("q", "w", 1, 30.0)
        await a.complete("q", [CompleteItem(job.token, b"1")])
        q = a._queues["q"]
        await q.archiver.wait(5)
        [key] = archive.list_objects(store, "q")
        before = store.get(key)
        await crash(a)  # before the commit that drops the archived job
        b = await started(store, "http://b", clock)
        clock.advance(31)
        await b.watch()
        await b._queues["q"].archiver.wait(5)
        await asyncio.sleep(0.05)
        after = store.get(key)
        await b.stop(drain_s=5)
        return before, after

    before, after = run(main())
    assert b"123456789012345678901234567890" in before
    assert after == before, f"archive object rewritten:\n{before!r}\n{after!r}"



# -- R4 ----------------------------------------------------------------------
# R4: a batch whose first attempt is still in flight (verdict "pending") is
# answered from a re-application that changed nothing, and no write fences the
# first attempt out; when it lands, the callers were told something else.
#
# ``CommitLoop._commit``: after an unknown outcome whose verdict is _PENDING the
# loop re-applies the batch to the re-read state; if that re-application changes
# nothing (``if not changed: ... self._answer(item, result); return``) the
# callers get those results, although ``attempts`` holds an attempt that may
# still land (it is never checked there). Here the broker's wall clock steps back
# a few seconds (NTP) between the two applications: the claim's re-application
# finds the job not yet runnable and answers ``[]``; then the first attempt
# lands: the job is claimed under a token nobody holds (stranded for a lease,
# and with max_attempts=1 it goes dead without ever having run).

def test_claim_answered_empty_while_its_first_attempt_lands(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> list:
        a = await started(store, clock=clock)
        await a.push("q", [NewJob(b'"x"', max_attempts=1)])
        clock.advance(1)
        store.inject("write_if_match", LATE, key_contains="queue.json")
        # the re-read after the timeout: meanwhile NTP stepped the wall clock back 3 s
        store.inject("read", None, key_contains="queue.json",
                     before=lambda _k: setattr(clock, "ms", clock.ms - 3000))
        got = await a.claim("q", "w1", 1, 30.0, request="c-1")
        store.land_late()  # the first attempt lands after all
        await a.stop(drain_s=5)
        return got

    got = run(main())
    job = stored(inner).job("j0000000001")
    assert job is not None
    held = [j.token for j in got]
    # Promise: a caller is never told "not done" for something that landed.
    assert job.status != "claimed" or (job.lease and job.lease.token in held), (
        f"claim answered {held}, but the store has the job claimed under "
        f"{job.lease.token if job.lease else None} (attempts {job.attempts}/{job.max_attempts})")



# -- R5 ----------------------------------------------------------------------
# R5: a stale "archived, drop it" entry makes the commit loop spin without ever
# yielding: the broker's whole event loop (every queue, the HTTP server) freezes
# until the next broker-record renewal falls due (lease_s/3 on the wall clock;
# for ever with a clock that does not move, as here).
#
# Mechanism:
# * ``Archiver._written`` (commit seqs whose archive object landed) is cleaned
#   only in ``Archiver.committed`` (after a landed commit or a conflict re-read).
# * The commit that drops those jobs lands, but its reply is lost and storage
#   stays unreadable for ``commit_timeout_s``: ``_give_up`` sets ``state=None``;
#   ``_written`` keeps the seq.
# * Storage comes back; the fault-retry commit re-reads (``_reload`` at the top
#   of ``_commit``, which does NOT call ``model.committed``), housekeeping's
#   ``DropArchived`` finds nothing to drop, nothing changed: ``return``.
# * ``QueueModel.next_timer_ms`` includes ``now + archiver.drop_in_s()``, which
#   is 0 for ever (``_written`` is never cleaned), so ``_timer_timeout`` is 0,
#   ``_linger`` returns without awaiting (empty buffer, last batch 0) and
#   ``_commit([])`` does no I/O: ``while True`` without a single ``await``.

def test_event_loop_keeps_running_after_a_lost_drop_commit(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro, timeout: float = 20.0):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    def responsive(timeout: float = 3.0) -> bool:
        try:
            call(asyncio.sleep(0), timeout)
            return True
        except TimeoutError:
            return False

    gate = threading.Event()
    store.inject("put", None, key_contains="/archive/", before=lambda _k: gate.wait(10))

    a = call(started(store, clock=clock, commit_timeout_s=0.5))
    call(a.push("q", [NewJob(b'"x"')]))
    [job] = call(a.claim("q", "w1", 1, 300.0))
    call(a.complete("q", [CompleteItem(job.token, b"1")]))  # commit N; archive write held
    qloop = a._queues["q"].loop
    # an idle timer commit (broker record renewal) lands meanwhile: last batch = 0 ops
    clock.advance(21)
    loop.call_soon_threadsafe(qloop.poke)
    for _ in range(100):
        if qloop.stats.commits >= 4:
            break
        time.sleep(0.02)
    assert qloop.stats.last_batch == 0
    # the commit that drops the archived job lands, its reply is lost, and storage
    # cannot be read for commit_timeout_s
    store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
    store.inject("read", NOT_LANDED, key_contains="queue.json", times=None)
    gate.set()  # the archive object lands; the drop commit goes out ~1 s later
    time.sleep(2.0)
    assert store.inner.read("q/queue.json").data.count(b'"status":"completed"') == 0  # dropped
    clock.mono += 2.0  # monotonic time passes (the wall clock too, but less than lease/3)
    store.heal()  # storage is back; the fault retry re-reads within 2 s
    time.sleep(3.0)
    alive = responsive()
    if not alive:
        clock.advance(20)  # only a due renewal ends the spin; let the test clean up
        responsive(10)
    call(a.stop(drain_s=5))
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    assert alive, "the broker's event loop stopped answering (commit loop spinning)"



# -- R6 ----------------------------------------------------------------------
# R6: stop() during an in-flight commit answers its callers BrokerUnavailable
# ("broker is shutting down"), and the write lands afterwards.
#
# ``CommitLoop.close`` cancels the loop task after ``timeout_s``; the CAS write
# runs on in an executor thread (``run_in_executor`` cannot be cancelled) and
# lands; ``_run``'s ``except asyncio.CancelledError`` and ``close`` answer
# ``_fail_all(BrokerUnavailable(...))``. The contract: "when the broker cannot
# know, it answers OutcomeUnknown" (BrokerUnavailable is the answer for calls
# that were never applied). A caller without a request key (the broker's own
# Python API, ``Broker.push(queue, jobs)``) that retries elsewhere enqueues twice.

def test_stop_with_a_write_in_flight(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate = threading.Event()
    entered = threading.Event()

    def slow(_key: str) -> None:
        entered.set()
        gate.wait(10)  # a slow PUT: it lands, later

    async def main() -> OsqueueError:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", None, key_contains="queue.json", before=slow)
        push = asyncio.create_task(a.push("q", [NewJob(b'"second"')]))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        await a.stop(drain_s=0.5)
        with pytest.raises(OsqueueError) as info:
            await push
        gate.set()
        return info.value

    error = run(main())
    time.sleep(0.5)  # the executor thread finishes its write
    landed = any(j.payload == b'"second"' for j in stored(inner).jobs.values())
    assert landed  # the write did land after the broker answered
    assert isinstance(error, OutcomeUnknown), (
        f"a write that landed was answered {type(error).__name__}: {error}")



# -- R7 ----------------------------------------------------------------------
# R7: a failover race makes one broker run TWO commit loops for one queue; the
# first is orphaned (not in ``Broker._queues``) and survives ``stop()``.
#
# ``Broker._serving`` reads ``q = self._queues.get(name)`` under the queue's lock,
# then awaits ``_read_object``; ``Broker.watch`` does not take that lock and, for a
# queue whose owner died, runs ``_take_over(q or self._make_queue(name))``. If
# the watch round runs while ``_serving`` awaits its read (a client redirected to
# this standby during the failover, the usual moment), watch registers loop L1
# and takes the queue over; ``_serving`` then resumes with its stale ``q=None``,
# ``_make_queue`` registers loop L2 over it, and both loops write the object as
# its owner. ``stop()`` only retires ``_queues`` (L2): L1 is never closed, is
# never told it is retiring (it may write the broker record back after
# ClearBroker), and after the executor shuts down it faults every 2 s for ever.

def test_one_loop_per_queue_and_stop_ends_it(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate, entered = threading.Event(), threading.Event()

    def slow_first_read(_key: str) -> None:
        entered.set()
        gate.wait(10)

    async def main() -> tuple[bool, bool]:
        a = await started(inner, "http://a", clock)
        await a.push("q", [NewJob(b"1")])
        await crash(a)
        b = await started(store, "http://b", clock)
        clock.advance(31)  # a's lease has run out as b sees it
        store.inject("read", None, key_contains="q/queue.json", before=slow_first_read)
        push = asyncio.create_task(b.push("q", [NewJob(b"2")]))  # a redirected client
        while not entered.is_set():
            await asyncio.sleep(0.01)
        await b.watch()  # the periodic watch round, meanwhile
        first = b._queues["q"]
        gate.set()
        await push
        second = b._queues["q"]
        same = first is second
        await b.stop(drain_s=2)
        orphan_running = first.loop._task is not None and not first.loop._task.done()
        if orphan_running:
            first.loop._task.cancel()
        return same, orphan_running

    same, orphan_running = run(main())
    assert same, "two commit loops own queue q inside one broker"
    assert not orphan_running, "a commit loop of queue q still runs after stop()"



# -- R8 ----------------------------------------------------------------------
# R8: a retried push makes a second copy once unrelated completions have pushed
# its receipt out of the window: SPEC section 3 says "The client gives every push
# an idempotency key when the caller gave none, so a retried push never makes a
# second job", but QueueClient only sends a request key (receipts), and receipts
# share one count bound (``retry_keys``, default 100,000 items) with every
# settled token of the queue. On a queue completing 5,000 jobs/s, a push's
# receipt is gone ~20 s later, well inside the client's 60 s retry budget
# (``QueueClient.retry_s``) and ``retry_ttl_s`` (600 s).
#
# Here ``retry_keys`` is set to its minimum (1000) to keep the test small.

def test_retried_push_after_busy_seconds_is_not_a_second_job(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store)
        await a.create_queue("q", {"retry_keys": 1000})
        first = list(await a.push("q", [NewJob(b'"invoice-7"')], request="r-push"))
        # (the HTTP answer of that push was lost; the client backs off and retries)
        # meanwhile other workers complete 1100 jobs of the same queue
        await a.push("q", [b"0"] * 1100)
        claimed = await a.claim("q", "w", 1101, 60.0)
        await a.complete("q", [CompleteItem(j.token) for j in claimed
                               if j.payload != b'"invoice-7"'])
        again = list(await a.push("q", [NewJob(b'"invoice-7"')], request="r-push"))
        await a.stop(drain_s=5)
        return first, again

    first, again = run(main())
    copies = [j.id for j in stored(store).jobs.values() if j.payload == b'"invoice-7"']
    assert again == first and len(copies) == 1, (first, again, copies)



# -- R9 ----------------------------------------------------------------------
# R9: a completed job whose payload holds a carriage return (legal JSON
# whitespace, kept verbatim by the staged push path and Spark writes) makes its
# archive object unreadable: ``archive.decode_records`` splits with
# ``bytes.splitlines()``, which also breaks at ``\\r``; the halves are not JSON.
# ``archive.read_all`` and the Spark archive table (``datasource.py``
# ``ArchiveReader`` -> ``archive.decode_records``) then fail as a whole: every
# completed job of that commit, and every read of the archive, is gone from view.

def test_archive_of_a_payload_with_a_carriage_return_reads_back(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    payload = b'{"rows":[1,\r2]}'  # valid JSON: \r is whitespace

    async def main() -> None:
        a = await started(store)
        jobs = api.parse_staged(b"\t" + payload + b"\n\t\"other\"\n", check=True,
                                max_payload_bytes=1 << 20)
        await a.push("q", jobs)
        claimed = await a.claim("q", "w", 2, 30.0)
        await a.complete("q", [CompleteItem(j.token, b"1") for j in claimed])
        await a._queues["q"].archiver.wait(5)
        await a.stop(drain_s=5)

    run(main())
    assert len(archive.list_objects(store, "q")) == 1
    records = list(archive.read_all(store, "q"))  # raises JSONDecodeError today
    assert sorted(r["id"] for r in records) == ["j0000000001", "j0000000002"]



# -- R10 ----------------------------------------------------------------------
# R10: "staging the same write id again replaces it" is decided by comparing
# wall clocks of different brokers (or of one broker before and after a clock
# step): the older staging wins and its jobs are published.
#
# ``Broker.stage`` names a staging object ``{write_id}~{clock_ms}{counter}``
# (``keys.staging_key``) and ``_staged_objects`` keeps, per write id, the object
# with the highest (ms, counter). Any broker accepts a stage (no ownership
# needed), and QueueClient moves to another broker after a timeout. If the
# broker that takes the second staging has a clock behind the first one's, the
# first (replaced) staging is the one ``publish`` pushes.

def test_second_staging_of_a_write_id_is_the_one_published(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms - 5_000)  # broker b's clock is 5 s behind a's

    async def main() -> dict:
        a = await started(store, "http://a", clock_a)
        b = await started(store, "http://b", clock_b)
        await a.stage("q", "w-1/p0-t7-c0", b'\t"old"\n')
        clock_a.advance(1)
        clock_b.advance(1)
        await b.stage("q", "w-1/p0-t7-c0", b'\t"new-1"\n\t"new-2"\n')  # replaces it
        out = await a.publish("q", "w-1/", ["w-1/p0-t7-c0"], once="write:w-1/")
        await b.stop(drain_s=5)
        await a.stop(drain_s=5)
        return out

    out = run(main())
    payloads = sorted(j.payload for j in stored(store).jobs.values())
    assert payloads == [b'"new-1"', b'"new-2"'], (out, payloads)



# -- R13 ----------------------------------------------------------------------
# R13 (working tree only, uncommitted broker/commit.py): the new idle-timer
# back-off ``floor = min(1.0, 0.01 * 2 ** self._idle_commits)`` in
# ``CommitLoop._timer_timeout`` raises OverflowError once ``_idle_commits``
# reaches 1024 (``int * float`` converts 2**1024 to float). ``_timer_timeout`` is
# called in ``_run`` outside its try block, so the exception ends the loop task:
# every later ``submit`` waits for ever (no answer, no error): the queue is wedged.
#
# ``_idle_commits`` counts timer commits that wrote nothing and is reset only by a
# landed commit. With ``--lease-s 3600`` (allowed by the CLI) the owner writes a
# renewal only every 20 minutes; a queue with no traffic but >=1024 delayed jobs
# (or stale lease-heap entries) falling due at distinct times within those
# 20 minutes makes >=1024 such commits (each at least 1 s apart once the floor is
# 1 s). The counter is set by hand here (the natural path takes 20 real minutes).

def test_long_idle_streak_does_not_kill_the_commit_loop(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, lease_s=3600.0)
        await a.push("q", [NewJob(b"1")])
        loop = a._queues["q"].loop
        loop._idle_commits = 1024  # 1024 idle timer commits in a row
        loop.poke()
        await asyncio.sleep(0.1)
        assert loop._task is not None and not loop._task.done(), (
            f"commit loop task ended: {loop._task.exception()!r}")
        await asyncio.wait_for(a.push("q", [NewJob(b"2")]), 5)
        await a.stop(drain_s=2)

    run(main())


# -- N1 ----------------------------------------------------------------------
# N1: a queue object written by the previous release (commit 5932e4f, the same
# format VERSION 2) is refused as corrupt by the current code: the broker will not
# start, the queue is wedged, and a client's retry of a push whose answer was lost
# across the upgrade cannot be answered at all.
#
# The fixture ``fixtures/old_5932e4f_queue.json`` was written by the broker of
# commit 5932e4f itself (``make_old_object.py``, run with that tree on PYTHONPATH):
# two jobs pushed with request key r-0123456789ab-0, one claimed and completed.
# Its ``receipts`` is a list of per-commit receipt objects, the layout that
# release wrote; ``broker.receipts.Receipts.decode`` now requires a dict
# ``{"requests": ..., "settled": ...}`` and raises ValueError -> CorruptState.
# VERSION was not bumped, so the object is not even reported as "older/newer",
# and the failure-model rule "a corrupt object is never overwritten" makes it
# permanent. (An old broker reading a new object fails the same way, so a rolling
# upgrade with brokers of both versions on one store wedges every queue either
# way.)

FIXTURE = Path(__file__).parent / "fixtures" / "old_5932e4f_queue.json"


def test_current_broker_serves_a_queue_written_by_the_previous_release(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create_if_absent(keys.state_key("q"), FIXTURE.read_bytes())

    async def main() -> list[str]:
        b = await started(store, "http://new")  # raises CorruptState today
        # the producer's push (request key r-0123456789ab-0) had its answer lost
        # during the upgrade; its retry must answer the same ids
        again = await b.push("q", [NewJob(b'"a"'), NewJob(b'"b"')],
                             request="r-0123456789ab-0", floor=0)
        await b.stop(drain_s=5)
        return list(again)

    again = run(main())
    assert again == ["j0000000001", "j0000000002"]
    assert len(stored(store).jobs) <= 2



# -- N2 ----------------------------------------------------------------------
# N2: the client floor makes the broker forget a call's receipt while an earlier
# attempt of that very call is still on its way; when that attempt is served, it
# is applied as a new call: a push is enqueued twice, a claim strands a job.
#
# ``QueueClient.request`` ends call n (``_Requests.end``) as soon as ONE attempt
# is answered; the next keyed call carries floor n+1 and
# ``Receipts.answered_below`` (called from ``transitions._push`` / ``_claim``)
# drops the receipt of n at once. But an attempt the client gave up on (read
# timeout -> BrokerUnavailable -> ``_discover`` -> retry elsewhere) may still be
# held somewhere: here in a standby broker's ``Broker._serving`` (slow read of
# the queue object under the queue lock). When the owner then stops cleanly (a
# rolling restart) the standby takes the queue over and applies the held attempt;
# no receipt remains, so it is a new call. Before the floor, the receipt lived
# ``retry_ttl_s`` (600 s) and covered such late attempts.
#
# Responsible: broker/receipts.py ``Receipts.answered_below``; broker/transitions.py
# ``_push``/``_claim`` (floor applied, then the lookup); osqueue_spark/client.py
# ``_Requests.floor``/``end``.

CLIENT = "r-0123456789ab"


def _hold_first_read(store: FaultyStore) -> tuple[threading.Event, threading.Event]:
    gate, entered = threading.Event(), threading.Event()

    def hold(_key: str) -> None:
        entered.set()
        gate.wait(20)

    store.inject("read", None, key_contains="q/queue.json", before=hold)
    return gate, entered


@pytest.mark.parametrize("next_floor", [None, 1])  # None: the control, without a floor
def test_late_attempt_of_an_answered_push_is_not_a_second_job(tmp_path: Path,
                                                              next_floor: int | None) -> None:
    inner = FileStore(tmp_path)
    store_a = FaultyStore(inner)

    async def main() -> tuple[list[str], list[str]]:
        b = await started(inner, "http://b")  # the owner
        await b.push("q", [NewJob(b'"other"')])
        a = await started(store_a, "http://a")  # a standby on the same store
        gate, entered = _hold_first_read(store_a)
        # attempt 1 of call 0 reaches standby a, which is slow to read the object
        late = asyncio.create_task(a.push("q", [NewJob(b'"order-42"')],
                                          request=f"{CLIENT}-0", floor=0))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        # the client times out, is redirected to b, attempt 2 is answered
        first = list(await b.push("q", [NewJob(b'"order-42"')], request=f"{CLIENT}-0",
                                  floor=0))
        # the client's next call carries floor 1: receipt of call 0 is dropped
        await b.push("q", [NewJob(b'"next"')], request=f"{CLIENT}-1", floor=next_floor)
        await b.stop(drain_s=5)  # rolling restart of the owner
        gate.set()
        if next_floor is None:  # its receipt is still there: the late copy replays it
            second = list(await late)
        else:  # the client had its answer: a late copy is refused, not applied
            with pytest.raises(InvalidRequest, match="answered before"):
                await late
            second = []
        await a.stop(drain_s=5)
        return first, second

    first, second = run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == b'"order-42"']
    assert copies == first, f"one push, answered {first}, made jobs {copies} (late: {second})"


def test_late_attempt_of_an_answered_claim_does_not_strand_a_job(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store_a = FaultyStore(inner)

    async def main() -> list:
        b = await started(inner, "http://b")
        await b.push("q", [NewJob(b'"j1"', max_attempts=1), NewJob(b'"j2"', max_attempts=1)])
        a = await started(store_a, "http://a")
        gate, entered = _hold_first_read(store_a)
        late = asyncio.create_task(a.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        [got] = await b.claim("q", "w1", 1, 30.0, request=f"{CLIENT}-0", floor=0)
        [done] = await b.complete("q", [CompleteItem(got.token, b"1")])
        assert done.ok
        await b.push("q", [NewJob(b'"x"')], request=f"{CLIENT}-1", floor=1)
        await b.stop(drain_s=5)
        gate.set()
        with pytest.raises(InvalidRequest, match="answered before"):
            await late  # a late copy of an answered claim: refused, claims nothing
        await a.stop(drain_s=5)
        return []

    stray = run(main())
    j2 = stored(inner).job("j0000000002")
    assert j2 is not None
    assert j2.status == "pending", (
        f"j2 is {j2.status} (attempts {j2.attempts}/{j2.max_attempts}) under a lease nobody "
        f"holds ({[s.token for s in stray]}): with max_attempts=1 it dies without running")



# -- N3 ----------------------------------------------------------------------
# N3: QueueClient repeats a purge whose answer it did not get, and the repeat
# purges jobs that were pushed (and acknowledged) after the first purge landed.
#
# Promise 4 of docs/failure-model.md: "Every call is safe to repeat, so a client
# retries every retryable error". ``QueueClient.purge`` goes through
# ``QueueClient.request`` (retries BrokerUnavailable / OutcomeUnknown /
# timeouts), but ``transitions.Purge`` carries no request key and has no
# receipt: a second execution removes whatever is pending by then. Here the
# purge's write is slow (1.5 s, longer than the client's 0.5 s timeout); a
# producer's push is acknowledged meanwhile; the client's repeat of the purge
# then removes that acknowledged job. (``redrive`` has the same shape: a
# repeat resets the attempts of jobs that died after the first one.)
#
# Responsible: osqueue_spark/client.py ``purge``/``redrive`` (retried, unkeyed);
# broker/transitions.py ``Purge``/``_purge`` (no receipt).

def test_a_repeated_purge_does_not_remove_a_later_acknowledged_push(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    server = start_broker(store)
    try:
        producer = QueueClient(server.url, "q")
        admin = QueueClient(server.url, "q", timeout_s=0.5, retry_s=20)
        producer.push("old")
        slow_once = threading.Event()

        def slow(_key: str) -> None:
            slow_once.set()
            time.sleep(1.5)  # a slow PUT: it lands, after the client's timeout

        store.inject("write_if_match", None, key_contains="q/queue.json", before=slow)
        purged: list[int] = []
        t = threading.Thread(target=lambda: purged.append(admin.purge()))
        t.start()
        slow_once.wait(5)
        time.sleep(0.1)
        new_id = producer.push("new")  # acknowledged after the purge
        t.join(30)
        assert purged, "purge did not return"
    finally:
        server.stop()
    jobs = {j.id: j.payload for j in stored(inner).jobs.values()}
    assert new_id in jobs, (
        f"push of 'new' was acknowledged as {new_id} after the purge, but the purge's "
        f"retry removed it (purge answered {purged}); queue now {jobs}")



# -- N4 ----------------------------------------------------------------------
# N4: the count bound on settled tokens drops whole time buckets, and when the
# newest bucket alone holds more than ``retry_keys`` runs it drops that one too:
# every settlement of the last ``retry_ttl_s / 20`` seconds (30 s by default),
# including the one that landed in the previous commit, is forgotten, and a
# repeated fail/complete is answered "stale" for a settlement that landed.
#
# ``Receipts.trim``: ``while buckets and (... or self.settled_runs > max_items):
# self.settled_runs -= buckets.pop(0).count()`` - with one bucket left, pop(0)
# is the newest. The failure model promises "oldest dropped first" and that a
# repeat within the window answers as the first call did. Runs fragment when
# outcomes interleave (completed and failed fences alternate, or leases expire
# between them): 1,000 claims half failed, half completed make ~1,000 runs.
# With the default retry_keys=100,000 this happens at ~3,500 settlements/s
# with a 50 % failure rate; the test uses the minimum setting (1,000).
#
# Responsible: broker/receipts.py ``Receipts.trim`` (and ``record_settled``: one
# bucket spans ttl/20 and cannot be trimmed partially).

N = 1100


def test_repeated_fail_right_after_it_landed_is_not_stale(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> tuple:
        a = await started(store)
        await a.create_queue("q", {"retry_keys": 1000})
        await a.push("q", [b"0"] * N)
        claimed = await a.claim("q", "w", N, 60.0)
        assert len(claimed) == N
        odd, even = claimed[0::2], claimed[1::2]
        await a.complete("q", [CompleteItem(j.token) for j in odd])
        answers = await a.fail("q", [FailItem(j.token, "boom", 60_000) for j in even])
        assert all(r.ok for r in answers)
        # the worker did not get that answer; it repeats the fail of its last job
        [again] = await a.fail("q", [FailItem(even[-1].token, "boom", 60_000)])
        stats = await a.stats("q")
        await a.stop(drain_s=5)
        return again, stats["settled_runs"]

    again, runs = run(main())
    assert again.ok, f"a fail that landed one commit ago was answered stale: {again.reason} " \
                     f"(settled runs kept: {runs})"



# -- N5 ----------------------------------------------------------------------
# N5: GET /jobs and /stats on the owner answer from the commit loop's working
# state, which holds the batch being written: a reader is shown jobs (with ids)
# that are never committed.
#
# ``Broker._view`` returns ``q.loop.state`` whenever the loop is active, but
# ``CommitLoop._commit`` applies the batch to ``self.state`` in place before the
# write lands (and sets it to None only after a failure). Between the two, a
# reader sees the uncommitted push; when the write is refused (or times out and
# is given up), the job it was shown never existed. The failure model's promise 3
# ("no caller is told a wrong answer"; acknowledged = durable) is broken for
# readers: e.g. a producer that checks GET /jobs after an error to decide whether
# to push again is told "it is there" and does not.
#
# Responsible: broker/service.py ``Broker._view``; broker/commit.py ``_commit``
# (in-place apply on ``self.state``).

def test_reads_do_not_show_a_push_that_never_committed(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    gate, entered = threading.Event(), threading.Event()

    def slow(_key: str) -> None:
        entered.set()
        gate.wait(10)

    async def main() -> list[str]:
        a = await started(store)
        await a.push("q", [NewJob(b'"a"')])
        store.inject("write_if_match", REFUSED, key_contains="q/queue.json", before=slow)
        push = asyncio.create_task(a.push("q", [NewJob(b'"phantom"')]))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        seen = [j["id"] for j in await a.jobs("q")]  # a reader, meanwhile
        gate.set()
        with pytest.raises(StorageRefused):
            await push
        await a.stop(drain_s=5)
        return seen

    seen = run(main())
    committed = [j.id for j in stored(inner).jobs.values()]
    assert seen == committed, f"GET /jobs showed {seen}; only {committed} were ever committed"



# -- N6 ----------------------------------------------------------------------
# N6: a QueueClient inherited across fork() keeps its client id and call counter,
# so parent and child send the same request keys; the broker answers the second
# push with the first one's ids and creates nothing: an acknowledged push is lost.
#
# ``_Requests`` (osqueue_spark/client.py) draws the client id once
# (``uuid.uuid4().hex[:12]``) and counts calls in the object; pickling makes a
# new one (``__setstate__``) but fork() copies it. A module-level client created
# before a pre-fork server (gunicorn --preload, Celery prefork, multiprocessing
# with the fork start method, a PySpark worker forked from its daemon after an
# import-time client) then has N processes numbering ``r-{same id}-{n}`` from the
# same n. The broker replays the receipt of key r-X-n (``transitions._push``:
# ``earlier = state.receipts.push_ids(op.request)``), so the child's push is
# answered with the parent's job id and its job is never enqueued. (The file
# store already re-arms its locks at fork: ``os.register_at_fork``.)

def test_push_from_a_forked_copy_of_a_client_is_enqueued(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q")  # e.g. created at import time
        client.push("before-fork")
        go_r, go_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: push once told to, report the id, leave
            try:
                os.read(go_r, 1)
                job_id = client.push("child")
                os.write(out_w, job_id.encode())
            finally:
                os._exit(0)
        parent_id = client.push("parent")
        os.write(go_w, b"x")
        child_id = os.read(out_r, 100).decode()
        os.waitpid(pid, 0)
    finally:
        server.stop()
    payloads = {j.id: j.payload for j in stored(store).jobs.values()}
    assert child_id != parent_id and payloads.get(child_id) == b'"child"', (
        f"child's push was answered {child_id!r} (parent's: {parent_id!r}); queue holds "
        f"{payloads}")


# -- F1 ----------------------------------------------------------------------
# F1: one bad GET /jobs makes every other caller's op in the same group commit fail.
#
# Since da952a3 the owner answers reads *in the commit loop* (``Broker._read`` ->
# ``CommitLoop.submit(ReadJobs(...))``). ``transitions._read_jobs`` ->
# ``list_jobs`` parses ``after`` with ``int(after[1:])`` after checking only
# ``after[1:].isdecimal()``. A job id of more than 4300 digits makes ``int()``
# raise ``ValueError`` (CPython's int-string conversion limit), which is not an
# ``OsqueueError``: ``CommitLoop._commit`` catches only ``OsqueueError`` per op, so
# the ValueError escapes the batch, ``_faulted`` answers EVERY op of the batch with
# a non-retryable 500 "internal error" (pushes, claims, completes of other clients)
# and marks the queue faulted. The push below is from an unrelated producer; it is
# refused although nothing is wrong with it (QueueClient does not retry a 500, so
# the producer is told its push failed). A reader polling that URL keeps every
# write of the queue failing. Before the change the read ran outside the loop and
# only the reader got the 500.
#
# Same root cause, older path (variant ``redrive_ids``): ``POST /redrive`` accepts
# any string ids; ``_redrive`` -> ``state.seq_of`` does ``int(digits)`` on an id of
# 5001 digits. (Tokens are capped at 300 characters by ``api._tokens``; ids and
# ``after`` are not capped.)

BAD_AFTER = "j" + "1" * 5000  # isdecimal() is True; int() refuses > 4300 digits


@pytest.mark.parametrize("bad", ["jobs_read", "redrive_ids"])
def test_a_bad_call_does_not_fail_other_callers_ops(tmp_path: Path, bad: str) -> None:
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
        while not entered.is_set():
            await asyncio.sleep(0.01)
        producer = asyncio.create_task(a.push("q", [NewJob(b'"order-42"')], request="r-p-0",
                                              floor=0))
        if bad == "jobs_read":  # GET /v1/queues/q/jobs?after=j111...1
            reader = asyncio.create_task(a.jobs("q", after=BAD_AFTER))
        else:  # POST /v1/queues/q/redrive {"ids": ["j1000...0"]} (same int() limit, in seq_of)
            reader = asyncio.create_task(a.redrive("q", ids=["j1" + "0" * 5000]))
        await asyncio.sleep(0.05)
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



# -- F2 ----------------------------------------------------------------------
# F2: a client's floor raised by a claim that found nothing is never written, so
# after a crash or a re-read the late copy of an answered call is applied as new.
#
# The second review's N2 fix promises: "each client's floor is kept and a late copy
# of a call below it is refused, not applied". ``transitions._earlier`` raises the
# floor in the in-memory receipts (``Receipts.answered_below``) but ``_claim``
# reports ``changed=False`` when it claims nothing, so the commit loop writes
# nothing (``CommitLoop._commit``: ``if not changed and not attempts: answer;
# return``). The floor lives only in the owner's memory until some other write
# happens to carry it. A claim answered ``[]`` also leaves no receipt; so for a
# worker polling a queue whose next job is delayed (a retry backoff, a delayed
# push) the floor is the only thing that refuses a late copy of its earlier
# claim, and it is lost by:
#
# * a crash of the owner (kill -9) and a takeover by another broker, or
# * any failed batch on the owner itself (``_faulted``/``_give_up``/StorageRefused
#   set ``state=None``; the re-read object has no floor).
#
# Then the late copy of the client's claim 0 (answered ``[]`` to the client long
# ago) claims the job once it is due: the job is leased to a token nobody holds,
# so it does not run until the lease expires, its attempt is used up, and with
# max_attempts=1 it goes dead without ever having run.
#
# Responsible: broker/transitions.py ``_earlier`` (floor applied in memory) and
# ``_claim`` (``result.changed = bool(out)``; no receipt for an empty answer);
# broker/commit.py ``_commit`` (an unchanged batch is not written).

CLIENT_F2 = "r-0123456789ab"


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (on the event loop) until ``check()`` holds: the broker writes in the
    background; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("persisted", [True, False])  # False: written by the idle timer
@pytest.mark.parametrize("how", ["crash", "refused_write"])
def test_late_copy_of_an_empty_claim_is_refused(tmp_path: Path, how: str,
                                                persisted: bool) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> object:
        a = await started(store, "http://a", clock)
        # a job that becomes due in 5 s (a delayed push, or a failed job's backoff)
        await a.push("q", [NewJob(b'"x"', delay_ms=5_000, max_attempts=1)])
        # the worker's claim 0: attempt 1 is held somewhere (a proxy, a standby);
        # attempt 2 reaches the owner and is answered: nothing to do yet
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT_F2}-0", floor=0) == []
        # the worker's next poll: claim 1, floor 1 (claim 0 has its answer)
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT_F2}-1", floor=1) == []
        if persisted:  # any other write carries the floor along ...
            await a.push("q", [NewJob(b'"y"', delay_ms=60_000)])
        else:  # ... and on an idle queue a timer writes it within LAZY_WRITE_MS
            clock.advance(receipts.LAZY_WRITE_MS / 1000)
            a._queues["q"].loop.poke()
            await until(lambda: stored(inner).receipts.floors.get(CLIENT_F2, (0, 0))[0] >= 1)
        floors = stored(inner).receipts.floors
        if how == "crash":
            await crash(a)
            owner = await successor(inner, clock)  # 31 s later: x is due
        else:
            store.inject("write_if_match", REFUSED, key_contains="q/queue.json")
            with pytest.raises(StorageRefused):  # e.g. a transient 403 on one PUT
                await a.push("q", [NewJob(b'"z"')])
            clock.advance(6)  # x is due
            owner = a
        # now the held attempt 1 of claim 0 arrives
        try:
            late = await owner.claim("q", "w1", 1, 30.0, request=f"{CLIENT_F2}-0", floor=0)
        except InvalidRequest:
            late = "refused"
        await owner.stop(drain_s=5)
        return late, floors

    late, floors = run(main())
    x = stored(inner).job("j0000000001")
    assert x is not None
    assert late == "refused" and x.status == "pending", (
        f"the late copy of claim 0 (answered [] to the worker) was answered {late!r}; job x "
        f"is now {x.status} under {x.lease.token if x.lease else None}, a lease nobody holds "
        f"(attempts {x.attempts}/{x.max_attempts}); floors in the stored object before: "
        f"{floors}")



# -- F3 ----------------------------------------------------------------------
# F3: a QueueClient inherited across fork() still shares its kept-alive HTTP
# connections with the parent, so parent and child read each other's answers.
#
# da952a3 made a forked client draw a new client id (``_Requests.begin`` checks
# ``os.getpid()``), but the urllib3 ``PoolManager`` (``QueueClient._http``) is not
# renewed: the child inherits the parent's idle keep-alive socket, and both pool
# copies hand the *same* TCP connection out. When the parent's call is still
# being served on it and the child sends its own call on it, the broker answers
# them in order on that one connection: the child reads the parent's answer and
# the parent reads the child's. Here both push: each is told the id of the
# other's job (a producer that records the id, e.g. to track or cancel the job,
# records the wrong one; with a claim on one side and a push on the other, the
# pusher gets a claim answer and the claimer a push answer).
#
# The only scheduling imposed: the parent reads its answer after the child has
# read one (a process switch at that point; nothing is faked in the broker, whose
# store is merely slow to write the parent's push, as a loaded S3 is).
#
# Responsible: osqueue_spark/client.py ``_Requests.begin`` renews the id on fork
# but ``QueueClient`` keeps ``self._http`` (and ``self._lock``) from before it.

def test_forked_client_reads_its_own_answers(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q", timeout_s=20)
        client.push("before-fork")  # leaves one kept-alive connection in the pool
        go_r, go_w = os.pipe()
        done_r, done_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: push once the parent's push is on the wire
            try:
                os.read(go_r, 1)
                job_id = client.push("child")
                os.write(out_w, job_id.encode())
            finally:
                os.write(done_w, b"x")
                os._exit(0)
        # the parent: its push's write is slow on the store (1 s)
        store.inject("write_if_match", None, key_contains="q/queue.json",
                     before=lambda _k: time.sleep(1.0))
        original = urllib3.connection.HTTPConnection.getresponse
        once = threading.Event()

        def getresponse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if not once.is_set():
                once.set()
                os.write(go_w, b"x")  # request sent; the child pushes now
                os.read(done_r, 1)    # and reads an answer before we do
            return original(self, *args, **kwargs)

        urllib3.connection.HTTPConnection.getresponse = getresponse
        try:
            parent_id = client.push("parent")
        finally:
            urllib3.connection.HTTPConnection.getresponse = original
        child_id = os.read(out_r, 100).decode()
        os.waitpid(pid, 0)
    finally:
        server.stop()
    payloads = {j.id: j.payload for j in stored(inner).jobs.values()}
    assert payloads.get(parent_id) == b'"parent"' and payloads.get(child_id) == b'"child"', (
        f"parent was told its job is {parent_id} ({payloads.get(parent_id)!r}), the child "
        f"{child_id} ({payloads.get(child_id)!r}); the queue holds {payloads}")



# -- F4 ----------------------------------------------------------------------
# F4 (minor): a keyed purge (what QueueClient.purge sends since da952a3) of a queue
# that does not exist creates its object.
#
# ``transitions._purge`` (and ``_redrive``) now answer ``changed=True`` whenever the
# call carries a request key, even when nothing was purged: the receipt must be
# written. ``Broker.purge`` goes through ``_submit(create=False)``, which refuses an
# unknown queue only when this broker has no active loop for it. A first push that
# was refused (here: a payload over the queue's max_payload_bytes, which only the
# transition checks) leaves the loop active over an object that does not exist
# (``Broker._read`` still answers 404 for it). The keyed purge then writes the
# object with ``create_if_absent``: the queue now exists (stats 200, listed, owned
# by this broker) although nothing was ever pushed to it. An unkeyed purge (the
# control) answers 0 and creates nothing, as the service docstring promises for
# operations on a queue that does not exist.

@pytest.mark.parametrize("request_key", [None, "r-0123456789ab-0"])  # None: the control
def test_purge_of_a_queue_that_does_not_exist_creates_nothing(tmp_path: Path,
                                                              request_key: str | None) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, default_settings={"max_payload_bytes": 1024})
        with pytest.raises(PayloadTooLarge):  # the first push of q2 is refused
            await a.push("q2", [b'"' + b"x" * 2000 + b'"'])
        with pytest.raises(UnknownQueue):  # q2 does not exist
            await a.stats("q2")
        with pytest.raises(UnknownQueue):  # and purging it does not make it exist
            await a.purge("q2", None, request=request_key, floor=0)
        await a.stop(drain_s=5)

    run(main())
    with pytest.raises(NotFound):
        store.read(keys.state_key("q2"))  # a purge never brings a queue into being



# -- F5 ----------------------------------------------------------------------
# F5: the publish-key window is a hard-coded 20,000 keys, whatever ``dedup_keys``
# says; a Spark batch replayed after 20,000 other publishes is published twice.
#
# da952a3 moved publish keys (``df.write`` commits ``write:{prefix}`` and stream
# batches ``stream:{stream}:q-{query}:{batch}``) out of the idempotency-key window
# into ``state.once``, trimmed in ``transitions._trim_windows`` by
# ``len(once) > ONCE_KEYS`` (``ONCE_KEYS = 20_000``, a module constant, not a
# setting). Before, they shared the ``dedup_keys`` window (default 200,000,
# settable to 10,000,000), and the documentation still promises that bound:
# ``Settings`` ("``dedup_*`` bound the window of idempotency keys (and of Spark's
# publish keys)"), ``QueueStreamWriter`` ("replays are recognised only within the
# queue's idempotency window (``dedup_ttl_s``, default 24 h, and the last
# ``dedup_keys`` keys)").
#
# A queue fed by several streaming queries (say 20 queries, one micro-batch a
# second each) goes through 20,000 publish keys in 17 minutes; a query whose driver
# restarts after that (a cluster restart, a rescheduled job) replays its last
# batch, whose key has already been evicted: its jobs are enqueued a second time,
# although the operator set ``dedup_keys`` to 1,000,000 and the batch is well
# inside ``dedup_ttl_s``. (The other streams' publishes carry no jobs here only to
# keep the test fast; the window logic does not look at the jobs.)

def test_a_replayed_stream_batch_inside_the_documented_window_adds_nothing() -> None:
    now = 1_800_000_000_000
    st = T.new_state(now, S.Settings(dedup_keys=1_000_000))  # 24 h TTL, 1M keys
    mine = "stream:0123456789abcdef:q-3f1c:41"
    first = T.apply(st, T.push_of([b'{"order": 1}', b'{"order": 2}'], once=mine), now)
    assert len(first.ids) == 2
    for i in range(20_000):  # other queries' batches over the next ~17 minutes
        T.apply(st, T.push_of([], once=f"stream:other{i % 20:02d}:q-x:{i}"), now + 50 * i)
    # the query restarts and Spark replays batch 41 (same key, same jobs), 17 min later
    again = T.apply(st, T.push_of([b'{"order": 1}', b'{"order": 2}'], once=mine),
                    now + 50 * 20_000)
    orders = [j.payload for j in st.jobs.values()]
    assert again.duplicate and len(orders) == 2, (
        f"replay of {mine!r} inside dedup_ttl_s and far inside dedup_keys=1,000,000 was "
        f"published again (duplicate={again.duplicate}): the queue holds {orders}")



# -- F6 ----------------------------------------------------------------------
# F6: a keyed push answered with a final refusal (QueueFull: "nothing from this
# push was written") leaves no receipt, so a late copy of that same call is applied
# afterwards: the producer was told "not written", the job is enqueued, and the
# producer's own re-push after the refusal makes it two.
#
# QueueClient ends a call at its first final answer; its floor moves past it only
# with the client's *next* keyed call. The floor (da952a3) refuses late copies of
# answered calls only once it has reached the broker; a receipt (which would make
# a late copy replay the first answer) is recorded only for a push that was
# applied (``transitions._push``: QueueFull raises from ``_check_room`` before
# ``receipts.record``). Here attempt 1 of the push is held by a standby (slow read
# of the object in ``Broker._serving``, as in N2); attempt 2 reaches the owner while
# the queue is full and is refused; the queue drains; the owner restarts (rolling
# restart: clean stop), the standby takes the queue over and applies attempt 1.
# The producer, having been told QueueFull, pushes again (a new call) once there is
# room: two copies of one order. (The same holds for any refusal that depends on
# the state; a claim answered ``[]`` is F2's shape.)
#
# Responsible: broker/transitions.py ``_push`` (no receipt for a refused keyed call);
# osqueue_spark/client.py ``QueueClient.request`` (a final answer ends the call while
# another attempt of it may still be in flight).

CLIENT_F6 = "r-0123456789ab"
ORDER_F6 = b'"order-42"'


def test_late_copy_of_a_push_refused_as_queue_full_is_not_applied(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store_a = FaultyStore(inner)

    async def main() -> None:
        b = await started(inner, "http://b")  # the owner
        await b.create_queue("q", {"max_state_bytes": 65_536})
        await b.push("q", [NewJob(b'"' + b"f" * 60_000 + b'"')])  # the queue is full
        a = await started(store_a, "http://a")  # a standby on the same store
        gate, entered = threading.Event(), threading.Event()

        def hold(_key: str) -> None:
            entered.set()
            gate.wait(20)

        store_a.inject("read", None, key_contains="q/queue.json", before=hold)
        big = NewJob(b'"' + b"o" * 10_000 + b'"')  # an order with a 10 KB payload
        order = NewJob(ORDER_F6)
        # attempt 1 of the producer's call 0 reaches standby a, slow to read the object
        late = asyncio.create_task(a.push("q", [order, big], request=f"{CLIENT_F6}-0", floor=0))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        # the client times out, is redirected to b: attempt 2 is refused, queue full
        with pytest.raises(QueueFull):
            await b.push("q", [order, big], request=f"{CLIENT_F6}-0", floor=0)
        await b.purge("q")  # the queue drains (an admin purge of the filler here)
        await b.stop(drain_s=5)  # rolling restart of the owner
        gate.set()
        with pytest.raises(QueueFull, match="refused before"):
            await late  # attempt 1 replays the refusal: it is not applied
        # the producer, told "queue full, nothing written", pushes the order again
        await a.push("q", [order, big], request=f"{CLIENT_F6}-1", floor=1)
        await a.stop(drain_s=5)

    run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == ORDER_F6]
    assert len(copies) == 1, (
        f"the producer was told QueueFull ('nothing from this push was written') for call 0 "
        f"and pushed once more; the queue holds the order {len(copies)} times: {copies}")


# -- G1 ----------------------------------------------------------------------
# G1: a client's floor carried by a keyed call that is *refused* (PayloadTooLarge,
# InvalidRequest from the transition) is moved in the owner's memory but never
# written (apply raises -> changed=False -> no write), so after a crash the late copy
# of the client's earlier empty claim is applied as new: F2 again, by another path.
#
# 4efbab8 made ``_claim`` report ``changed`` when the floor moved, but ``_push``
# moves the floor in ``_earlier`` and *then* raises from ``_insert_*``; the commit
# loop records the OsqueueError with did=False and writes nothing.

CLIENT_G1 = "r-0123456789ab"


def test_floor_of_a_refused_push_survives_a_crash(tmp_path: Path) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)

    async def main() -> object:
        a = await started(inner, "http://a", clock)
        await a.create_queue("q", {"max_payload_bytes": 1024})
        # a job due in 5 s (a delayed push, a retry backoff), max_attempts=1
        await a.push("q", [NewJob(b'"x"', delay_ms=5_000, max_attempts=1)])
        # worker's call 0: a claim, answered [] (attempt 1 of it is held somewhere)
        assert await a.claim("q", "w1", 1, 30.0, request=f"{CLIENT_G1}-0", floor=0) == []
        # the same client's call 1: a push refused by the queue's payload limit
        with pytest.raises(PayloadTooLarge):
            await a.push("q", [b'"' + b"p" * 2000 + b'"'], request=f"{CLIENT_G1}-1", floor=1)
        clock.advance(receipts.LAZY_WRITE_MS / 1000)  # an idle queue writes the floor soon
        a._queues["q"].loop.poke()
        await until(lambda: stored(inner).receipts.floors.get(CLIENT_G1, (0, 0))[0] >= 1)
        floors = dict(stored(inner).receipts.floors)
        await crash(a)
        b = await successor(inner, clock)  # 31 s later: x is due
        try:
            late = await b.claim("q", "w1", 1, 30.0, request=f"{CLIENT_G1}-0", floor=0)
        except InvalidRequest:
            late = "refused"
        await b.stop(drain_s=5)
        return late, floors

    late, floors = run(main())
    x = stored(inner).job("j0000000001")
    assert x is not None
    assert late == "refused" and x.status == "pending", (
        f"late copy of claim 0 (answered [] long ago; the client's floor had moved to 1 with "
        f"its refused push) was answered {late!r}; job x is {x.status} under "
        f"{x.lease.token if x.lease else None}, a lease nobody holds (attempts "
        f"{x.attempts}/{x.max_attempts}); stored floors before the crash: {floors}")



# -- G2 ----------------------------------------------------------------------
# G2: since 4efbab8 every empty claim from QueueClient rewrites the whole queue
# object. QueueClient numbers every keyed call and sends floor=min(open calls)=n
# with call n, so each call moves the client's stored floor by one; ``_claim`` now
# reports ``changed=moved`` even when it claims nothing, and the commit loop writes.
# An idle Spark stream reader (``latestOffset`` -> ``client.claim(..., wait_s=0)`` on
# every trigger, ~every 10 ms when idle) or an idle worker fleet now costs one
# whole-object PUT per poll; before, an empty claim wrote nothing.
#
# Here: a queue holding 2,000 delayed jobs (about 100 KB object) and a worker polling
# 50 times: 50 whole-object writes, 0 jobs claimed.

def test_empty_polls_do_not_rewrite_the_object(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q", timeout_s=20)
        client.push_many([{"payload": {"n": i, "pad": "x" * 20}, "delay_s": 3600}
                          for i in range(2_000)])
        before = stored(store)
        size = len(store.read("q/queue.json").data)
        for _ in range(50):  # an idle poll loop (a stream reader's latestOffset)
            assert client.claim("w1", 1, 30.0) == []
        after = stored(store)
    finally:
        server.stop()
    writes = after.seq - before.seq
    assert writes <= 2, (
        f"50 claims that claimed nothing rewrote the {size}-byte queue object {writes} "
        f"times ({writes * size} bytes written for no job moved)")



# -- G3 ----------------------------------------------------------------------
# G3: the fork rebuild in ``QueueClient.request`` is not atomic: a thread of the
# child that checks ``self._pid`` after another child thread has set it in
# ``_own()`` but before ``_own()`` has replaced ``self._requests`` (and ``self._http``)
# goes on with the PARENT's request numbering (same client id, same next number)
# and the parent's pooled connections. Its push carries the parent's next request
# key; when the parent later sends its own next push, the broker finds that key's
# receipt and replays the child's ids: the parent is told its push is durable
# (with the id of the child's job) and its job is never enqueued.
#
# ``_own`` assigns ``self._pid = os.getpid()`` FIRST, then the lock, the
# ``_Requests`` and the pool; ``request`` tests ``self._pid != os.getpid()`` without
# a lock. The scheduling imposed: the child's first thread is switched out inside
# ``_own`` right after ``_pid`` is set (a widened window, nothing else is faked).

def test_forked_threads_never_reuse_the_parents_request_keys(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    server = start_broker(store)
    try:
        client = QueueClient(server.url, "q", timeout_s=20)
        client.push("p0")  # parent's call 0; its next call is number 1
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: two threads use the inherited client at once
            code = 1
            try:
                in_own, t2_done = threading.Event(), threading.Event()
                original = client_mod._Requests.__init__

                def slow_init(self: object) -> None:
                    if threading.current_thread().name == "T1":
                        in_own.set()  # _own() has set self._pid already
                        t2_done.wait(10)
                    original(self)  # type: ignore[arg-type]

                client_mod._Requests.__init__ = slow_init  # type: ignore[method-assign]
                got: dict[str, str] = {}
                t1 = threading.Thread(target=lambda: got.__setitem__("c1", client.push("c1")),
                                      name="T1")
                t1.start()
                in_own.wait(10)
                got["c2"] = client.push("c2")  # thread 2 (here: the child's main thread)
                t2_done.set()
                t1.join(20)
                os.write(out_w, f"{got.get('c1')},{got.get('c2')}".encode())
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        child_ids = os.read(out_r, 200).decode()
        parent_id = client.push("parent-1")  # the parent's call 1
    finally:
        server.stop()
    payloads = {j.id: j.payload for j in stored(store).jobs.values()}
    assert status == 0
    assert payloads.get(parent_id) == b'"parent-1"', (
        f"the parent was told its push 'parent-1' is job {parent_id}, which holds "
        f"{payloads.get(parent_id)!r}; the child's jobs were {child_ids}; the queue holds "
        f"{sorted(payloads.values())} (parent-1 was never enqueued)")



# -- G4 ----------------------------------------------------------------------
# G4: ``CommitLoop._commit`` answers the call whose apply raised a non-OsqueueError
# with a final (non-retryable, 500) "internal error" BEFORE it looks at ``attempts``;
# when an earlier attempt of the same batch may still land (verdict "pending": the
# write timed out and the object is still the version it was written over), that
# attempt carries this very call, applied fine the first time. It lands later: the
# caller was told its call failed for good (QueueClient does not retry a 500), yet
# its push is in the queue; the producer's own re-push makes two.
#
# The trigger is simulated: a bug whose outcome depends on the state or the clock
# (the re-apply runs at another ``now``). The path exists only for such bugs, and
# promise 3 says a call that may have landed is answered OutcomeUnknown.

def test_bad_call_whose_earlier_attempt_may_land_is_not_told_it_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    real = T._HANDLERS[T.PushPayloads]
    seen = {"n": 0}

    def flaky(state, op, now_ms):  # type: ignore[no-untyped-def]
        if op.payloads == (b'"order-42"',):
            seen["n"] += 1
            if seen["n"] == 2:  # a bug that bites on the re-apply only
                raise RuntimeError("simulated bug")
        return real(state, op, now_ms)

    monkeypatch.setitem(T._HANDLERS, T.PushPayloads, flaky)

    async def main() -> object:
        a = await started(store)
        await a.push("q", [NewJob(b'"first"')])
        store.inject("write_if_match", LATE, key_contains="q/queue.json")
        try:
            await a.push("q", [b'"order-42"'], request="r-0123456789ab-0", floor=0)
            answer: object = "ids"
        except OsqueueError as exc:
            answer = exc
        store.land_late()  # the timed-out PUT of attempt 1 lands
        await a.stop(drain_s=5)
        return answer

    answer = run(main())
    copies = [j.id for j in stored(inner).jobs.values() if j.payload == b'"order-42"']
    if copies:
        assert isinstance(answer, OutcomeUnknown) or answer == "ids", (
            f"the push was answered {type(answer).__name__} (retryable="
            f"{getattr(answer, 'retryable', None)}): {answer}; yet attempt 1 carrying it "
            f"landed: the queue holds it as {copies}")
