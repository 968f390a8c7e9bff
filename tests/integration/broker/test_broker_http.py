"""The broker as a real process over real sockets (file store), and in a thread on S3 (moto)."""

from __future__ import annotations

import json
import signal
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from broker import paths
from broker.errors import UnknownQueue
from broker.model.format import archive
from broker.model.format.decode import decode_state
from broker.storage import FileStore, store_from_url
from osqueue_spark import QueueClient, start_broker
from tests.support.broker_process import BrokerProcess, eventually

TOKEN = "s3cr3t-token-for-tests"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("broker-store")


@pytest.fixture(scope="module")
def broker_proc(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}", "--token-env", "OSQ_TEST_TOKEN",
                       env={"OSQ_TEST_TOKEN": TOKEN}) as proc:
        yield proc


def qname() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def client(broker_proc: BrokerProcess) -> QueueClient:
    return QueueClient(broker_proc.url, qname(), token=TOKEN, retry_s=10)


def raw(method: str, url: str, body: bytes | None = None, token: str | None = TOKEN,
        headers: dict[str, str] | None = None) -> urllib3.BaseHTTPResponse:
    h = {"content-type": "application/json", **(headers or {})}
    if token:
        h["authorization"] = f"Bearer {token}"
    return urllib3.request(method, url, body=body, headers=h, retries=False)


def run_workload(client: QueueClient, producers: int, consumers: int, per_producer: int) -> None:
    """Concurrent pushers and workers over real sockets; checks nothing lost or duplicated."""
    total = producers * per_producer
    pushed: dict[str, int] = {}
    done: list[str] = []
    lock = threading.Lock()

    def produce(p: int) -> None:
        for start in range(0, per_producer, 50):
            batch = [{"payload": {"p": p, "i": i}}
                     for i in range(start, min(per_producer, start + 50))]
            ids = client.push_many(batch)
            with lock:
                for job, jid in zip(batch, ids, strict=True):
                    assert jid not in pushed
                    pushed[jid] = job["payload"]["p"] * 1_000_000 + job["payload"]["i"]

    def consume(w: int) -> None:
        while True:
            with lock:
                if len(done) >= total:
                    return
            jobs = client.claim(f"w{w}", max_jobs=20, lease_s=60, wait_s=0.5)
            if not jobs:
                continue
            results = client.complete_many([(j.token, j.payload) for j in jobs])
            assert all(r.ok for r in results)
            with lock:
                done.extend(j.id for j in jobs)

    with ThreadPoolExecutor(producers + consumers) as pool:
        futures = [pool.submit(produce, p) for p in range(producers)]
        futures += [pool.submit(consume, w) for w in range(consumers)]
        for f in futures:
            f.result(timeout=300)
    assert len(done) == total == len(set(done))
    assert set(done) == set(pushed)
    stats = client.stats()
    assert stats["total"] == 0 and stats["completed_total"] == total


def test_many_clients_lose_and_duplicate_nothing(client: QueueClient, store_dir: Path) -> None:
    run_workload(client, producers=8, consumers=8, per_producer=250)
    records = eventually(lambda: (r := list(archive.read_all(FileStore(store_dir), client.queue)))
                         and len(r) == 2000 and r, what="2000 archived jobs")
    assert len({r["id"] for r in records}) == 2000


def test_archive_is_plain_json_lines(client: QueueClient, store_dir: Path) -> None:
    client.push({"hello": "archive"})
    job = client.claim("w")[0]
    client.complete(job.token, {"answer": 42})
    files = eventually(lambda: sorted((store_dir / client.queue / "archive").rglob("*.jsonl")),
                       what="the archive object, written after the commit")
    assert len(files) == 1
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert rows[0]["id"] == job.id and rows[0]["payload"] == {"hello": "archive"}
    assert rows[0]["result"] == {"answer": 42} and rows[0]["status"] == "completed"


def test_expired_lease_is_reclaimed_and_old_token_gets_409(client: QueueClient,
                                                          broker_proc: BrokerProcess) -> None:
    jid = client.push("slow")
    old = client.claim("w1", lease_s=0.2)[0]
    again = client.claim("w2", lease_s=30, wait_s=10)  # woken by the reclaim timer
    assert [j.id for j in again] == [jid] and again[0].attempt == 2
    url = f"{broker_proc.url}/v1/queues/{client.queue}"
    hb = raw("POST", f"{url}/heartbeat", orjson.dumps({"tokens": [old.token]}))
    assert hb.status == 409 and hb.json()["code"] == "stale_token"
    assert hb.json()["results"][0]["ok"] is False
    done = raw("POST", f"{url}/complete", orjson.dumps({"items": [{"token": old.token}]}))
    assert done.status == 409
    assert client.complete(again[0].token).ok


def test_fail_backoff_dead_redrive(broker_proc: BrokerProcess) -> None:
    client = QueueClient(broker_proc.url, qname(), token=TOKEN)
    client.create(max_attempts=2, backoff_base_s=0.05)
    jid = client.push({"poison": True})
    first = client.claim("w")[0]
    assert client.fail(first.token, "boom 1").status == "pending"
    second = client.claim("w", wait_s=10)[0]  # after the backoff
    assert second.attempt == 2
    assert client.fail(second.token, "boom 2").status == "dead"
    dead = client.jobs(status="dead")
    assert [j["id"] for j in dead] == [jid] and dead[0]["last_error"] == "boom 2"
    assert client.claim("w") == []
    assert client.redrive() == 1
    assert client.claim("w")[0].id == jid


def test_idempotency_keys_dedupe(client: QueueClient) -> None:
    a = client.push({"x": 1}, key="order-17")
    b = client.push({"x": 2}, key="order-17")
    assert a == b and client.stats()["total"] == 1


def test_priority_and_delay_order_claims(client: QueueClient) -> None:
    low = client.push("low")
    high = client.push("high", priority=10)
    delayed = client.push("delayed-high", priority=20, delay_s=0.3)
    assert [j.id for j in client.claim("w", 5)] == [high, low]
    assert [j.id for j in client.claim("w", 5, wait_s=10)] == [delayed]


def test_long_poll_claim_returns_when_a_job_is_pushed(client: QueueClient) -> None:
    started = threading.Event()
    got: list[object] = []

    def waiter() -> None:
        started.set()
        got.extend(client.claim("w", wait_s=30, wait_for_queue=True))  # (pushed to below)

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    jid = client.push("wake up")
    t.join(timeout=25)  # far below wait_s: only a wake-up on push ends it in time
    assert not t.is_alive()
    assert [j.id for j in got] == [jid]  # type: ignore[attr-defined]


def test_claim_on_missing_queue_is_refused_and_creates_nothing(client: QueueClient,
                                                               store_dir: Path) -> None:
    with pytest.raises(UnknownQueue, match=f"queue {client.queue!r} does not exist"):
        client.claim("w")
    assert client.claim("w", wait_for_queue=True) == []  # a worker before its producers
    assert not (store_dir / client.queue).exists()
    r = raw("GET", f"{client.url}/v1/queues/{client.queue}/stats")
    assert r.status == 404 and r.json()["code"] == "unknown_queue"


def test_auth_required(broker_proc: BrokerProcess) -> None:
    url = f"{broker_proc.url}/v1/queues/{qname()}/push"
    body = orjson.dumps({"jobs": [{"payload": 1}]})
    assert raw("POST", url, body, token=None).status == 401
    bad = raw("POST", url, body, token="wrong")
    assert bad.status == 401 and bad.json()["code"] == "unauthorized"
    assert TOKEN not in bad.data.decode()
    assert raw("GET", f"{broker_proc.url}/healthz", token=None).status == 200


def test_oversize_payload_is_413_and_changes_nothing(client: QueueClient) -> None:
    client.push("seed")
    big = orjson.dumps({"jobs": [{"payload": "x" * (300 * 1024)}]})
    r = raw("POST", f"{client.url}/v1/queues/{client.queue}/push", big)
    assert r.status == 413 and r.json()["code"] == "payload_too_large"
    assert client.stats()["total"] == 1


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"jobs": "nope"}', 422),
        (b'{"jobs": []}', 422),
        (b'{"jobs": [{"priority": 1}]}', 422),
        (b'{"jobs": [{"payload": 1, "priority": "high"}]}', 422),
        (b'{"jobs": [{"payload": 1, "delay_s": -5}]}', 422),
        (b'{"jobs": [{"payload": 1}, {"payload": 2, "max_attempts": 0}]}', 422),
        (b"[1, 2]", 422),
    ],
)
def test_bad_push_bodies_change_nothing(client: QueueClient, body: bytes, status: int) -> None:
    client.push("seed")
    before = client.stats()["seq"]
    r = raw("POST", f"{client.url}/v1/queues/{client.queue}/push", body)
    assert r.status == status, r.data
    assert set(r.json()) >= {"error", "code"}
    after = client.stats()
    assert after["total"] == 1 and after["seq"] == before


STAGED = {"content-type": "application/vnd.osqueue.staged"}


def test_push_of_staged_lines(client: QueueClient) -> None:
    body = b'\t{"a":1}\n{"priority":9,"key":"k1"}\t[2]\n{"key":"k1"}\t[3]\n'
    r = raw("POST", f"{client.url}/v1/queues/{client.queue}/push", body, headers=STAGED)
    assert r.status == 200, r.data
    ids = r.json()["ids"]
    assert len(ids) == 3 and ids[1] == ids[2]  # the key deduped the third line
    got = client.claim("w", max_jobs=5)
    assert [(j.id, j.payload) for j in got] == [(ids[1], [2]), (ids[0], {"a": 1})]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 422),
        (b"\t1", 422),
        (b"1\n", 422),
        (b"\t{not json\n", 422),
        (b'\t1\n{"priority":"high"}\t2\n', 422),
        (b'\t1\n{"colour":1}\t2\n', 422),
        (b'\t1\n\t"' + b"x" * (300 * 1024) + b'"\n', 413),
    ],
)
def test_bad_staged_push_bodies_change_nothing(client: QueueClient, body: bytes,
                                               status: int) -> None:
    client.push("seed")
    before = client.stats()["seq"]
    r = raw("POST", f"{client.url}/v1/queues/{client.queue}/push", body, headers=STAGED)
    assert r.status == status, r.data
    assert set(r.json()) >= {"error", "code"}
    after = client.stats()
    assert after["total"] == 1 and after["seq"] == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("claim", b'{"max_jobs": 1}'),
        ("claim", b'{"worker": "w", "max_jobs": "ten"}'),
        ("claim", b'{"worker": "w", "lease_s": -1}'),
        ("heartbeat", b'{"tokens": [1, 2]}'),
        ("complete", b'{"items": [{"result": 1}]}'),
        ("fail", b'{"items": [{"token": "t", "error": 5}]}'),
    ],
)
def test_bad_bodies_get_422(client: QueueClient, path: str, body: bytes) -> None:
    client.push("seed")
    r = raw("POST", f"{client.url}/v1/queues/{client.queue}/{path}", body)
    assert r.status == 422 and r.json()["code"] == "invalid_request"
    assert client.stats()["counts"]["pending"] == 1


def test_bad_queue_name_is_422(broker_proc: BrokerProcess) -> None:
    r = raw("POST", f"{broker_proc.url}/v1/queues/bad..name/push",
            orjson.dumps({"jobs": [{"payload": 1}]}))
    assert r.status == 422


def test_metrics_parse_and_hold_queue_and_process_figures(client: QueueClient) -> None:
    client.push(1)
    m = raw("GET", f"{client.url}/metrics")
    assert m.status == 200 and m.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(m.data.decode())
               for s in family.samples}
    q = client.queue
    assert samples[("osqueue_ops_total",
                    (("op", "push"), ("outcome", "ok"), ("queue", q)))] == 1
    assert samples[("osqueue_jobs", (("queue", q), ("status", "pending")))] == 1
    assert samples[("osqueue_state_bytes", (("queue", q),))] > 0
    assert samples[("osqueue_commit_seconds_count", ())] >= 1
    assert samples[("process_resident_memory_bytes", ())] > 0
    assert ("python_gc_collections_total", (("generation", "0"),)) in samples
    assert raw("GET", f"{client.url}/metrics", token=None).status == 401


def test_openapi_is_served_without_a_token(client: QueueClient) -> None:
    spec = raw("GET", f"{client.url}/openapi.json", token=None).json()
    assert "/v1/queues/{queue}/claim" in spec["paths"]
    assert spec["paths"]["/healthz"]["get"]["security"] == []


def test_pause_resume_purge(client: QueueClient) -> None:
    client.push_many([1, 2, 3])
    client.pause()
    assert client.claim("w") == [] and client.stats()["paused"] is True
    client.resume()
    assert len(client.claim("w")) == 1
    assert client.purge() == 2
    assert client.stats()["total"] == 1 and client.stats()["counts"]["claimed"] == 1


def test_corrupt_queue_object_refuses_start_and_stays_untouched(tmp_path: Path) -> None:
    qdir = tmp_path / "broken"
    qdir.mkdir()
    bad = b'{"format": "osqueue", "version": 1, "seq": 3, "jobs": [{"id": '
    (qdir / "queue.json").write_bytes(bad)
    proc = BrokerProcess(f"file://{tmp_path}").start(expect_ready=False)
    assert proc.wait(60) == 2
    assert "refusing to start" in proc.output and "broken/queue.json" in proc.output
    assert "not valid JSON" in proc.output
    assert (qdir / "queue.json").read_bytes() == bad


def test_newer_version_refuses_start(tmp_path: Path) -> None:
    (tmp_path / "future").mkdir()
    obj = b'{"format": "osqueue", "version": 7, "seq": 1}'
    (tmp_path / "future" / "queue.json").write_bytes(obj)
    proc = BrokerProcess(f"file://{tmp_path}").start(expect_ready=False)
    assert proc.wait(60) == 2 and "version 7" in proc.output
    assert (tmp_path / "future" / "queue.json").read_bytes() == obj


def test_sigterm_drains_and_clears_broker_record(tmp_path: Path) -> None:
    proc = BrokerProcess(f"file://{tmp_path}").start()
    client = QueueClient(proc.url, "drain")
    client.push_many(range(10))
    store = FileStore(tmp_path)
    record = orjson.loads(store.read(paths.state_key("drain")).data)["broker"]
    assert record is not None and record["url"] == proc.url
    assert proc.stop(signal.SIGTERM) == 0
    final = decode_state(store.read(paths.state_key("drain")).data)
    assert final.broker is None and len(final.jobs) == 10


def test_embedded_broker_on_s3(s3_url: str) -> None:
    with start_broker(s3_url) as broker:
        client = QueueClient(broker.url, "s3q")
        run_workload(client, producers=4, consumers=4, per_producer=100)
    store = store_from_url(s3_url)
    state = decode_state(store.read(paths.state_key("s3q")).data)
    assert state.broker is None and state.counters.completed == 400
    assert sum(1 for _ in archive.read_all(store, "s3q")) == 400
