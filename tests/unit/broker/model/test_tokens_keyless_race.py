"""tokens.bind on an object without a token key, through the commit loop's
unknown outcomes: every load of such an object binds a fresh key in memory,
so a claim whose first write attempt's outcome is unknown is tagged with one
key by that attempt and another by its retry. The answer must carry the key
of the attempt that landed (the one in the object), or the worker's token is
refused as not valid and the job runs twice."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.model.ops import CompleteItem, NewJob
from broker.storage import FileStore
from tests.support.faults import LATE, NOT_LANDED, Clock, FaultyStore
from tests.support.inprocess import run, started, stored


def _keyless(store: FileStore) -> None:
    """The queue object as a broker before token keys wrote it."""
    got = store.read(paths.state_key("q"))
    raw = orjson.loads(got.data)
    del raw["token_key"]
    store.write_if_match(paths.state_key("q"), orjson.dumps(raw), got.etag)


@pytest.mark.parametrize("fault", [NOT_LANDED, LATE])
def test_a_claim_on_a_keyless_object_answers_the_key_of_the_write_that_landed(
        tmp_path: Path, fault: str) -> None:
    """The claim's first write times out (never landing, or landing late, just
    before its retry is written): the token it answers completes the job on
    the next broker, which reads the key from the object."""
    inner = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        a = await started(inner, "http://a", clock)
        await a.push("q", [NewJob(b"1")])
        await a.stop(drain_s=5)
        _keyless(inner)
        store = FaultyStore(inner)
        b = await started(store, "http://b", clock)
        store.inject("write_if_match", fault)
        if fault == LATE:  # the late write lands just before the retry's
            store.inject("write_if_match", None, before=store.land_late)
        [held] = await b.claim("q", "w", lease_s=600)
        assert [f for _, f, _ in store.injected][:1] == [fault]
        await b.stop(drain_s=5)
        c = await started(inner, "http://c", clock)
        [answer] = await c.complete("q", [CompleteItem(held.token)])
        assert answer.ok, answer.reason
        await c.stop(drain_s=5)

    run(main())
    state = stored(inner)
    assert state.token_key and state.counters.completed == 1 and state.counters.fence == 1
