"""Parts of one call (broker/model/calls.py, receipts.py): a push sent in several batches keys
them ``r-{client}-{n}``, ``r-{client}-{n}.1``, ``r-{client}-{n}.2`` ... Each part
has its own receipt, and for the client's floor they are the one call ``n``: a
floor past ``n`` drops every part's receipt at once (the object stays small) and
refuses a late copy of any part; a floor at ``n`` keeps them, so the whole call
can be repeated and answers every part's ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import InvalidRequest
from broker.model import calls
from broker.model.ops import NewJob
from broker.storage import FileStore
from tests.support.inprocess import run, started, stored

CLIENT = "r-0123456789ab"


def test_client_of_reads_a_part_as_its_call() -> None:
    assert calls.client_of(f"{CLIENT}-7") == (CLIENT, 7)
    assert calls.client_of(f"{CLIENT}-7.3") == (CLIENT, 7)
    for other in (f"{CLIENT}-7.", f"{CLIENT}-7.x", f"{CLIENT}-.3", f"{CLIENT}-7.3.1",
                  f"{CLIENT}-7.{'9' * 19}", "p-abc-7.3", "order-42"):
        assert calls.client_of(other) is None, other


@pytest.mark.parametrize("floor", [5, 6])
def test_a_floor_past_a_call_drops_all_its_parts(tmp_path: Path, floor: int) -> None:
    store = FileStore(tmp_path)
    parts = [f"{CLIENT}-5", f"{CLIENT}-5.1", f"{CLIENT}-5.2"]

    async def main() -> None:
        b = await started(store, "http://b")
        first = [list(await b.push("q", [NewJob(b'{"n":%d}' % i)], request=key, floor=5))
                 for i, key in enumerate(parts)]
        assert sorted(stored(store).receipts.requests) == parts
        await b.push("q", [NewJob(b'"next"')], request=f"{CLIENT}-6", floor=floor)
        kept = stored(store).receipts.requests
        if floor == 5:  # call 5 still awaits its answer: every part is kept and replays
            assert set(parts) <= set(kept)
            again = [list(await b.push("q", [NewJob(b'{"n":%d}' % i)], request=key))
                     for i, key in enumerate(parts)]
            assert again == first
        else:  # answered: every part's receipt went, and a late copy of one is refused
            assert not set(parts) & set(kept)
            with pytest.raises(InvalidRequest, match="answered before"):
                await b.push("q", [NewJob(b'{"n":1}')], request=parts[1])
        await b.stop(drain_s=5)

    run(main())
    # each job once, whatever was repeated
    assert sorted(j.payload for j in stored(store).jobs.values()) == \
        [b'"next"', b'{"n":0}', b'{"n":1}', b'{"n":2}']
