"""How long the receipts of a call sent in several parts are kept (broker/model/
receipts.py, calls.py). A push of many batches, ``r-{client}-{n}``,
``r-{client}-{n}.1`` ..., may run longer than ``retry_ttl_s``; if it then ends
on an unknown outcome, its caller repeats the whole push with its key
(docs/guarantees.md), and each part that landed must be answered from its
receipt, not pushed again, however long ago the first part was sent. The
parts of a call age together: by its youngest part. Keys of another form age
one by one (``orders.1`` is not a part of ``orders``)."""

from __future__ import annotations

from pathlib import Path

from broker.model.ops import NewJob
from broker.storage import FileStore
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored

CALL = "r-0123456789ab-5"
PARTS = [CALL, f"{CALL}.1", f"{CALL}.2"]


def _job(i: int) -> list[NewJob]:
    return [NewJob(b'{"n":%d}' % i)]


def test_the_parts_of_a_call_longer_than_the_retry_ttl_are_kept_for_its_repeat(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        b = await started(store, "http://b", clock)
        first = []
        for i, key in enumerate(PARTS):  # one part every 400 s (retry_ttl_s is 600)
            first.append(list(await b.push("q", _job(i), request=key, floor=5)))
            clock.advance(400)
        assert set(PARTS) <= set(stored(store).receipts.requests)  # as written
        # the last part's answer was lost: the caller repeats the whole push
        again = [list(await b.push("q", _job(i), request=key)) for i, key in enumerate(PARTS)]
        assert again == first
        await b.stop(drain_s=5)

    run(main())
    assert sorted(j.payload for j in stored(store).jobs.values()) == \
        [b'{"n":0}', b'{"n":1}', b'{"n":2}']


def test_the_parts_of_a_call_go_together_once_its_youngest_is_past_the_retry_ttl(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        b = await started(store, "http://b", clock)
        for i, key in enumerate(PARTS):
            await b.push("q", _job(i), request=key, floor=5)
            clock.advance(400)
        clock.advance(201)  # the youngest part is 601 s old
        await b.push("q", _job(9), request="r-ffffffffffff-0", floor=0)  # (trims)
        assert not set(PARTS) & set(stored(store).receipts.requests)
        await b.stop(drain_s=5)

    run(main())


def test_keys_of_another_form_age_one_by_one(tmp_path: Path) -> None:
    """``orders.1`` and ``orders.2`` are two callers' keys, not parts of one
    call: a young one keeps no old one."""
    store = FileStore(tmp_path)
    clock = Clock()

    async def main() -> None:
        b = await started(store, "http://b", clock)
        for i, key in enumerate(["orders", "orders.1", "orders.2"]):
            clock.advance(400 if i else 0)
            await b.push("q", _job(i), request=key)
        clock.advance(1)  # "orders.2" is 1 s old, "orders.1" 401 s, "orders" 801 s
        await b.push("q", _job(9), request="other")  # (trims)
        assert list(stored(store).receipts.requests) == ["orders.1", "orders.2", "other"]
        await b.stop(drain_s=5)

    run(main())
