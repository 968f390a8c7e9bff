"""A corrupt claim record (format version 5) met by a running broker and by a
starting one: refused as corrupt_state naming the object, never overwritten
(the bytes are checked after), and the queue serves again once it is fixed."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import paths
from broker.errors import OsqueueError
from broker.model.ops import CompleteItem, NewJob
from broker.storage import FileStore
from tests.support.inprocess import run, started

# (find, replace) pairs, each on the head two claims (fences 1-2 and 3) over four jobs leave
CORRUPTIONS = {
    "record_names_a_pending_line": [(b'"parts":[{"seq":[3,1]}]', b'"parts":[{"seq":[4,1]}]')],
    "record_names_a_missing_line": [(b'"parts":[{"seq":[3,1]}]', b'"parts":[{"seq":[9,1]}]')],
    "overlapping_fences": [(b'{"fence":3,"n":1', b'{"fence":2,"n":1'),
                           (b'"claim":3}', b'"claim":2}')],
    "fence_above_counters": [(b'"fence":3,"completed"', b'"fence":2,"completed"')],
    "claimed_line_without_record": [(b'"claim":3}', b'"claim":7}')],
    "n_beyond_parts": [(b'{"fence":1,"n":2', b'{"fence":1,"n":3')],
    "settled_beyond_n": [(b'"parts":[{"seq":[1,2]}]', b'"parts":[{"seq":[1,2]}],"settled":[1,4]')],
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_corrupt_claim_record_is_refused_named_and_never_overwritten(
        tmp_path: Path, name: str) -> None:
    store = FileStore(tmp_path)
    key = paths.state_key("q")

    async def main() -> None:
        a = await started(store)
        await a.push("q", [NewJob(b"%d" % i) for i in range(4)])
        first = await a.claim("q", "w", 2, 30.0)
        await a.claim("q", "w", 1, 30.0)
        good = store.read(key)
        bad = good.data
        for find, replace in CORRUPTIONS[name]:
            assert bad.count(find) == 1, find
            bad = bad.replace(find, replace)
        store.write_if_match(key, bad, good.etag)
        for attempt in (a.push("q", [NewJob(b"x")]),
                        a.complete("q", [CompleteItem(first[0].token)])):
            with pytest.raises(OsqueueError) as info:  # the CAS fails, the re-read refuses
                await attempt
            assert info.value.code == "corrupt_state", info.value
            assert "q/queue.json" in str(info.value), info.value
            assert store.read(key).data == bad  # untouched
        await a.stop(drain_s=2)
        with pytest.raises(OsqueueError) as info:
            b = await started(store, url="http://b")
            await b.push("q", [NewJob(b"y")])
        assert info.value.code == "corrupt_state", info.value
        assert store.read(key).data == bad

    run(main())
