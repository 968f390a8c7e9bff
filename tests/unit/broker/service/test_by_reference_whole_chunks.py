"""broker.service.by_reference.publish_by_reference gathering whole staged
chunks into each segment (StagedChunk sizes known from staging): jobs with
options and bare ones mixed in a chunk, a chunk larger than a segment (in jobs
or bytes), a queue payload limit below the broker's, a chunk read from the
store (staged through another broker) and a segment write that fails. Each
test counts the store afterwards: head, segments and archive hold every job
once. Real file store, in-process brokers."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import PayloadTooLarge, StorageUnavailable
from broker.model.format.segment_format import MAX_SEGMENT_JOBS
from broker.service.by_reference import SEGMENT_MAX_BYTES
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import payloads, run, segment_objects, started, stored


def _line(n: int, options: bytes = b"", pad: bytes = b"") -> bytes:
    return options + b'\t{"n":%d%s}\n' % (n, pad)


def _lines(lo: int, hi: int, options: bytes = b"", pad: bytes = b"") -> bytes:
    return b"".join(_line(n, options, pad) for n in range(lo, hi))


def _ns(store: FileStore | FaultyStore) -> list[int]:
    return sorted(p["n"] for p in payloads(store))


def _body_bytes(data: bytes) -> int:
    """Payload bytes of a segment object (its lines but the header, no breaks)."""
    return len(data) - data.index(b"\n") - 1 - (data.count(b"\n") - 1)


@pytest.mark.parametrize("push_jobs", [10, 1000])
def test_publish_by_reference_pushes_mixed_chunks_once_with_their_options(
        tmp_path: Path, push_jobs: int) -> None:
    """Chunks mixing jobs with options (first, last, alone) and bare ones: every
    job once, options kept, a repeat is a duplicate. Below ``push_jobs`` the
    publish goes into the head in the chunks' order."""
    store = FileStore(tmp_path)
    chunks = [_line(0, b'{"priority":3}') + _lines(1, 30), _lines(30, 60),
              _lines(60, 65, b'{"max_attempts":5}'),
              _lines(65, 80) + _line(80, b'{"key":"k80"}')]

    async def go() -> None:
        a = await started(store, segment_push_jobs=push_jobs)
        keep = [f"w/p{c}" for c in range(len(chunks))]
        for name, chunk in zip(keep, chunks, strict=True):
            await a.stage("q", name, chunk)
        assert (await a.publish("q", "w/", keep, once="o"))["published"] == 81
        assert (await a.publish("q", "w/", keep, once="o"))["duplicate"]
        await a.stop(5)

    run(go())
    assert _ns(store) == list(range(81))
    state = stored(store)
    inline = {orjson.loads(j.payload)["n"]: j for j in state.jobs.values()}
    assert inline[0].priority == 3 and inline[64].max_attempts == 5
    if push_jobs > 81:  # into the head, in order
        assert not state.segment_refs and sorted(inline) == list(range(81))
        assert [j.seq for _, j in sorted(inline.items())] == sorted(j.seq for j in inline.values())
    else:
        assert sum(r.count for r in state.segment_refs) == 74
    assert store.list(paths.staging_prefix("q")) == []


def test_publish_by_reference_splits_a_chunk_over_a_segments_jobs_or_bytes(
        tmp_path: Path) -> None:
    """A chunk of more than MAX_SEGMENT_JOBS jobs, and one of more than
    SEGMENT_MAX_BYTES, between small ones: every segment within both limits."""
    store = FileStore(tmp_path)
    pad = b',"p":"%s"' % (b"x" * 1000)
    many, wide = MAX_SEGMENT_JOBS + 10, 17_000  # (17,000 lines of 1 kB: over 16 MiB)
    bounds = [0, 3, 3 + many, 6 + many, 6 + many + wide, 9 + many + wide]
    chunks = [_lines(bounds[0], bounds[1]), _lines(bounds[1], bounds[2]),
              _lines(bounds[2], bounds[3]), _lines(bounds[3], bounds[4], pad=pad),
              _lines(bounds[4], bounds[5])]

    async def go() -> None:
        a = await started(store, segment_push_jobs=10)
        keep = [f"w/p{c}" for c in range(len(chunks))]
        for name, chunk in zip(keep, chunks, strict=True):
            await a.stage("q", name, chunk)
        assert (await a.publish("q", "w/", keep, once="o"))["published"] == bounds[-1]
        await a.stop(5)

    run(go())
    refs = stored(store).segment_refs
    assert all(ref.count <= MAX_SEGMENT_JOBS for ref in refs)
    assert all(_body_bytes(store.get(key)) <= SEGMENT_MAX_BYTES
               for key in segment_objects(store))
    assert sum(ref.count for ref in refs) == bounds[-1] and len(refs) >= 6
    assert _ns(store) == list(range(bounds[-1]))


def test_publish_by_reference_refuses_a_payload_over_the_queues_limit(tmp_path: Path) -> None:
    """A queue's max_payload_bytes below the broker's (staging checks the
    broker's): a publish holding a larger bare payload is refused by the
    Reserve and changes nothing, in segments or in the head."""
    store = FileStore(tmp_path)
    big = b',"p":"%s"' % (b"x" * 5000)

    async def go() -> None:
        a = await started(store, segment_push_jobs=2)
        await a.create_queue("q", {"max_payload_bytes": 1024})
        await a.stage("q", "w/p0", _lines(0, 3) + _line(3, pad=big) + _lines(4, 6))
        before = {key: store.get(key) for key in store.list("")}
        with pytest.raises(PayloadTooLarge):
            await a.publish("q", "w/", ["w/p0"], once="w/")
        assert {key: store.get(key) for key in store.list("")} == before
        await a.stop(5)

    run(go())
    assert _ns(store) == []


@pytest.mark.xfail(strict=True, reason=(
    "a job with options goes into the last commit, whose push check is the first to "
    "see its payload: the bare jobs' Reserve has landed and their segment is written "
    "by then (a counter bump, and an object left to the sweep). Checking option jobs' "
    "payloads in the Reserve covers only those read before the first segment write."))
def test_publish_by_reference_refuses_a_job_with_options_over_the_queues_limit_unchanged(
        tmp_path: Path) -> None:
    """As above, the large payload on a job with options: the refused publish
    must leave the store as it was (no Reserve landed, no segment written)."""
    store = FileStore(tmp_path)
    big = b',"p":"%s"' % (b"x" * 5000)

    async def go() -> None:
        a = await started(store, segment_push_jobs=2)
        await a.create_queue("q", {"max_payload_bytes": 1024})
        await a.stage("q", "x/p0", _line(0, b'{"priority":1}', big) + _lines(1, 4))
        before = {key: store.get(key) for key in store.list("")}
        with pytest.raises(PayloadTooLarge):
            await a.publish("q", "x/", ["x/p0"], once="x/")
        after = {key: store.get(key) for key in store.list("")}
        await a.stop(5)
        assert after == before

    run(go())


def test_publish_by_reference_retried_after_a_segment_write_failed_pushes_once(
        tmp_path: Path) -> None:
    """Chunks staged through broker a, published through broker b (a cache
    miss: read from the store); b's second segment write fails, the driver
    retries with the same key: every job once, a third publish a duplicate,
    and the sweep leaves only the referenced segments."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    per = 20_000  # (5 chunks: two segments' worth and more)

    async def go() -> None:
        a = await started(store, "http://a", clock, segment_push_jobs=10)
        b = await started(store, "http://b", clock, segment_push_jobs=10)
        keep = [f"w/p{c}" for c in range(5)]
        for c, name in enumerate(keep):
            await a.stage("q", name, _lines(c * per, c * per + per)
                          + _line(10**6 + c, b'{"priority":2}'))
        store.inject("create_if_absent", NOT_LANDED, nth=2, key_contains="/segments/")
        with pytest.raises(StorageUnavailable):
            await b.publish("q", "w/", keep, once="o")
        assert (await b.publish("q", "w/", keep, once="o"))["published"] == 5 * per + 5
        assert (await b.publish("q", "w/", keep, once="o"))["duplicate"]
        await b.sweep_staging()
        clock.advance(b.segments.grace_s + 1)
        await b.sweep_staging()
        await a.stop(5)
        await b.stop(5)

    run(go())
    assert _ns(inner) == list(range(5 * per)) + [10**6 + c for c in range(5)]
    assert segment_objects(inner) == sorted(r.key for r in stored(inner).segment_refs)
