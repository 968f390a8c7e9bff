"""A redrive by id through an in-process broker redrives every listed dead
job, in however many spill objects they are (more than a page's MAX_WINDOWS),
once each, also when the reply of its commit is lost; the store then holds
each job once: pending in the head, or dead in a spill object."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import OutcomeUnknown
from broker.model import spill_compaction
from broker.model.job import PENDING
from broker.model.ops import FailItem, NewJob
from broker.model.state import MAX_WINDOWS
from broker.service.broker import Broker
from broker.storage.files import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, FaultyStore
from tests.support.inprocess import run, started, stored
from tests.support.spill_store import dead_everywhere

#: dead jobs spilled past one; pending ones (pushed with options) kept inline
DEAD_SPILLS = {"spill_jobs": 1, "spill_pending": False}

OBJECTS = MAX_WINDOWS + 4


@pytest.fixture(autouse=True)
def _no_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_compaction, "COMPACT_REFS", 1000)  # (one object per round, kept)


async def _rounds(broker: Broker, rounds: int, per: int = 2) -> list[list[str]]:
    """``rounds`` times: ``per`` jobs of one attempt pushed, claimed and failed
    (past spill_jobs 1: one dead object a round). Each round's ids."""
    out = []
    for r in range(rounds):
        ids = await broker.push("q", [NewJob(b'{"r":%d,"n":%d}' % (r, i), max_attempts=1)
                                      for i in range(per)])
        got = await broker.claim("q", "w", max_jobs=per)
        assert all(a.ok for a in await broker.fail(
            "q", [FailItem(j.token, "boom", 0) for j in got]))
        out.append(sorted(ids))
    return out


@pytest.mark.parametrize("fault", [None, LOST_REPLY, LOST_REPLY_412])
def test_a_redrive_by_ids_in_many_spill_objects_redrives_each_once(
        tmp_path: Path, fault: str | None) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, **DEAD_SPILLS)
        rounds = await _rounds(a, OBJECTS)
        assert len(stored(store).spill_refs) == OBJECTS
        wanted = sorted(ids[1] for ids in rounds)  # (one of each object)
        rest = sorted(ids[0] for ids in rounds)
        if fault is not None:
            store.inject("write_if_match", fault, key_contains="queue.json")
        try:
            assert await a.redrive("q", list(reversed(wanted))) == OBJECTS
        except OutcomeUnknown:
            assert fault == LOST_REPLY  # (the store says what landed)
        state = stored(store)
        assert sorted(j.id for j in state.jobs.touched() if j.status == PENDING) == wanted
        assert dead_everywhere(store) == rest
        assert await a.redrive("q", wanted) == 0  # (pending now: nothing more)
        got = await a.claim("q", "w2", max_jobs=100)
        assert sorted(j.id for j in got) == wanted
        await a.stop()

    run(go())
