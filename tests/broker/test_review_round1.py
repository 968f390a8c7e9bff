"""Regressions found by adversarial review round 1 of the failure-path work (R1-R13).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from broker import api, archive, codec, keys, transitions
from broker import state as S
from broker.errors import (
    InvalidRequest,
)
from broker.storage import FileStore
from broker.transitions import CompleteItem, NewJob
from tests.support.faults import Clock
from tests.support.inprocess import crash, run, started, stored

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
    codec.stamp(state, "old", state.updated_ms, "c-old")
    store.create_if_absent(keys.state_key("q"), codec.encode(state))
    assert [j.payload for j in codec.decode(store.read(keys.state_key("q")).data).jobs.values()] \
        == [PAYLOAD, b" [1, 2] "]

    async def main() -> list[bytes]:
        b = await started(store, "http://b")
        got = await b.claim("q", "w", 2, 30.0)
        await b.stop(drain_s=5)
        return [j.payload for j in got]

    assert run(main()) == [PAYLOAD, b" [1, 2] "]


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
