"""A claim or heartbeat of a queue that does not exist is refused (404
``unknown_queue``, naming it) and changes nothing, unless the claim asks to
``wait_for_queue``. What "exists" means: the queue has an object (made by its
first push, or by configure); a purged queue still has it; a queue another
broker serves exists (the client is sent there)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import urllib3

from broker.errors import NotTheBroker, PayloadTooLarge, UnknownQueue
from broker.model.ops import NewJob
from broker.storage import FileStore
from osqueue_spark import start_broker
from tests.support.inprocess import run, started
from tests.support.store_files import store_files


@pytest.fixture()
def broker_url(tmp_path: Path) -> Iterator[str]:
    with start_broker(f"file://{tmp_path}") as b:
        yield b.url


def post(url: str, body: object) -> urllib3.BaseHTTPResponse:
    return urllib3.request("POST", url, body=orjson.dumps(body),
                           headers={"content-type": "application/json"})


def test_claim_and_heartbeat_of_a_missing_queue_are_404_and_write_nothing(
        broker_url: str, tmp_path: Path) -> None:
    before = store_files(tmp_path)  # (no queue: no head whose lease the broker renews)
    for wait_s in (0, 0.2):  # a long poll too: a typo must not idle for wait_s
        r = post(f"{broker_url}/v1/queues/reel/claim", {"worker": "w", "wait_s": wait_s})
        assert r.status == 404, r.data
        body = r.json()
        assert body["code"] == "unknown_queue"
        assert "queue 'reel' does not exist" in body["error"]
        assert "wait_for_queue" in body["error"]
    r = post(f"{broker_url}/v1/queues/reel/heartbeat", {"tokens": ["t"]})
    assert r.status == 404 and r.json()["code"] == "unknown_queue"
    assert store_files(tmp_path) == before


def test_a_claim_that_waits_for_its_queue_gets_no_jobs_and_writes_nothing(
        broker_url: str, tmp_path: Path) -> None:
    before = store_files(tmp_path)
    r = post(f"{broker_url}/v1/queues/later/claim",
             {"worker": "w", "wait_s": 0.2, "wait_for_queue": True})
    assert r.status == 200 and r.json() == {"jobs": []}
    assert store_files(tmp_path) == before
    r = post(f"{broker_url}/v1/queues/later/claim", {"worker": "w", "wait_for_queue": "yes"})
    assert r.status == 422 and "wait_for_queue" in r.json()["error"]
    assert store_files(tmp_path) == before


def test_queues_that_exist_answer_claims(tmp_path: Path) -> None:
    """Configured (no push yet), purged, and served by another broker: each exists."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a")
        b = await started(store, "http://b")
        try:
            await a.create_queue("configured", {"max_attempts": 2})
            assert list(await a.claim("configured", "w")) == []
            await a.push("purged", [NewJob(b"1")])
            await a.purge("purged")
            assert list(await a.claim("purged", "w")) == []
            await a.push("owned", [NewJob(b"1")])
            with pytest.raises(NotTheBroker):  # the client follows it to the owner
                await b.claim("owned", "w")
        finally:
            await b.stop(drain_s=5)
            await a.stop(drain_s=5)

    run(main())


def test_a_queue_whose_first_push_was_refused_does_not_exist_for_claims(
        tmp_path: Path) -> None:
    """Its loop was made for the push (the broker serves it), but nothing was
    ever written: claims and heartbeats say so, as stats does."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a", default_settings={"max_payload_bytes": 16})
        try:
            with pytest.raises(PayloadTooLarge):
                await a.push("q", [NewJob(b'"far too large for a limit of sixteen bytes"')])
            assert a.served("q") is not None
            for call in (a.stats("q"), a.claim("q", "w", wait_s=0.1), a.heartbeat("q", ["t"])):
                with pytest.raises(UnknownQueue, match="queue 'q' does not exist"):
                    await call
            assert list(await a.claim("q", "w", wait_for_queue=True)) == []
        finally:
            await a.stop(drain_s=5)
        assert not [k for k in store.list("") if k.startswith("q/")]

    run(main())
