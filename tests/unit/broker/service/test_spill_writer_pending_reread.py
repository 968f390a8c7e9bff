"""The pending spill rule (spill_pending, on by default) across a re-read of
the head: plain pushed jobs (no options, never retried or released) are not
candidates before it, and must not become candidates after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import OsqueueError
from broker.model.ops import NewJob
from broker.storage.files import FileStore
from tests.support.faults import LOST_REPLY, Clock, FaultyStore
from tests.support.inprocess import run, started, stored


@pytest.mark.xfail(strict=True, reason="open: a re-read head's plain pushed jobs are decoded "
                   "as job objects and spill as pending (left for the lead, see report)")
def test_plain_pushed_jobs_do_not_spill_as_pending_after_a_reread(tmp_path: Path) -> None:
    store = FaultyStore(FileStore(tmp_path))

    async def go() -> None:
        a = await started(store, clock=Clock(), spill_jobs=1)
        await a.push("q", [NewJob(b'{"n":%d}' % i) for i in range(3)])
        assert stored(store).spill_refs == []  # (plain jobs: no candidates)
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
        try:
            await a.push("q", [NewJob(b'{"lost":1}')])
        except OsqueueError:
            pass  # (an unknown outcome: the commit loop re-reads the head)
        store.heal()
        await a.push("q", [NewJob(b'{"after":1}')])
        assert stored(store).spill_refs == []
        await a.stop()

    run(go())
