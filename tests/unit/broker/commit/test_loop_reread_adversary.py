"""Adversarial cases of the commit loop's re-reads after a write of the batch was
attempted (advfinal): a re-read that follows a possibly-landed attempt must
judge that attempt before the batch is applied again."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from broker.commit.loop import CommitLoop
from broker.errors import OsqueueError, OutcomeUnknown
from broker.storage import MemoryStore
from tests.support.commit_targets import Tally
from tests.support.faults import LATE, FaultyStore


@pytest.mark.xfail(strict=True, reason=(
    "advfinal: a prepare() refusal after a PENDING verdict re-reads at the top of "
    "_commit without judging the earlier attempts: one that landed meanwhile is "
    "applied again (the batch lands twice)"))
def test_a_late_attempt_landing_before_the_reread_of_a_refused_prepare_is_not_applied_twice(
        ) -> None:
    """A write times out (it lands later); the re-read finds it pending, so the
    batch is applied again; prepare() refuses that once, and the loop re-reads
    once more: meanwhile the first write landed. The batch must be answered from
    that attempt (or OutcomeUnknown), never applied a second time."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    target = Tally()

    async def main() -> object:
        executor = ThreadPoolExecutor(2)
        loop: CommitLoop[dict[str, Any], int | str, int] = CommitLoop(
            store, "t/tally.json", target, "w", executor, clock=lambda: 0)
        await loop.load()
        loop.reactivate()
        loop.start()
        assert await loop.submit(2) == 2
        store.inject("write_if_match", LATE, key_contains="tally.json")
        # the re-read after the timeout: the attempt is still pending; then
        # prepare() refuses once
        store.inject("read", None, key_contains="tally.json",
                     after=lambda _k: setattr(target, "refusals", 1))
        # the re-read for the refused prepare(): the late write has landed
        store.inject("read", None, key_contains="tally.json",
                     before=store.land_late)
        try:
            got: object = await loop.submit(3)
        except OsqueueError as exc:
            got = exc
        await loop.close(5)
        executor.shutdown()
        return got

    got = asyncio.run(main())
    total = orjson.loads(inner.get("t/tally.json"))["total"]
    assert total == 5, f"the 3 was added {(total - 2) // 3} times; answered {got!r}"
    assert got == 5 or isinstance(got, OutcomeUnknown), repr(got)
