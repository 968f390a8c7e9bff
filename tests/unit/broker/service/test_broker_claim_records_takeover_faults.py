"""A takeover whose write has an unknown outcome (format version 5), then a
claim whose write faults on the new owner: the old owner's tokens still settle
their own positions, the new claim's tokens theirs, a settled position's token
is refused once its job is claimed again, and every job is once in the store."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.model.ops import CompleteItem, FailItem, NewJob
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import crash, run, started


def _head(store: FileStore) -> dict:  # type: ignore[type-arg]
    raw: dict = orjson.loads(store.read(paths.state_key("q")).data)  # type: ignore[type-arg]
    return raw


def _once(store: FileStore) -> None:
    head = _head(store)
    records = {r["fence"]: r for r in head["claims"]}
    ids = [j["id"] for j in head["jobs"]]
    assert len(ids) == len(set(ids))
    for j in head["jobs"]:
        assert (j["status"] == "claimed") == ("claim" in j), j
        if "claim" in j:
            r = records[j["claim"]]
            runs = [p["seq"][k:k + 2] for p in r["parts"] for k in range(0, len(p["seq"]), 2)]
            assert any(first <= j["seq"] < first + n for first, n in runs), (j, r["parts"])


@pytest.mark.parametrize("takeover_fault", [NOT_LANDED, LOST_REPLY, LOST_REPLY_412])
@pytest.mark.parametrize("claim_fault", [NOT_LANDED, LOST_REPLY, LOST_REPLY_412])
def test_tokens_of_both_owners_after_a_faulted_takeover_and_a_faulted_claim(
        tmp_path: Path, takeover_fault: str, claim_fault: str) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock_a = Clock()
    clock_b = Clock(clock_a.ms + 10_000)

    async def main() -> None:
        a = await started(inner, "http://a", clock_a, lease_s=5.0)
        await a.push("q", [NewJob(b"%d" % i) for i in range(6)])
        old = await a.claim("q", "w1", 4, 30.0)
        await a.release("q", [old[1].token])
        await crash(a)
        store.inject("write_if_match", takeover_fault, key_contains="q/queue.json")
        b = await started(store, "http://b", clock_b, lease_s=5.0)
        clock_b.advance(6)
        await b.watch()
        assert ("write_if_match", takeover_fault, "q/queue.json") in store.injected
        _once(inner)
        assert _head(inner)["broker"]["url"] == "http://b"
        store.inject("write_if_match", claim_fault, key_contains="q/queue.json")
        new = await b.claim("q", "w2", 3, 30.0, request="r-new")
        assert [j.id for j in new] == [old[1].id, "j0000000005", "j0000000006"]
        again = await b.claim("q", "w2", 3, 30.0, request="r-new")
        assert [j.token for j in again] == [j.token for j in new]
        _once(inner)
        # the released position's old token is refused; the new claim's works
        stale = await b.complete("q", [CompleteItem(old[1].token)])
        assert not stale[0].ok
        hb = await b.heartbeat("q", [old[0].token, new[0].token])
        assert hb
        done = await b.complete("q", [CompleteItem(old[0].token), CompleteItem(new[0].token)])
        assert [x.ok for x in done] == [True, True]
        repeat = await b.complete("q", [CompleteItem(old[0].token)])
        assert repeat[0].ok  # a repeat answers its receipt
        failed = await b.fail("q", [FailItem(old[2].token, "boom", 0)])
        assert failed[0].ok
        done = await b.complete("q", [CompleteItem(j.token) for j in (old[3], new[1], new[2])])
        assert all(x.ok for x in done)
        rest = await b.claim("q", "w3", 10, 30.0)
        assert [j.id for j in rest] == [old[2].id]
        assert (await b.complete("q", [CompleteItem(rest[0].token)]))[0].ok
        stale = await b.complete("q", [CompleteItem(old[2].token)])
        assert not stale[0].ok
        await b.stop(drain_s=5)

    run(main())
    head = _head(inner)
    assert head["claims"] == []
    assert head["counters"]["completed"] == 6
    assert all(j["status"] == "completed" for j in head["jobs"]) or not head["jobs"]
