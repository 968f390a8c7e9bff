"""broker.service.queue_target deletes the objects a landed commit dropped when
the store's reply to that commit was lost: the commit loop re-reads the head,
finds its write landed, and reports the re-read state, which knows nothing of
the refs the write dropped; the target remembers them by commit id. Before,
those objects waited for the sweep's grace (600 s by default). And an attempt
that did NOT land deletes nothing: the head still references its objects.
In-process brokers on a file store; the faults are a lost reply (the write
landed; a 5xx or a 412 from the store's own retry) and a write that never
landed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from broker import paths
from broker.model.ops import CompleteItem
from broker.storage.files import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    bodies,
    run,
    segment_objects,
    started,
    stored,
    until,
)

QUEUE_KEY = paths.state_key("q")
# (no held claims: the claim that takes a segment's last job drops its ref)
CONFIG = {"segment_push_jobs": 10, "held_in_records": False}


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_segment_dropped_by_a_landed_claim_whose_reply_was_lost_is_deleted(
        tmp_path: Path, fault: str) -> None:
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def go() -> None:
        a = await started(store, clock=clock, **CONFIG)
        try:
            ids = await a.push("q", bodies(30))
            (ref,) = stored(inner).segment_refs
            assert segment_objects(inner) == [ref.key]
            store.inject("write_if_match", fault, key_contains=QUEUE_KEY)
            jobs = await a.claim("q", "w", 30, lease_s=60)
            assert ("write_if_match", fault, QUEUE_KEY) in store.injected
            assert sorted(j.id for j in jobs) == sorted(ids)
            assert stored(inner).segment_refs == []  # (the drop landed)
            await until(lambda: segment_objects(inner) == [])  # (not the sweep: no grace)
            done = await a.complete("q", [CompleteItem(j.token, None) for j in jobs])
            assert all(x.ok for x in done)
            await archived_and_dropped(a, inner, clock)
            assert Counter(r["id"] for r in archive_lines(inner)) == Counter(set(ids))
        finally:
            await a.stop(5)

    run(go())


def test_a_claim_whose_write_did_not_land_deletes_nothing(tmp_path: Path) -> None:
    """The claim's first write never lands (an error the loop cannot judge
    until it re-reads); its retry does: the segment goes once, after that retry
    landed, and not before: the head the first attempt was over still named it."""
    clock = Clock()
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    seen: list[list[str]] = []

    async def go() -> None:
        a = await started(store, clock=clock, **CONFIG)
        try:
            ids = await a.push("q", bodies(30))
            (ref,) = stored(inner).segment_refs
            store.inject("write_if_match", NOT_LANDED, key_contains=QUEUE_KEY)
            # (then, just before the retry's write: what is in the store)
            store.inject("write_if_match", None, key_contains=QUEUE_KEY,
                         before=lambda _key: seen.append(segment_objects(inner)))
            jobs = await a.claim("q", "w", 30, lease_s=60)
            assert ("write_if_match", NOT_LANDED, QUEUE_KEY) in store.injected
            assert seen == [[ref.key]]  # (kept: the first attempt had not landed)
            assert sorted(j.id for j in jobs) == sorted(ids)
            await until(lambda: segment_objects(inner) == [])
        finally:
            await a.stop(5)

    run(go())
