"""One contract, run against every store: memory, local files, S3 (moto over HTTP),
Azure (Azurite over HTTP), GCS (the official client against our JSON-API test server
over HTTP)."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    UnsafeStore,
)
from broker.storage import (
    FileStore,
    MemoryStore,
    ObjectStore,
    S3Store,
    Versioned,
    store_from_url,
)

ROUNDS = 200

#: Prefixes that would list outside the store (or its queue's directory), and
#: keys (which may not end with "/" either, nor be empty).
BAD_PREFIXES = ["..", "../", "q/..", "q/../x", "q/./x", ".", "/q", "/", "q//x", "q\\x",
                "q\\..\\..\\x", "q/\x00x"]
BAD_KEYS = [*BAD_PREFIXES, "", "q/", "q/x/"]


class StoreContract:
    """Every backend must pass these. Subclasses provide the ``store`` fixture and
    ``reopen``: a callable that opens the same store again (in another process).

    A capability flag (``ObjectStore.etags_differ_on_same_bytes``...) decides
    what its test asserts: the promise where the class claims it, and that
    the claim is truthful (the promise visibly broken) where it does not.
    """

    #: Rounds of the process race (each a read and a write of every writer).
    process_race_rounds = ROUNDS

    @pytest.fixture()
    def store(self) -> Iterator[ObjectStore]:
        raise NotImplementedError

    @pytest.fixture()
    def reopen(self, store: ObjectStore) -> Callable[[], ObjectStore]:
        raise NotImplementedError

    def test_read_missing_is_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(NotFound):
            store.read("q/queue.json")

    def test_create_then_read(self, store: ObjectStore) -> None:
        etag = store.create_if_absent("q/queue.json", b'{"a":1}')
        got = store.read("q/queue.json")
        assert got == Versioned(b'{"a":1}', etag)

    def test_create_over_existing_is_refused(self, store: ObjectStore) -> None:
        etag = store.create_if_absent("q/queue.json", b"one")
        with pytest.raises(Conflict):
            store.create_if_absent("q/queue.json", b"two")
        assert store.read("q/queue.json") == Versioned(b"one", etag)

    def test_write_if_match_replaces(self, store: ObjectStore) -> None:
        first = store.create_if_absent("q/queue.json", b"one")
        second = store.write_if_match("q/queue.json", b"two", first)
        assert second != first
        assert store.read("q/queue.json") == Versioned(b"two", second)

    def test_stale_etag_is_refused(self, store: ObjectStore) -> None:
        first = store.create_if_absent("q/queue.json", b"one")
        second = store.write_if_match("q/queue.json", b"two", first)
        with pytest.raises(Conflict):
            store.write_if_match("q/queue.json", b"three", first)
        assert store.read("q/queue.json") == Versioned(b"two", second)

    def test_write_if_match_on_missing_is_refused(self, store: ObjectStore) -> None:
        with pytest.raises(Conflict):
            store.write_if_match("q/queue.json", b"x", "no-such-etag")
        with pytest.raises(NotFound):
            store.read("q/queue.json")

    def test_plain_objects(self, store: ObjectStore) -> None:
        store.put("q/archive/2026-01-01T00/b.jsonl", b"b\n")
        store.put("q/archive/2026-01-01T00/a.jsonl", b"a\n")
        store.put("q/archive/2026-01-01T01/c.jsonl", b"c\n")
        store.put("other/x", b"x")
        assert store.get("q/archive/2026-01-01T00/a.jsonl") == b"a\n"
        assert store.list("q/archive/") == [
            "q/archive/2026-01-01T00/a.jsonl",
            "q/archive/2026-01-01T00/b.jsonl",
            "q/archive/2026-01-01T01/c.jsonl",
        ]
        assert store.list("q/archive/2026-01-01T01") == ["q/archive/2026-01-01T01/c.jsonl"]
        store.delete("q/archive/2026-01-01T00/a.jsonl")
        store.delete("q/archive/2026-01-01T00/never-was.jsonl")
        with pytest.raises(NotFound):
            store.get("q/archive/2026-01-01T00/a.jsonl")
        assert len(store.list("q/")) == 2

    def test_cas_objects_are_listed_and_deleted(self, store: ObjectStore) -> None:
        store.create_if_absent("q1/queue.json", b"1")
        store.create_if_absent("q2/queue.json", b"2")
        assert store.list("q") == ["q1/queue.json", "q2/queue.json"]
        store.delete("q1/queue.json")
        with pytest.raises(NotFound):
            store.read("q1/queue.json")
        store.create_if_absent("q1/queue.json", b"again")

    def test_head_gives_the_etag_read_gives(self, store: ObjectStore) -> None:
        with pytest.raises(NotFound):
            store.head("q/queue.json")
        first = store.create_if_absent("q/queue.json", b"one")
        assert store.head("q/queue.json") == first == store.read("q/queue.json").etag
        second = store.write_if_match("q/queue.json", b"two", first)
        assert store.head("q/queue.json") == second == store.read("q/queue.json").etag
        store.delete("q/queue.json")
        with pytest.raises(NotFound):
            store.head("q/queue.json")

    def test_put_returns_the_etag_head_gives_and_a_replacement_changes_it(
            self, store: ObjectStore) -> None:
        first = store.put("q/staging/w/a.jsonl", b"one")
        assert store.head("q/staging/w/a.jsonl") == first
        second = store.put("q/staging/w/a.jsonl", b"two")
        assert store.head("q/staging/w/a.jsonl") == second != first
        assert store.get("q/staging/w/a.jsonl") == b"two"

    @pytest.mark.parametrize("key", BAD_KEYS)
    def test_keys_that_leave_the_store_are_refused(self, store: ObjectStore, key: str) -> None:
        """Every key method refuses a key with a ``..``, ``.`` or empty part, a
        leading ``/``, a backslash or a NUL (checked by ObjectStore for all stores),
        and nothing changes."""
        store.put("q/staging/w.jsonl", b"staged")
        before = {k: store.get(k) for k in store.list("")}
        calls: list[Callable[[], object]] = [
            lambda: store.read(key), lambda: store.head(key), lambda: store.get(key),
            lambda: store.put(key, b"x"), lambda: store.create_if_absent(key, b"x"),
            lambda: store.write_if_match(key, b"x", store.head("q/staging/w.jsonl")),
            lambda: store.delete(key)]
        for call in calls:
            with pytest.raises(InvalidRequest, match="invalid object key"):
                call()
        assert {k: store.get(k) for k in store.list("")} == before

    @pytest.mark.parametrize("prefix", [*BAD_PREFIXES, "q/staging/../../../"])
    def test_listing_outside_the_store_is_refused(self, store: ObjectStore, prefix: str) -> None:
        store.put("q/staging/w.jsonl", b"staged")
        with pytest.raises(InvalidRequest, match="invalid object prefix"):
            store.list(prefix)
        assert store.list("q/staging/") == ["q/staging/w.jsonl"]  # a trailing "/" is fine

    def test_self_test_passes(self, store: ObjectStore) -> None:
        store.self_test()
        assert not [k for k in store.list("_osqueue/") if "selftest" in k]

    def test_thread_race_has_one_winner_per_round(self, store: ObjectStore) -> None:
        _thread_race(store, writers=4, rounds=ROUNDS)

    def test_etag_on_repeated_bytes_is_as_the_store_declares(self, store: ObjectStore) -> None:
        first = store.create_if_absent("k", b"same")
        second = store.write_if_match("k", b"same", first)
        if type(store).etags_differ_on_same_bytes:
            assert second != first
            with pytest.raises(Conflict):
                store.write_if_match("k", b"same", first)
            return
        # Content-hash etags: the same bytes give the same etag, so an A-B-A write
        # passes the CAS with the first etag. (Why every queue version has a new seq.)
        assert second == first
        third = store.write_if_match("k", b"other", second)
        assert third != first
        assert store.write_if_match("k", b"same", third) == first
        store.write_if_match("k", b"after A-B-A", first)
        assert store.read("k").data == b"after A-B-A"

    def test_processes_share_the_store_as_it_declares(
            self, store: ObjectStore, reopen: Callable[[], ObjectStore]) -> None:
        if type(store).shared_across_processes:
            _process_race(store, reopen, writers=4, rounds=self.process_race_rounds)
            return
        # A store kept in one process: a child's write is not seen by its parent.
        store.create_if_absent("race/queue.json", b"0")
        ctx = mp.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_write_in_child, args=(reopen, out))
        child.start()
        assert out.get(timeout=60) == "written"
        child.join(timeout=30)
        assert child.exitcode == 0
        assert store.read("race/queue.json").data == b"0"


def _thread_race(store: ObjectStore, writers: int, rounds: int) -> None:
    key = "race/queue.json"
    store.create_if_absent(key, b"0")
    barrier = threading.Barrier(writers)
    wins: list[list[int]] = [[] for _ in range(writers)]

    def writer(n: int) -> None:
        for r in range(rounds):
            seen = store.read(key)
            barrier.wait()
            try:
                store.write_if_match(key, f"{r}-{n}".encode(), seen.etag)
                wins[n].append(r)
            except Conflict:
                pass
            barrier.wait()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_round = [sum(r in w for w in wins) for r in range(rounds)]
    assert per_round == [1] * rounds


def _write_in_child(reopen: Callable[[], ObjectStore], out: Any) -> None:
    store = reopen()
    store.write_if_match("race/queue.json", b"child", store.head("race/queue.json"))
    out.put("written")


def _process_race(store: ObjectStore, reopen: Callable[[], ObjectStore], writers: int,
                  rounds: int) -> None:
    store.create_if_absent("race/queue.json", b"0")
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(writers)
    out = ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(reopen, n, rounds, barrier, out))
             for n in range(writers)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    per_round = [sum(r in results[n] for n in results) for r in range(rounds)]
    assert per_round == [1] * rounds


class TestMemoryStore(StoreContract):
    @pytest.fixture()
    def store(self) -> Iterator[ObjectStore]:
        yield MemoryStore()

    @pytest.fixture()
    def reopen(self, store: ObjectStore) -> Callable[[], ObjectStore]:
        return lambda: store  # the child's copy of this very object


def _process_writer(reopen: Callable[[], ObjectStore], n: int, rounds: int, barrier: Any,
                    out: Any) -> None:
    store = reopen()
    won = []
    for r in range(rounds):
        seen = store.read("race/queue.json")
        barrier.wait()
        try:
            store.write_if_match("race/queue.json", f"{r}-{n}".encode(), seen.etag)
            won.append(r)
        except Conflict:
            pass
        barrier.wait()
    out.put((n, won))


class TestFileStore(StoreContract):
    @pytest.fixture()
    def store(self, tmp_path: Path) -> Iterator[ObjectStore]:
        yield FileStore(tmp_path / "store")

    @pytest.fixture()
    def reopen(self, tmp_path: Path) -> Callable[[], ObjectStore]:
        return lambda: FileStore(tmp_path / "store")

    def test_object_is_readable_as_a_plain_file(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        etag = store.create_if_absent("q/queue.json", b'{"x":1}')
        store.write_if_match("q/queue.json", b'{"x":2}', etag)
        assert (tmp_path / "q" / "queue.json").read_bytes() == b'{"x":2}'
        # old versions are removed, leaving one version file beside the link
        store.settle()
        versions = [p.name for p in (tmp_path / "q").iterdir() if ".v-" in p.name]
        assert len(versions) == 1

    def test_deleting_plain_objects_leaves_no_files(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        for n in range(3):
            store.put(f"q/staging/w1/c{n}.jsonl", b"x")
        for n in range(3):
            store.delete(f"q/staging/w1/c{n}.jsonl")
        assert list((tmp_path / "q" / "staging" / "w1").iterdir()) == []
        etag = store.create_if_absent("q/queue.json", b"1")
        store.delete("q/queue.json")
        with pytest.raises(NotFound):
            store.read("q/queue.json")
        assert store.create_if_absent("q/queue.json", b"2") != etag

    def test_writes_land_after_their_directory_is_removed(self, tmp_path: Path) -> None:
        # The store remembers the directories it made (no mkdir per write); one
        # removed behind its back (a cleanup of archive hours, say) is made again.
        store = FileStore(tmp_path)
        store.put("q/archive/h1/a.jsonl", b"a")
        store.create_if_absent("q2/queue.json", b"1")
        shutil.rmtree(tmp_path / "q")
        shutil.rmtree(tmp_path / "q2")
        store.put("q/archive/h1/b.jsonl", b"b")
        etag = store.create_if_absent("q2/queue.json", b"2")
        assert store.get("q/archive/h1/b.jsonl") == b"b"
        assert store.read("q2/queue.json").data == b"2"
        store.write_if_match("q2/queue.json", b"3", etag)
        assert (tmp_path / "q2" / "queue.json").read_bytes() == b"3"
        assert store.list("q/") == ["q/archive/h1/b.jsonl"]

    def test_head_reads_only_the_link(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = FileStore(tmp_path)
        etag = store.create_if_absent("q/queue.json", b"{}")

        def no_reading(self: Path) -> bytes:
            raise AssertionError(f"head opened {self}")

        monkeypatch.setattr(Path, "read_bytes", no_reading)
        assert store.head("q/queue.json") == etag

    def test_hidden_key_parts_are_refused(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidRequest):
            store.put("a/.hidden", b"x")  # the store's own version and lock files


class TestS3Store(StoreContract):
    process_race_rounds = 25  # each round is 8 HTTP requests to the moto server

    @pytest.fixture()
    def store(self, s3_url: str) -> Iterator[ObjectStore]:
        store = store_from_url(s3_url)
        yield store
        store.close()

    @pytest.fixture()
    def reopen(self, s3_url: str) -> Callable[[], ObjectStore]:
        return lambda: store_from_url(s3_url)

    def test_head_sends_a_head_request(self, store: ObjectStore) -> None:
        assert isinstance(store, S3Store)
        etag = store.create_if_absent("q/queue.json", b"x" * 100_000)
        methods: list[str] = []
        store._client.meta.events.register(
            "before-send.s3", lambda request, **_: methods.append(request.method))
        assert store.head("q/queue.json") == etag
        assert methods == ["HEAD"]

    def test_url_shows_no_credentials(self, s3_bucket: str) -> None:
        store = S3Store(s3_bucket, "p", endpoint_url="http://user:secret@127.0.0.1:1")
        assert "secret" not in store.url and "secret" not in repr(store)


class TestAzureStore(StoreContract):
    """Azurite, started once per session by the ``azurite_server`` fixture."""

    process_race_rounds = 100  # each round is 8 HTTP requests to Azurite

    @pytest.fixture()
    def store(self, azure_url: str) -> Iterator[ObjectStore]:
        store = store_from_url(azure_url)
        yield store
        store.close()

    @pytest.fixture()
    def reopen(self, azure_url: str) -> Callable[[], ObjectStore]:
        return lambda: store_from_url(azure_url)


class TestGCSStore(StoreContract):
    """GCS over its JSON API: the official client against our test server
    (``tests.support.gcsserver``), which enforces ifGenerationMatch."""

    process_race_rounds = 25

    @pytest.fixture()
    def store(self, gcs_url: str) -> Iterator[ObjectStore]:
        store = store_from_url(gcs_url)
        yield store
        store.close()

    @pytest.fixture()
    def reopen(self, gcs_url: str) -> Callable[[], ObjectStore]:
        return lambda: store_from_url(gcs_url)


@pytest.mark.parametrize(
    "make",
    [lambda: Conflict("x"), lambda: NotFound("y"), lambda: UnsafeStore("z")],
)
def test_storage_errors_pickle(make: Callable[[], Exception]) -> None:
    err = make()
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_writes_accept_chunks(kind: str, tmp_path: Path) -> None:
    store: ObjectStore = MemoryStore() if kind == "memory" else FileStore(tmp_path)
    chunks = [b"a" * 7, b"", b"b" * 5000] + [b"c"] * 3000  # more than IOV_MAX pieces
    etag = store.create_if_absent("k", chunks)
    assert store.read("k").data == b"".join(chunks)
    store.write_if_match("k", [b"x", b"y"], etag)
    assert store.read("k").data == b"xy"
