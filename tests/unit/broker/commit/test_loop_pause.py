"""The commit loop's retries wait on its ``pause`` (broker/commit/loop.py,
:class:`broker.retry.Pause`) and count ``commit_timeout_s`` on its clock: with
the waits skipped (tests/support/pause.py), a batch on failing storage gives up
after the same backoff, in no wall time, and the store holds what landed only."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.errors import OsqueueError
from broker.model.ops import NewJob
from broker.storage import FileStore
from tests.support.faults import NOT_LANDED, FaultyStore
from tests.support.inprocess import payloads, run, started
from tests.support.pause import SkippedPause


def test_a_batch_on_failing_storage_gives_up_after_commit_timeout_s_on_the_pause(
        tmp_path: Path) -> None:
    """30 s of commit time on writes that never land: the retries' backoff (20 ms
    doubling to 2 s, jittered) is skipped, so the batch gives up at once in wall
    time (the run's 15 s bound fails a loop that counted real time), after as much
    backoff as commit_timeout_s; the next push, storage healed, lands."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    pause = SkippedPause()

    async def main() -> None:
        a = await started(store, pause=pause, commit_timeout_s=30.0)
        await a.push("q", [NewJob(orjson.dumps({"n": 1}))])
        before = inner.get("q/queue.json")
        store.inject("write_if_match", NOT_LANDED, key_contains="q/queue.json", times=None)
        with pytest.raises(OsqueueError) as failed:
            await a.push("q", [NewJob(orjson.dumps({"n": 2}))])
        assert failed.value.retryable, failed.value
        assert inner.get("q/queue.json") == before  # nothing landed
        # the waits it skipped: the backoff schedule, up to about commit_timeout_s
        assert len(pause.slept) >= 10 and 28.0 <= sum(pause.slept) <= 33.0, pause.slept
        store.heal()
        await a.push("q", [NewJob(orjson.dumps({"n": 3}))])
        await a.stop(5)

    run(main(), timeout_s=15)
    # what was acknowledged is there once; the refused push is not
    assert payloads(inner) == [{"n": 1}, {"n": 3}]
