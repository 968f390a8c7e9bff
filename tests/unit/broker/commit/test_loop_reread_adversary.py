"""Adversarial cases of the commit loop's re-reads after a write of the batch was
attempted (advfinal): a re-read that follows a possibly-landed attempt must
judge that attempt before the batch is applied again."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker.errors import (
    NotTheBroker,
    OsqueueError,
    OutcomeUnknown,
    StorageRefused,
    StorageUnavailable,
)
from broker.model.ops import NewJob
from broker.service.queue_target import QueueTarget
from broker.storage import FileStore, MemoryStore
from tests.support.commit_targets import Tally, TallyLoop, running_tally
from tests.support.faults import (
    LATE,
    LOST_REPLY,
    LOST_REPLY_412,
    NOT_LANDED,
    REFUSED,
    Clock,
    FaultyStore,
)
from tests.support.inprocess import crash, run, started, stored, successor


async def submit_3_then_land(loop: TallyLoop, executor: ThreadPoolExecutor,
                             store: FaultyStore) -> object:
    """Submit 3: its answer or the error raised; then land what is held back
    (if the loop did not), close the loop and its executor."""
    try:
        got: object = await loop.submit(3)
    except OsqueueError as exc:
        got = exc
    store.land_late()
    await loop.close(5)
    executor.shutdown()
    return got

def test_a_late_attempt_landing_before_the_reread_of_a_refused_prepare_is_not_applied_twice(
        ) -> None:
    """A write times out (it lands later); the re-read finds it pending, so the
    batch is applied again; prepare() refuses that once, and the first write
    lands before any further re-read. The batch must be answered from that
    attempt (or OutcomeUnknown), never applied a second time (it was, when the
    refusal's re-read at the top of _commit did not judge the attempt)."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    target = Tally()

    async def main() -> object:
        loop, executor = await running_tally(store, target)
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
        store.land_late()  # (if the loop did not re-read, it lands now)
        await loop.close(5)
        executor.shutdown()
        return got

    got = asyncio.run(main())
    total = orjson.loads(inner.get("t/tally.json"))["total"]
    assert total == 5, f"the 3 was added {(total - 2) // 3} times; answered {got!r}"
    assert got == 5 or isinstance(got, OutcomeUnknown), repr(got)


@pytest.mark.parametrize("keyed", [
    False,  # (enqueued twice before: the re-read did not judge the landed attempt)
    True,  # (held before too: the receipt of the landed attempt answers the repeat)
])
def test_a_push_whose_late_attempt_lands_before_a_refused_prepares_reread_is_enqueued_once(
        tmp_path: Path, keyed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue's own target: the push's write times out (it lands later), the
    re-read finds it pending, prepare() (a segment read, say) refuses once, and
    the first write lands before the loop's second re-read. The store holds the
    job once, whatever the push was answered."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    armed = {"n": 0}
    real = QueueTarget.prepare

    async def prepare(self, state, ops, now_ms):  # type: ignore[no-untyped-def]
        if armed["n"]:
            armed["n"] -= 1
            raise StorageUnavailable("injected: a segment could not be read")
        return await real(self, state, ops, now_ms)

    monkeypatch.setattr(QueueTarget, "prepare", prepare)

    async def main() -> object:
        a = await started(store)
        await a.push("q", [NewJob(b'"a"')])
        store.inject("write_if_match", LATE, key_contains="q/queue.json")
        store.inject("read", None, key_contains="q/queue.json",
                     after=lambda _k: armed.__setitem__("n", 1))
        store.inject("read", None, key_contains="q/queue.json", before=store.land_late)
        try:
            got: object = await a.push("q", [NewJob(b'"b"')],
                                       request="r-0123456789ab-0" if keyed else None,
                                       floor=0 if keyed else None)
        except OsqueueError as exc:
            got = exc
        await a.stop(drain_s=5)
        return got

    got = run(main())
    copies = sorted(j.id for j in stored(inner).jobs.values() if j.payload == b'"b"')
    assert len(copies) == 1, f"the push was answered {got!r}; the queue holds it as {copies}"
    assert got == copies or isinstance(got, OutcomeUnknown), repr(got)


def test_a_keyed_push_answered_unknown_for_a_refused_reread_is_retried_at_a_successor(
        tmp_path: Path) -> None:
    """The push's head write lands (its reply lost); the re-read is refused, and
    stays refused: the push is answered OutcomeUnknown, and the broker can no
    longer read its queue. A successor takes the queue over once the lease
    lapsed; the client repeats the push there under its request key: it gets
    the ids that landed, and the queue holds the job once. Meanwhile the refused
    broker, healed, steps down instead of writing."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    key = "r-0123456789ab-0"

    async def main() -> tuple[object, list[str], object]:
        a = await started(store, clock=clock)
        await a.push("q", [NewJob(b'"a"')])
        store.inject("write_if_match", LOST_REPLY, key_contains="q/queue.json")
        store.inject("read", REFUSED, key_contains="q/queue.json", times=None)
        try:
            got: object = await a.push("q", [NewJob(b'"b"')], request=key, floor=0)
        except OsqueueError as exc:
            got = exc
        b = await successor(inner, clock)
        again = await b.push("q", [NewJob(b'"b"')], request=key, floor=0)
        store.heal()
        try:
            late: object = await a.push("q", [NewJob(b'"c"')])
        except OsqueueError as exc:
            late = exc
        await b.stop(drain_s=5)
        await crash(a)
        a._executor.shutdown()
        return got, again, late

    got, again, late = run(main())
    assert isinstance(got, OutcomeUnknown), repr(got)
    jobs = stored(inner).jobs.values()
    copies = [j.id for j in jobs if j.payload == b'"b"']
    assert copies == again
    assert isinstance(late, NotTheBroker), repr(late)
    assert not [j for j in jobs if j.payload == b'"c"']


def test_a_refused_prepare_after_a_pending_attempt_answers_unknown_then_heals() -> None:
    """The write times out (it lands later), the re-read finds it pending,
    prepare() refuses the re-application: the batch is answered OutcomeUnknown,
    not the refusal (that says nothing was written). The late write lands; the
    next call's read is refused (answered so: nothing of it written), then the
    refusal heals: the tally holds each call once."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    target = Tally()

    async def main() -> tuple[object, int]:
        loop, executor = await running_tally(store, target)
        store.inject("write_if_match", LATE, key_contains="tally.json")
        store.inject("read", None, key_contains="tally.json",
                     after=lambda _k: setattr(target, "refusals", 1))
        try:
            got: object = await loop.submit(3)
        except OsqueueError as exc:
            got = exc
        assert store.land_late() == 1
        store.inject("read", REFUSED, key_contains="tally.json")
        with pytest.raises(StorageRefused):
            await loop.submit(10)
        after = await loop.submit(10)
        await loop.close(5)
        executor.shutdown()
        return got, after

    got, after = asyncio.run(main())
    assert isinstance(got, OutcomeUnknown), repr(got)
    assert after == 15 and orjson.loads(inner.get("t/tally.json"))["total"] == 15


@pytest.mark.parametrize(("first", "second", "reread_refused"), [
    (NOT_LANDED, LOST_REPLY, True),
    (LATE, LOST_REPLY, True),
    (LATE, NOT_LANDED, True),
    (LATE, REFUSED, False),
    (LOST_REPLY_412, None, False),
])
def test_several_attempts_then_a_refusal_answer_what_landed_or_unknown(
        first: str, second: str | None, reread_refused: bool) -> None:
    """A batch written more than once (the first write's outcome unknown, the
    re-read finding it pending), then refused (the second re-read, or the second
    write): never answered the refusal while an attempt may land. Every late
    write landed afterwards, the tally holds the call at most once, exactly
    once if it was answered a total."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    target = Tally()

    async def main() -> object:
        loop, executor = await running_tally(store, target)
        store.inject("write_if_match", first, key_contains="tally.json")
        if second is not None:
            store.inject("write_if_match", second, key_contains="tally.json")  # (the 2nd)
        if reread_refused:
            store.inject("read", REFUSED, nth=2, key_contains="tally.json")
        try:
            got: object = await loop.submit(3)
        except OsqueueError as exc:
            got = exc
        assert len(store.injected) == 1 + (second is not None) + reread_refused
        store.land_late()
        await loop.close(5)
        executor.shutdown()
        return got

    got = asyncio.run(main())
    total = orjson.loads(inner.get("t/tally.json"))["total"]
    assert total in (2, 5), total
    if isinstance(got, OsqueueError):
        assert isinstance(got, OutcomeUnknown) or total == 2, (repr(got), total)
    else:
        assert got == 5 and total == 5, (got, total)



def test_a_loop_reactivated_mid_commit_does_not_apply_a_pending_attempt_twice() -> None:
    """A write times out (it lands later) and the re-read finds it pending, so
    the batch is applied again; meanwhile the loop is reactivated (its state
    dropped, as a takeover signal does) and the first write lands. The re-read
    at the top of _commit that follows must not apply the batch over its own
    landed copy: answered from that attempt or OutcomeUnknown, the 3 added once."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    holder: list[Any] = []

    class Reactivating(Tally):
        async def prepare(self, state: dict[str, Any], ops: Any, now_ms: int) -> None:
            await super().prepare(state, ops, now_ms)
            if self.prepared == 3:  # (the batch's second pass, after the pending re-read)
                store.land_late()
                holder[0].reactivate()

    target = Reactivating()

    async def main() -> object:
        loop, executor = await running_tally(store, target)
        holder.append(loop)
        store.inject("write_if_match", LATE, key_contains="tally.json")
        return await submit_3_then_land(loop, executor, store)

    got = asyncio.run(main())
    total = orjson.loads(inner.get("t/tally.json"))["total"]
    assert target.prepared >= 3  # (the reactivation happened mid-commit)
    assert total == 5, f"the 3 was added {(total - 2) // 3} times; answered {got!r}"
    assert got == 5 or isinstance(got, OutcomeUnknown), repr(got)
