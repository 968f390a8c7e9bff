"""The queue object's codec (broker/model/format/codec.py) on objects it did not write or that
hold unusual payloads: deep nesting, integers beyond 64 bits beside a payload
that starts with whitespace, the previous release's layout. Each decodes, keeps
every payload's bytes verbatim and is served."""

from __future__ import annotations

import threading
from pathlib import Path

from broker import paths, timefmt, wire
from broker.model import transitions
from broker.model.checks import parse_staged
from broker.model.format import archive, codec
from broker.model.format.decode import decode_state
from broker.model.ops import CompleteItem, NewJob, Push
from broker.storage import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import archive_lines, crash, run, started, stored, successor, until
from tests.support.states import new_queue

#: a payload nested 300 levels deep (past orjson's encoding limit of 255):
#: canonical, valid JSON, 601 bytes
DEPTH = 300
PAYLOAD = b"[" * DEPTH + b"1" + b"]" * DEPTH

#: a payload with an integer beyond 64 bits, and one that starts with whitespace
BIG = b'{"account":123456789012345678901234567890}'
ODD = b' {"n":2}'

#: a queue object written by the broker of commit 5932e4f (see the test)
FIXTURE = Path(__file__).resolve().parents[4] / "fixtures" / "old_5932e4f_queue.json"


def staged(*payloads: bytes) -> list:
    """``payloads`` as the staged push path parses them: bytes kept verbatim."""
    body = b"".join(b"\t" + p + b"\n" for p in payloads)
    return parse_staged(body, check=True, max_payload_bytes=1 << 20)


def test_an_object_holding_a_deep_payload_decodes_and_serves(tmp_path: Path) -> None:
    """Written by an older version, or by hand: it must still decode, verbatim."""
    store = FileStore(tmp_path)
    state = new_queue(timefmt.now_ms())
    transitions.apply(state, Push((NewJob(PAYLOAD), NewJob(b" [1, 2] "))),
                      state.updated_ms)
    codec.stamp(state, "old", state.updated_ms, "c-old")
    store.create_if_absent(paths.state_key("q"), codec.encode(state))
    assert [j.payload for j in decode_state(store.read(paths.state_key("q")).data).jobs.values()] \
        == [PAYLOAD, b" [1, 2] "]

    async def main() -> list[bytes]:
        b = await started(store, "http://b")
        got = await b.claim("q", "w", 2, 30.0)
        await b.stop(drain_s=5)
        return [j.payload for j in got]

    assert run(main()) == [PAYLOAD, b" [1, 2] "]


def test_big_integer_payload_survives_a_takeover_when_another_job_is_odd(tmp_path: Path) -> None:
    """A payload holding an integer beyond 64 bits comes back byte for byte after a
    takeover, also when another job's payload starts with whitespace.

    Such a payload (valid JSON; staged pushes and Spark writes keep payload bytes
    verbatim) once made decode fall back to re-encoding every job's payload
    through orjson, which turns big integers into floats: acknowledged payloads
    changed on the next restart, takeover or conflict re-read."""
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


def test_big_integer_payload_alone_survives_a_takeover(tmp_path: Path) -> None:
    """The control of the test above: the big-integer payload alone, through the same
    crash and takeover, comes back byte for byte."""
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


def test_a_successor_rewrites_an_archive_object_with_the_same_bytes(tmp_path: Path) -> None:
    """A completes the big-int job and writes its archive object; A dies before the
    drop; B (takeover) writes the 'very same object' again: with a float."""
    store = FaultyStore(FileStore(tmp_path))
    clock = Clock()
    rewritten = threading.Event()

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
        store.inject("put", None, key_contains=key, after=lambda _key: rewritten.set())
        b = await started(store, "http://b", clock)
        clock.advance(31)
        await b.watch()
        await b._queues["q"].archiver.wait(5)
        await until(rewritten.is_set)  # b's archiver wrote the object again
        after = store.get(key)
        await b.stop(drain_s=5)
        return before, after

    before, after = run(main())
    assert b"123456789012345678901234567890" in before
    assert after == before, f"archive object rewritten:\n{before!r}\n{after!r}"


def test_current_broker_serves_a_queue_written_by_the_previous_release(tmp_path: Path) -> None:
    """A queue object written by the previous release (commit 5932e4f, the same
    format version, its receipts a list of per-commit objects) is served by the
    current broker, and the retry of a push answered before the upgrade (its
    request key in those old receipts) answers the same ids.

    The current receipts decoder once refused that layout as corrupt: the broker
    would not start, and since a corrupt object is never overwritten the queue was
    wedged for good (fixtures/old_5932e4f_queue.json was written by the broker of
    that commit: two jobs pushed with request key r-0123456789ab-0, one claimed
    and completed)."""
    store = FileStore(tmp_path)
    store.create_if_absent(paths.state_key("q"), FIXTURE.read_bytes())

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


def test_payload_bytes_survive_a_restart_verbatim(tmp_path: Path) -> None:
    """Defect 15: a payload integer beyond 64 bits came back as a float."""
    store = FileStore(tmp_path)
    odd = [b"123456789012345678901234567890", b'{"a":1E+2,"b":"\\u00e9\\/"}', b"-0.0",
           b'[18446744073709551616, 1.0]']

    async def main() -> list[bytes]:
        a = await started(store)
        await a.push("q", [NewJob(p) for p in odd])
        [job] = await a.claim("q", "w", 1, 30.0)
        await a.complete("q", [CompleteItem(job.token, b"99999999999999999999999")])
        await crash(a)
        b = await successor(store, Clock())  # a broker that re-reads everything
        got = [j.payload for j in await b.claim("q", "w", 10, 30.0)]
        await b.stop(drain_s=5)
        return got

    assert run(main()) == odd[1:]
    [line] = archive_lines(store)
    assert wire.loads(store.get(archive.list_objects(store, "q")[0])) == line  # numbers exact
    raw = store.get(archive.list_objects(store, "q")[0])
    assert b'"payload":123456789012345678901234567890,' in raw
    assert b'"result":99999999999999999999999}' in raw
