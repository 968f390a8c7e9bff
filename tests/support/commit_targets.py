"""Toy commit targets (:class:`broker.commit.target.CommitTarget`) for the commit
loop's tests: the loop's contract without the queue's rules."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from broker.commit.loop import CommitLoop
from broker.errors import InvalidRequest, OsqueueError, StorageUnavailable
from broker.storage import ObjectStore


class Tally:
    """A toy :class:`broker.commit.target.CommitTarget`: an int tally in a JSON object.

    Ops: ``int`` adds it (result: the new total); ``"refuse"`` raises (nothing
    is written); ``"refuse-written"`` writes a note and answers an error once
    the write landed; ``"bug"`` raises a non-osqueue exception.
    """

    def decode(self, data: bytes) -> dict[str, Any]:
        state: dict[str, Any] = orjson.loads(data)
        return state

    def empty(self, now_ms: int) -> dict[str, Any]:
        return {"total": 0, "notes": 0, "seq": 0, "commit": None, "lineage": []}

    def apply(self, state: dict[str, Any], op: int | str,
              now_ms: int) -> tuple[int | OsqueueError, bool]:
        if op == "refuse":
            raise InvalidRequest("refused, nothing written")
        if op == "refuse-written":
            state["notes"] += 1
            return InvalidRequest("refused, and the refusal written"), True
        if op == "bug":
            raise ZeroDivisionError("a bug")
        assert isinstance(op, int)
        state["total"] += op
        return state["total"], True

    #: prepare() refuses this many more batches (then lets them apply)
    refusals = 0
    prepared = 0

    async def prepare(self, state: dict[str, Any], ops: Any, now_ms: int) -> None:
        self.prepared += 1
        if self.refusals:
            self.refusals -= 1
            raise StorageUnavailable("injected: what the batch needs cannot be read")

    async def before_write(self, state: dict[str, Any], now_ms: int) -> None:
        pass

    def housekeeping(self, state: dict[str, Any], now_ms: int, exists: bool) -> list[int | str]:
        return []

    def encode(self, state: dict[str, Any], writer: str, now_ms: int, commit: str) -> bytes:
        state["seq"] += 1
        state["commit"] = commit
        state["lineage"] = (state["lineage"] + [commit])[-8:]
        return orjson.dumps(state)

    def identity(self, state: dict[str, Any]) -> tuple[str | None, list[str]]:
        return state["commit"], state["lineage"]

    def seq(self, state: dict[str, Any]) -> int:
        return int(state["seq"])

    def may_write(self, state: dict[str, Any], owned: bool) -> OsqueueError | None:
        return None

    def committed(self, state: dict[str, Any]) -> None:
        pass

    def carry(self, dropped: dict[str, Any], fresh: dict[str, Any], now_ms: int) -> None:
        pass

    def next_timer_ms(self, state: dict[str, Any], now_ms: int) -> int | None:
        return None


TallyLoop = CommitLoop[dict[str, Any], int | str, int]


async def running_tally(store: ObjectStore, target: Tally,
                        key: str = "t/tally.json") -> tuple[TallyLoop, ThreadPoolExecutor]:
    """A commit loop over ``target`` at ``key`` (clock 0), loaded, taken over and
    started, with 2 committed: the loop and its executor (the caller shuts it down)."""
    executor = ThreadPoolExecutor(2)
    loop: TallyLoop = CommitLoop(store, key, target, "w", executor, clock=lambda: 0)
    await loop.load()
    loop.reactivate()
    loop.start()
    assert await loop.submit(2) == 2
    return loop, executor
