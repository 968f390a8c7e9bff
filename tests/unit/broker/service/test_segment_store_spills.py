"""Spill objects in the store, beside segments (broker/paths.py spill keys,
broker/service/segment_store.py): written once under a fresh salted key and held
from the sweep until released, swept after the grace when neither the caller's
head nor the landed head references them (the landed head's ``"spills"`` list
read as its ``"segments"`` is), deleted once dropped. Each store test checks the
store afterwards."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from broker import paths
from broker.commit.offloop import run_bulk, run_io
from broker.errors import StorageUnavailable
from broker.service.segment_store import SegmentStore
from broker.storage import MemoryStore, ObjectStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, Clock, FaultyStore
from tests.support.inprocess import run

GRACE_S = 600.0
BODY = b'{"format":"osqueue-jobs","version":1,"queue":"q","kind":"dead","count":0}\n'


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    ex = ThreadPoolExecutor(2)
    yield ex
    ex.shutdown()


def objects_of(store: ObjectStore, executor: ThreadPoolExecutor, clock: Clock) -> SegmentStore:
    return SegmentStore(store, functools.partial(run_io, executor),
                        functools.partial(run_bulk, executor),
                        grace_s=GRACE_S, monotonic=clock.monotonic)


def spill_keys(store: ObjectStore, queue: str = "q") -> list[str]:
    return store.list(paths.spills_prefix(queue))


def write_head(store: ObjectStore, segments: list[str], spills: list[str]) -> bytes:
    """A landed queue object of ``q`` whose lists reference ``segments`` and ``spills``
    (only their keys: what the sweep reads of it); its bytes."""
    data = orjson.dumps({"version": 4, "segments": [{"key": k} for k in segments],
                         "spills": [{"key": k, "kind": "dead"} for k in spills]})
    store.put(paths.state_key("q"), data)
    return data


# -- keys -------------------------------------------------------------------------------


def test_spill_keys_round_trip_through_parse_spill_key() -> None:
    for kind, letter in (("pending", "p"), ("dead", "d")):
        for seq in (1, 42, 10**12 - 1, 10**12, 10**15 - 1):
            key = paths.spill_key("docs.v2", paths.spill_name(kind, seq, "5d0e91aa"))
            assert key == f"docs.v2/spills/{letter}-{seq:012d}-5d0e91aa.jsonl"
            assert paths.parse_spill_key(key) == ("docs.v2", kind, seq)
            assert paths.job_object_queue(key) == "docs.v2"
    assert paths.spills_prefix("q") == "q/spills/"


@pytest.mark.parametrize("kind, seq, salt", [
    ("retry", 1, "5d0e91aa"), ("p", 1, "5d0e91aa"), ("pending", 0, "5d0e91aa"),
    ("pending", 10**15, "5d0e91aa"), ("pending", True, "5d0e91aa"),
    ("dead", 1, "5D0E91AA"), ("dead", 1, "5d0e91a"), ("dead", 1, "../../x")])
def test_spill_name_refuses_another_kind_seq_or_salt(kind: str, seq: int, salt: str) -> None:
    with pytest.raises(ValueError, match="spill"):
        paths.spill_name(kind, seq, salt)


@pytest.mark.parametrize("key", [
    "q/spills/x-000000000001-5d0e91aa.jsonl",  # another kind letter
    "q/spills/d-00000000001-5d0e91aa.jsonl",  # 11 digits
    "q/spills/d-0000000000001-5d0e91aa.jsonl",  # 13 digits with a leading zero
    "q/spills/d-000000000000-5d0e91aa.jsonl",  # seq 0
    "q/spills/d-000000000001-5d0e91aa.json",
    "q/spills/sub/d-000000000001-5d0e91aa.jsonl",
    "q/segments/d-000000000001-5d0e91aa.jsonl",
    "-q/spills/d-000000000001-5d0e91aa.jsonl",
    "a/../spills/d-000000000001-5d0e91aa.jsonl",
    "q/spills/d-000000000001-5d0e91aa.jsonl\n"])
def test_parse_spill_key_refuses_what_spill_key_never_makes(key: str) -> None:
    assert paths.parse_spill_key(key) is None
    assert paths.job_object_queue(key) is None


@pytest.mark.parametrize("name", [
    "x-000000000001-5d0e91aa.jsonl", "d-00000000001-5d0e91aa.jsonl",
    "d-0000000000001-5d0e91aa.jsonl", "d-000000000000-5d0e91aa.jsonl",
    "d-000000000001-5d0e91aa.json", "sub/d-000000000001-5d0e91aa.jsonl",
    "d-000000000001-5d0e91aa.jsonl\n", "seg-0000000001-5d0e91aa.jsonl"])
def test_spill_key_refuses_a_name_spill_name_never_makes(name: str) -> None:
    with pytest.raises(ValueError, match="invalid spill name"):
        paths.spill_key("q", name)


def test_segment_and_spill_keys_name_their_queue_and_nothing_else_does() -> None:
    segment = paths.segment_key("q", paths.segment_name(7, "0c2b1d4e"))
    assert paths.job_object_queue(segment) == "q"
    assert paths.parse_spill_key(segment) is None
    assert paths.job_object_queue(paths.state_key("q")) is None
    assert paths.job_object_queue(paths.staging_key("q", "w-1")) is None


# -- the store --------------------------------------------------------------------------


def test_each_spill_write_makes_a_new_held_object(executor: ThreadPoolExecutor) -> None:
    """Under a fresh salted key each time (a batch re-applied after a conflict never
    replaces the first attempt's object), the bytes as given, held from the sweep
    until released."""
    store = MemoryStore()
    clock = Clock()
    objs = objects_of(store, executor, clock)
    write_head(store, [], [])
    first = run(objs.write_spill("q", "dead", 5, BODY))
    second = run(objs.write_spill("q", "dead", 5, [BODY[:10], BODY[10:]]))
    assert first[0] != second[0]
    assert sorted(spill_keys(store)) == sorted([first[0], second[0]])
    for key, etag in (first, second):
        assert store.read(key).data == BODY and store.read(key).etag == etag
        assert paths.parse_spill_key(key) == ("q", "dead", 5)
    landed = functools.partial(objs.landed_refs, "q")
    run(objs.sweep("q", set(), landed=landed))
    clock.advance(GRACE_S * 10)
    assert run(objs.sweep("q", set(), landed=landed)) == 0  # held
    objs.release([first[0], second[0]])
    assert run(objs.sweep("q", set(), landed=landed)) == 0  # a whole grace from the release
    clock.advance(GRACE_S)
    assert run(objs.sweep("q", set(), landed=landed)) == 2
    assert spill_keys(store) == []


def test_a_spill_write_refused_by_its_name_writes_nothing(
        executor: ThreadPoolExecutor) -> None:
    store = MemoryStore()
    objs = objects_of(store, executor, Clock())
    with pytest.raises(ValueError, match="spill kind"):
        run(objs.write_spill("q", "retrying", 5, BODY))
    with pytest.raises(ValueError, match="commit seq"):
        run(objs.write_spill("q", "dead", 0, BODY))
    assert store.list("q/") == []


def test_a_spill_write_whose_retry_got_412_is_the_written_object(
        executor: ThreadPoolExecutor) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    objs = objects_of(store, executor, Clock())
    store.inject("create_if_absent", LOST_REPLY_412, key_contains="/spills/")
    key, etag = run(objs.write_spill("q", "pending", 3, BODY))
    assert store.injected and spill_keys(inner) == [key]
    assert inner.read(key).etag == etag and inner.get(key) == BODY


def test_a_spill_write_whose_reply_is_lost_is_released_and_swept_past_the_grace(
        executor: ThreadPoolExecutor) -> None:
    """The object landed, the caller never learned its key nor its etag and never
    referenced it: the failed write releases its hold itself (the caller could
    not), so the sweep removes it once past the grace, and leaves the head alone."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    clock = Clock()
    objs = objects_of(store, executor, clock)
    head = write_head(inner, [], [])
    store.inject("create_if_absent", LOST_REPLY, key_contains="/spills/")
    with pytest.raises(StorageUnavailable):
        run(objs.write_spill("q", "dead", 9, BODY))
    [orphan] = spill_keys(inner)
    assert orphan not in objs._busy
    landed = functools.partial(objs.landed_refs, "q")
    assert run(objs.sweep("q", set(), landed=landed)) == 0  # (listed: its grace starts)
    clock.advance(GRACE_S - 1)
    assert run(objs.sweep("q", set(), landed=landed)) == 0
    clock.advance(1)
    assert run(objs.sweep("q", set(), landed=landed)) == 1
    assert {k: inner.get(k) for k in inner.list("q/")} == {paths.state_key("q"): head}


def test_the_sweep_lists_segments_and_spills_and_keeps_what_either_list_references(
        executor: ThreadPoolExecutor) -> None:
    """Both prefixes listed; the landed head's "segments" and "spills" both keep
    their objects however old; the caller's in-memory keys keep theirs; the rest
    goes after the grace."""
    store = MemoryStore()
    clock = Clock()
    objs = objects_of(store, executor, clock)
    seg = run(objs.write("q", 1, 0, 0, [b'{"n":1}'], max_attempts=3))
    stray_seg = run(objs.write("q", 2, 0, 0, [b'{"n":2}'], max_attempts=3))
    kept, in_memory, stray = (run(objs.write_spill("q", "dead", n, BODY))[0] for n in (1, 2, 3))
    objs.release([kept, in_memory, stray])
    head = write_head(store, [seg.key], [kept])
    assert run(objs.landed_refs("q")) == {seg.key, kept}
    landed = functools.partial(objs.landed_refs, "q")
    assert run(objs.sweep("q", {in_memory}, landed=landed)) == 0
    clock.advance(GRACE_S)
    assert run(objs.sweep("q", {in_memory}, landed=landed)) == 2
    assert sorted(store.list("q/")) == sorted([paths.state_key("q"), seg.key, kept, in_memory])
    assert stray_seg.key not in store.list("q/") and stray not in store.list("q/")
    assert store.get(paths.state_key("q")) == head


def test_a_head_whose_spills_are_not_a_list_sweeps_nothing(executor: ThreadPoolExecutor) -> None:
    store = MemoryStore()
    clock = Clock()
    objs = objects_of(store, executor, clock)
    key = run(objs.write_spill("q", "dead", 1, BODY))[0]
    objs.release([key])
    store.put(paths.state_key("q"), b'{"version":4,"segments":[],"spills":{"key":"x"}}')
    landed = functools.partial(objs.landed_refs, "q")
    run(objs.sweep("q", set(), landed=landed))
    clock.advance(GRACE_S * 10)
    assert run(objs.sweep("q", set(), landed=landed)) == 0
    assert spill_keys(store) == [key]


def test_delete_dropped_deletes_spill_objects_too(executor: ThreadPoolExecutor) -> None:
    store = MemoryStore()
    objs = objects_of(store, executor, Clock())
    seg = run(objs.write("q", 1, 0, 0, [b'{"n":1}'], max_attempts=3))
    dropped, other = (run(objs.write_spill("q", "pending", n, BODY))[0] for n in (1, 2))

    class Ref:
        def __init__(self, key: str) -> None:
            self.key = key

    assert run(objs.delete_dropped([seg, Ref(dropped)])) == 2
    assert store.list("q/") == [other]
