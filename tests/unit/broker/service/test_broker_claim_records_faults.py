"""Claim records through storage faults (format version 5): a claim whose
commit's reply is lost is answered once, and its replay answers the same tokens
from the record; a takeover whose write has an unknown outcome renews each
record's lease once, on the new broker's clock. The store is checked after each."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import paths, timefmt
from broker.model.ops import CompleteItem, NewJob
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, Clock, FaultyStore
from tests.support.inprocess import crash, run, started


def _head(store: FileStore) -> dict:  # type: ignore[type-arg]
    raw: dict = orjson.loads(store.read(paths.state_key("q")).data)  # type: ignore[type-arg]
    return raw


@pytest.mark.parametrize("fault", [LOST_REPLY, LOST_REPLY_412])
def test_a_claim_whose_reply_was_lost_is_one_record_and_its_replay_answers_the_same_tokens(
        tmp_path: Path, fault: str) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()

    async def main() -> None:
        b = await started(store, clock=clock)
        await b.push("q", [NewJob(b"%d" % i) for i in range(5)])
        store.inject("write_if_match", fault, key_contains="q/queue.json")
        first = await b.claim("q", "w", 3, 30.0, request="r-claim-1")
        assert ("write_if_match", fault, "q/queue.json") in store.injected
        again = await b.claim("q", "w", 3, 30.0, request="r-claim-1")
        assert [j.token for j in again] == [j.token for j in first]
        assert [j.id for j in again] == ["j0000000001", "j0000000002", "j0000000003"]
        head = _head(inner)  # one claim landed, once: one record, three fences
        assert head["counters"]["fence"] == 3
        assert [(r["fence"], r["n"], r["parts"]) for r in head["claims"]] == [
            (1, 3, [{"seq": [1, 3]}])]
        assert [j["claim"] for j in head["jobs"] if j["status"] == "claimed"] == [1, 1, 1]
        done = await b.complete("q", [CompleteItem(j.token, None) for j in again])
        assert all(a.ok for a in done)
        await b.stop(drain_s=5)

    run(main())
    head = _head(inner)
    assert head["claims"] == [] and head["counters"]["completed"] == 3
    assert sorted(j["status"] for j in head["jobs"]) == ["pending", "pending"]


def test_a_takeover_with_an_unknown_outcome_renews_each_record_once(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + 3_600_000)  # another clock, an hour on

    async def main() -> None:
        a = await started(inner, "http://a", clock_a, lease_s=5.0)
        await a.push("q", [NewJob(b"%d" % i) for i in range(5)])
        big = await a.claim("q", "w1", 3, 30.0)
        small = await a.claim("q", "w2", 1, 60.0)
        await crash(a)
        before = _head(inner)
        assert [(r["fence"], r["n"]) for r in before["claims"]] == [(1, 3), (4, 1)]
        store.inject("write_if_match", LOST_REPLY, key_contains="q/queue.json")
        b = await started(store, "http://b", clock_b, lease_s=5.0)
        clock_b.advance(6)  # past a's broker lease, as b watched it
        await b.watch()
        assert ("write_if_match", LOST_REPLY, "q/queue.json") in store.injected
        now_b = clock_b.ms
        head = _head(inner)
        assert head["broker"]["url"] == "http://b"
        # one edit per record: each lease renewed from b's clock by its own length,
        # everything else of the record and every claimed line as they were
        assert [{**r, "expires_at": None} for r in head["claims"]] == \
            [{**r, "expires_at": None} for r in before["claims"]]
        assert [r["expires_at"] for r in head["claims"]] == [
            timefmt.fmt(now_b + 30_000), timefmt.fmt(now_b + 60_000)]
        claimed = [[j for j in h["jobs"] if j["status"] == "claimed"] for h in (before, head)]
        assert claimed[0] == claimed[1] and len(claimed[0]) == 4
        assert head["counters"] == before["counters"]
        stats = await b.stats("q")
        assert stats["reclaimed_total"] == 0 and stats["counts"]["claimed"] == 4
        beats = await b.heartbeat("q", [j.token for j in [*big, *small]], 30.0)
        assert all(r.ok for r in beats)
        await b.stop(drain_s=5)

    run(main())
    assert [r["n"] for r in _head(inner)["claims"]] == [3, 1]
