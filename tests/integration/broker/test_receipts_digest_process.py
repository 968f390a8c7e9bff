"""A push's receipt keeps a digest of its jobs, over a real broker process: a push
under a request key whose receipt holds other jobs is answered 422
``request_key_reused`` and leaves the store byte-identical, whether it comes as
JSON, as staged lines, or big enough to go by reference (segment objects); a
true repeat (the same jobs, a client's retry after a lost answer) answers the
first push's ids, and the store holds each job once.

One broker on a file store with an hour's lease (no renewal writes while a test
compares the store) and pushes of five jobs or more by reference."""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from broker import paths
from broker.errors import RequestKeyReused
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from broker.wire import STAGED_CONTENT_TYPE
from osqueue_spark import QueueClient
from osqueue_spark.bodies import job_staged_line
from tests.support.broker_process import BrokerProcess
from tests.support.store_files import snapshot_dir
from tests.support.transports import DropReplyOf


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("digest-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}", "--lease-s", "3600",
                       "--segment-push-jobs", "5") as proc:
        yield proc


def payloads(store_dir: Path, queue: str) -> list[Any]:
    """The payloads of every job of ``queue``, in the head or its segments, by seq."""
    store = FileStore(str(store_dir))
    state = decode_state(store.read(paths.state_key(queue)).data)
    jobs = {job.seq: orjson.loads(job.payload) for job in state.jobs.values()}
    for ref in state.segment_refs:
        lines = store.read(ref.key).data.splitlines()[1:]  # (line 1: the header)
        jobs.update((ref.first_seq + k, orjson.loads(line)) for k, line in enumerate(lines))
    return [jobs[seq] for seq in sorted(jobs)]


def post(url: str, queue: str, body: bytes, key: str, content_type: str) -> tuple[int, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        conn.request("POST", f"/v1/queues/{queue}/push", body,
                     {"Content-Type": content_type, "Idempotency-Key": key})
        answer = conn.getresponse()
        return answer.status, orjson.loads(answer.read())
    finally:
        conn.close()


def json_body(jobs: list[Any]) -> bytes:
    return orjson.dumps({"jobs": [{"payload": job} for job in jobs]})


def staged_body(jobs: list[Any]) -> bytes:
    return b"".join(map(job_staged_line, jobs))


@pytest.mark.parametrize(("body", "content_type", "count"), [
    (json_body, "application/json", 2),
    (staged_body, STAGED_CONTENT_TYPE, 2),
    (json_body, "application/json", 6),  # by reference
    (staged_body, STAGED_CONTENT_TYPE, 6),  # by reference
], ids=["json", "staged", "json-by-reference", "staged-by-reference"])
def test_a_key_reused_for_other_jobs_is_refused_and_a_true_repeat_answered(
        broker: BrokerProcess, store_dir: Path, body: Any, content_type: str,
        count: int) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    monday = [{"day": "mon", "n": n} for n in range(count)]
    tuesday = [{"day": "tue", "n": n} for n in range(count)]
    status, first = post(broker.url, queue, body(monday), "orders", content_type)
    assert status == 200 and len(first["ids"]) == count
    assert payloads(store_dir, queue) == monday
    by_reference = bool(decode_state(FileStore(str(store_dir)).read(
        paths.state_key(queue)).data).segment_refs)
    assert by_reference == (count >= 5)
    before = snapshot_dir(store_dir)

    status, refused = post(broker.url, queue, body(tuesday), "orders", content_type)
    assert status == 422 and refused["code"] == "request_key_reused", refused
    assert "'orders' was used for other jobs" in refused["error"]
    assert snapshot_dir(store_dir) == before  # nothing written, no segment object either

    status, again = post(broker.url, queue, body(monday), "orders", content_type)
    assert (status, again) == (200, first)
    assert payloads(store_dir, queue) == monday


@pytest.mark.parametrize("count", [3, 7], ids=["inline", "by-reference"])
def test_a_retry_after_a_lost_answer_is_answered_and_each_job_is_stored_once(
        broker: BrokerProcess, store_dir: Path, count: int) -> None:
    """The client's own retry (the answer of the first batch dropped) sends the same
    bytes under the same key: answered from the receipt, not refused."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    jobs = [{"n": n} for n in range(2 * count)]
    client = QueueClient(broker.url, queue, retry_s=30, transport=DropReplyOf(1))
    try:
        ids = client.push_many(jobs, batch_size=count, request_key="nightly")
        assert len(set(ids)) == 2 * count
        assert payloads(store_dir, queue) == jobs
        with pytest.raises(RequestKeyReused, match=r"batch 0 of this push"):
            client.push_many([{"n": -1}, *jobs[1:]], batch_size=count, request_key="nightly")
        assert client.push_many(jobs, batch_size=count, request_key="nightly") == ids
        assert payloads(store_dir, queue) == jobs
    finally:
        client.close()


def test_a_repeat_whose_later_batch_holds_other_jobs_says_what_landed(
        broker: BrokerProcess, store_dir: Path) -> None:
    """Batch 0 a true repeat (answered), batch 1 other jobs: refused, and the error
    counts the jobs in the queue from this push (batch 0's)."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = QueueClient(broker.url, queue, retry_s=0)
    try:
        ids = client.push_many(list(range(4)), batch_size=2, request_key="k")
        with pytest.raises(RequestKeyReused, match="batch 1 of this push") as info:
            client.push_many([0, 1, 2, 9], batch_size=2, request_key="k")
        assert info.value.details["pushed"] == 2 and info.value.details["ids"] == ids[:2]
        assert payloads(store_dir, queue) == [0, 1, 2, 3]
    finally:
        client.close()
