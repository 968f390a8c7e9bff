"""Regressions found by adversarial review round 1 of the failure-path work (R1-R13).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import api, archive
from broker.errors import (
    InvalidRequest,
)
from broker.storage import FileStore
from broker.transitions import CompleteItem
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored

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
