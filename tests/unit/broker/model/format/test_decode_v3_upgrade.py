"""Version-3 objects written by the broker before format version 4 (the model
of ``a2cffd1``, by ``fixtures/v3_a2cffd1/make.py``: every shape it could write)
load in today's broker, are written as version 5 with the same content (as their
version-4 spelling is), and serve every job: nothing lost, duplicated or stranded."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from broker import paths, wire
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import CompleteItem
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import archive_lines, run, started, stored
from tests.support.old_formats import as_old_jobs, as_v4

OLD = Path(__file__).resolve().parents[4] / "fixtures" / "v3_a2cffd1"
NAMES = sorted(p.stem for p in OLD.glob("*.json"))
T0 = 1_767_225_600_000  # the objects' clock (make.py's argument)


def test_every_old_shape_is_there() -> None:
    assert NAMES == ["all_archived", "completed_only", "empty", "mixed", "paused",
                     "untagged"]


@pytest.mark.parametrize("name", NAMES)
def test_decode_state_of_an_old_object_writes_it_as_version_5_unchanged(name: str) -> None:
    """The decoded object's next bytes are those of its version-4 spelling (the
    old bytes with version 4 and ``"segments":[]``), with every job as the old
    lines spelled it (the error history its ``last_error`` alone), and decode
    again to the same jobs."""
    old = (OLD / f"{name}.json").read_bytes()
    state = decode_state(old)
    assert state.segment_refs == []
    data = codec.encode(state)
    assert data == codec.encode(decode_state(as_v4(old)))
    assert as_old_jobs([j.to_plain() for j in decode_state(data).jobs.values()]) == \
        wire.loads(old)["jobs"]
    again = decode_state(data)
    assert [j.to_plain() for j in again.jobs.values()] == \
        [j.to_plain() for j in state.jobs.values()]
    assert again.counters == state.counters and again.receipts.to_plain() == \
        state.receipts.to_plain()


@pytest.mark.parametrize("name", NAMES)
def test_a_broker_serves_every_job_of_an_old_object_once(name: str, tmp_path: Path) -> None:
    """A broker takes the old object over (its record long expired), claims and
    completes every job (dead ones redriven, delayed ones once due, a paused
    queue resumed): the store then holds a version-4 object with no job left
    and an archive with every job of the old object exactly once."""
    old = (OLD / f"{name}.json").read_bytes()
    before = decode_state(old)
    store = FileStore(tmp_path)
    store.create_if_absent(paths.state_key("q"), old)
    clock = Clock(T0 + 3_600_000)

    async def main() -> None:
        b = await started(store, clock=clock)
        clock.advance(60)
        await b.watch()
        stats = await b.stats("q")
        want = before.count_by_status()
        del stats["counts"]["completed"], want["completed"]  # (may be archived by now)
        assert stats["counts"] == want
        await b.set_paused("q", False)
        await b.redrive("q")
        for _ in range(20):
            clock.advance(700)  # past every delay, backoff and old lease
            claimed = await b.claim("q", "w", 100, 30.0)
            if claimed:
                await b.complete("q", [CompleteItem(j.token, b"1") for j in claimed])
        await b._queues["q"].archiver.wait(10)
        await b.stop(drain_s=5)

    run(main())
    raw = orjson.loads(store.read(paths.state_key("q")).data)
    assert raw["version"] == 5 and raw["segments"] == [] and raw["claims"] == []
    after = stored(store)
    assert after.count_by_status() == dict.fromkeys(after.count_by_status(), 0)
    assert after.counters.enqueued == before.counters.enqueued
    ids = [rec["id"] for rec in archive_lines(store)]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(j.id for j in before.jobs.values())
    payloads = {rec["id"]: rec["payload"] for rec in archive_lines(store)}
    assert payloads == {j.id: json.loads(j.payload) for j in before.jobs.values()}
