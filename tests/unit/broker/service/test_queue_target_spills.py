"""broker.service.queue_target with spill objects referenced by a landed head
(``"spills"``): a broker that loads the head checks each one exists at its
etag; a missing one refuses the queue naming it, the head untouched; a present
one serves its counts from the reference."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.format.spill_refs import SpillRef, ref_to_json
from broker.model.job import DEAD
from broker.storage.files import FileStore
from tests.support.faults import Clock, FaultyStore
from tests.support.inprocess import bodies, crash, run, started, stored, successor
from tests.support.spill_objects import spilled, written

QUEUE_KEY = paths.state_key("q")


def _dead_spill(store: FaultyStore, seqs: range, *, write: bool) -> SpillRef:
    """A dead spill object of ``seqs`` (written to the store if ``write``) and
    its ref at the etag the store gave (or a made-up one)."""
    (obj, ref), = written(DEAD, [spilled(seq, attempts=1, max_attempts=1) for seq in seqs])
    if not write:
        return ref
    etag = store.inner.create_if_absent(ref.key, obj.data)
    return replace(ref, etag=etag)


def _reference(store: FaultyStore, refs: list[SpillRef]) -> None:
    """Make the landed head reference ``refs`` (what a commit of a broker with
    spills on would have written), its ids reserved."""
    got = store.inner.read(QUEUE_KEY)
    raw = orjson.loads(got.data)
    raw["spills"] = [ref_to_json(ref) for ref in refs]
    raw["counters"]["enqueued"] = max([raw["counters"]["enqueued"],
                                       *(ref.seqs[1] for ref in refs)])
    store.inner.write_if_match(QUEUE_KEY, orjson.dumps(raw), got.etag)


def test_a_missing_spill_object_is_refused_at_load_naming_it(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock)
        await a.push("q", bodies(3))
        await crash(a)
        present = _dead_spill(store, range(100, 110), write=True)
        missing = _dead_spill(store, range(200, 205), write=False)
        missing = replace(missing, key=missing.key.replace("-000000000042-", "-000000000043-"))
        _reference(store, [present, missing])
        before = store.read(QUEUE_KEY).data
        b = await successor(store, clock)
        with pytest.raises(OsqueueError) as err:
            await b.claim("q", "w", max_jobs=1)
        assert err.value.code == "segment_missing"
        assert missing.key in str(err.value) and "spill object" in str(err.value)
        assert store.read(QUEUE_KEY).data == before
        await b.stop()

    run(go())


def test_a_present_spill_object_loads_and_is_counted_from_its_ref(tmp_path: Path) -> None:
    clock = Clock()
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=clock)
        await a.push("q", bodies(3))
        await crash(a)
        ref = _dead_spill(store, range(100, 110), write=True)
        _reference(store, [ref])
        b = await successor(store, clock)
        assert len(await b.claim("q", "w", max_jobs=5)) == 3
        counts = (await b.stats("q"))["counts"]
        assert counts["dead"] == 10
        assert stored(store).spill_refs == [ref]  # kept by the commits since
        await b.stop()

    run(go())
