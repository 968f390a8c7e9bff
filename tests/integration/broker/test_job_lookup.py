"""One job by id, wherever it is (``GET /v1/queues/{queue}/jobs/{id}``,
``Broker.job``, ``QueueClient.job``; broker.service.lookup): the queue object,
a segment object it references, or the archive, through a real broker process
and in process; a standby broker answers without moving the queue; refusals
change nothing in the store."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import urllib3

from broker import paths
from broker.errors import InvalidRequest, JobNotFound, UnknownQueue
from broker.model.ops import CompleteItem, FailItem
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.faults import Clock
from tests.support.inprocess import run, started, stored, until

BIG = 123456789012345678901234567890


def tree(root: Path) -> dict[str, bytes]:
    """Every object under ``root`` and its bytes, as the store shows them (not the
    file store's version files: an old version is deleted after the commit that
    replaced it, so a raw listing taken meanwhile shows one that then goes)."""
    store = FileStore(root)
    return {key: store.read(key).data for key in sorted(store.list(""))}


def test_a_job_is_found_wherever_it_is_over_http(tmp_path: Path) -> None:
    """Pending in the head and in a segment, claimed (no token shown), dead with
    its error, completed with its result exact and cancelled, both from the
    archive once they left the queue object. Today's main has no such route."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "10") as broker:
        client = QueueClient(broker.url, "q", retry_s=5)
        client.create(max_attempts=1)
        head = client.push_many([{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}])
        in_segment = client.push_many([{"s": i} for i in range(20)])
        assert stored(FileStore(tmp_path)).segment_refs  # (they went by reference)
        done, dead, held = client.claim("w-1", 3)
        assert [done.id, dead.id, held.id] == head[:3]
        client.complete(done.token, {"big": BIG})
        client.fail(dead.token, "boom: no such file")
        client.cancel([head[3]])

        job = client.job(in_segment[7])
        assert (job["location"], job["status"], job["payload"]) == ("segment", "pending",
                                                                    {"s": 7})
        job = client.job(held.id)
        assert (job["location"], job["status"], job["lease"]["worker"]) == (
            "queue", "claimed", "w-1")
        assert "token" not in job["lease"]
        job = client.job(dead.id)
        assert (job["status"], job["last_error"], job["attempts"]) == (
            "dead", "boom: no such file", 1)

        finished = eventually(lambda: client.job(done.id)["location"] == "archive" and
                              client.job(head[3])["location"] == "archive", what="archived")
        assert finished
        job = client.job(done.id)
        assert (job["status"], job["result"], job["worker"]) == ("completed", {"big": BIG},
                                                                 "w-1")
        assert job["payload"] == {"n": 0} and "token" not in job
        assert job["archive_key"].startswith("q/archive/")
        assert (tmp_path / job["archive_key"]).is_file()
        job = client.job(head[3])
        assert (job["status"], job["result"], job["location"]) == ("cancelled", None, "archive")
        # the raw answer: numbers exact, and no lease token anywhere
        http = urllib3.PoolManager()
        raw = http.request("GET", f"{broker.url}/v1/queues/q/jobs/{done.id}")
        assert raw.status == 200 and str(BIG).encode() in raw.data
        assert done.token.encode() not in raw.data and b'"token"' not in raw.data


def test_refused_lookups_say_why_and_change_nothing(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}") as broker:
        client = QueueClient(broker.url, "q", retry_s=5)
        ids = client.push_many([1, 2, 3])
        client.purge(["pending"])
        http = urllib3.PoolManager()
        before = tree(tmp_path)
        for path, status, code in (
                (f"q/jobs/{ids[1]}", 404, "job_not_found"),  # purged: nothing kept
                ("q/jobs/j0000000099", 404, "job_not_found"),  # never handed out
                ("q/jobs/nope", 422, "invalid_request"),
                ("q/jobs/j12", 422, "invalid_request"),
                ("never-made/jobs/j0000000001", 404, "unknown_queue")):
            got = http.request("GET", f"{broker.url}/v1/queues/{path}")
            body = orjson.loads(got.data)
            assert (got.status, body["code"]) == (status, code), (path, body)
            assert len(body["error"]) < 300
        assert "purged" in orjson.loads(http.request(
            "GET", f"{broker.url}/v1/queues/q/jobs/{ids[1]}").data)["error"]
        with pytest.raises(JobNotFound):
            client.job(ids[0])
        assert tree(tmp_path) == before


def test_a_standby_broker_finds_a_job_without_moving_the_queue(tmp_path: Path) -> None:
    """A broker that does not serve the queue reads the stored head, the segment
    that holds a pending job, and the archive; the owner stays the owner."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, "http://a", segment_push_jobs=10)
        b = await started(store, "http://b")
        try:
            inline = await a.push("q", [b'{"i":0}'])
            bulk = await a.push("q", [b'{"s":%d}' % i for i in range(30)])
            (job,) = await a.claim("q", "w", 1)
            await a.complete("q", [CompleteItem(job.token, b"[1]")])
            await until(lambda: not stored(store).completed and bool(
                store.list(paths.archive_prefix("q"))))
            before = stored(store)
            got = await b.job("q", inline[0])
            assert (got["location"], got["status"], orjson.loads(orjson.dumps(got["result"]))) \
                == ("archive", "completed", [1])
            got = await b.job("q", bulk[12])
            assert (got["location"], got["status"]) == ("segment", "pending")
            assert orjson.loads(orjson.dumps(got["payload"])) == {"s": 12}
            with pytest.raises(JobNotFound):
                await b.job("q", "j0000000999")
            with pytest.raises(InvalidRequest):
                await b.job("q", "x")
            with pytest.raises(UnknownQueue):
                await b.job("nothing-here", "j0000000001")
            assert b.served("q") is None and a.served("q") is not None
            after = stored(store)
            assert after.broker is not None and after.broker.id == a.id
            assert after.seq == before.seq  # (no write: a read never moves a queue)
        finally:
            await b.stop(5)
            await a.stop(5)

    run(main())


def test_a_dead_job_and_a_retried_one_show_their_last_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store, clock=Clock())
        try:
            await a.create_queue("q", {"max_attempts": 2})
            (jid,) = await a.push("q", [b"{}"])
            (job,) = await a.claim("q", "w", 1)
            await a.fail("q", [FailItem(job.token, "first", 0)])
            got = await a.job("q", jid)
            assert (got["status"], got["attempts"], got["last_error"]) == ("pending", 1, "first")
        finally:
            await a.stop(5)

    run(main())


def test_the_archive_object_named_for_a_finished_job_is_the_one_written(tmp_path: Path) -> None:
    """While a completed job awaits its archive object the answer names it; once
    written, the object has that name and holds the job."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        try:
            ids = await a.push("q", [b"1", b"2", b"3"])
            jobs = await a.claim("q", "w", 3)
            await a.complete("q", [CompleteItem(j.token, None) for j in jobs[::2]])
            named = {(await a.job("q", i))["archive_key"] for i in (ids[0], ids[2])}
            await until(lambda: not stored(store).completed)
            (key,) = named
            assert key.endswith(f"-{ids[0]}-{ids[2]}.jsonl") and os.path.isfile(tmp_path / key)
            assert store.list(paths.archive_prefix("q")) == [key]
        finally:
            await a.stop(5)

    run(main())
