"""The API's gate on a real broker process without a token, over real sockets: a
request addressed to another host name (DNS rebinding) is refused with no data,
a state-changing request without the JSON content type too, the connection
closed; our own clients, given loopback names or the advertised one, work.

Each refusal leaves the store byte-identical (every object's etag and bytes).
"""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from broker.http.server import BrokerServer
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.store_files import snapshot_dir

PAYLOAD = "process-gate-payload-51b2"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate-store")


@pytest.fixture(scope="module")
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    # no token; an hour's broker lease: no renewal writes while a test compares the store
    with BrokerProcess(f"file://{store_dir}", "--lease-s", "3600") as proc:
        yield proc


def raw(url: str, method: str, path: str, host: str, body: bytes | None = None,
        content_type: str | None = None) -> tuple[int, bytes, http.client.HTTPMessage]:
    """One request to the broker at ``url`` with ``Host: host``, as a client sends it."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host)
        if content_type is not None:
            conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        answer = conn.getresponse()
        return answer.status, answer.read(), answer.headers
    finally:
        conn.close()


def victim(broker: BrokerProcess) -> tuple[QueueClient, str]:
    """A queue of three jobs, one claimed for an hour; and that lease's token."""
    client = QueueClient(broker.url, f"victim-{uuid.uuid4().hex[:8]}")
    client.push_many([{"p": PAYLOAD, "n": n} for n in range(3)])
    (job,) = client.claim("worker", lease_s=3600)
    return client, job.token


def test_a_rebinding_host_gets_403_and_no_data_on_every_route(broker: BrokerProcess,
                                                              store_dir: Path) -> None:
    client, token = victim(broker)
    port = urlsplit(broker.url).port
    q = f"/v1/queues/{client.queue}"
    status, body, _ = raw(broker.url, "GET", f"{q}/jobs?tokens=true", f"127.0.0.1:{port}")
    assert status == 200 and PAYLOAD.encode() in body and token.encode() in body  # (control)
    before = snapshot_dir(store_dir)
    for host in (f"evil.example:{port}", "evil.example", f"attacker.127.0.0.1.nip.io:{port}"):
        for method, path, body in [
                ("GET", f"{q}/jobs?tokens=true", None), ("GET", f"{q}/stats", None),
                ("GET", "/v1/queues", None), ("GET", "/healthz", None), ("GET", "/metrics", None),
                ("GET", "/openapi.json", None), ("POST", f"{q}/purge", b'{"all": true}'),
                ("POST", f"{q}/pause", b"{}"), ("POST", f"{q}/push", b'{"jobs": [{"payload": 1}]}'),
                ("PUT", q, b'{"settings": {"max_attempts": 1}}')]:
            status, answer, headers = raw(broker.url, method, path, host, body,
                                          "application/json" if body is not None else None)
            assert status == 403, (host, path, status, answer[:200])
            assert orjson.loads(answer)["code"] == "forbidden"
            assert headers["connection"] == "close"
            for secret in (PAYLOAD, token, client.queue, "j0000000001", broker.url):
                assert secret.encode() not in answer, (host, path, secret)
    assert snapshot_dir(store_dir) == before
    assert "refused GET" in broker.output and "Host 'evil.example:" in broker.output


def test_a_change_without_the_json_content_type_gets_415(broker: BrokerProcess,
                                                         store_dir: Path) -> None:
    client, _ = victim(broker)
    port = urlsplit(broker.url).port
    q = f"/v1/queues/{client.queue}"
    before = snapshot_dir(store_dir)
    for content_type in (None, "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"):
        for path, body in [(f"{q}/purge", b'{"all": true}'), (f"{q}/pause", b""),
                           (f"{q}/push", b'{"jobs": [{"payload": 1}]}')]:
            status, answer, headers = raw(broker.url, "POST", path, f"127.0.0.1:{port}", body,
                                          content_type)
            assert status == 415, (content_type, path, answer[:200])
            assert orjson.loads(answer)["code"] == "unsupported_media_type"
            assert headers["connection"] == "close"
    assert snapshot_dir(store_dir) == before
    assert client.stats()["paused"] is False


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST", "127.0.0.1"])
def test_our_client_works_by_any_loopback_name(broker: BrokerProcess, name: str) -> None:
    url = broker.url.replace("127.0.0.1", name)
    client = QueueClient(url, f"names-{uuid.uuid4().hex[:8]}")
    client.push_many([{"n": 1}, {"n": 2}])
    jobs = client.claim("w", max_jobs=2)
    assert [r.ok for r in client.complete_many((j.token, None) for j in jobs)] == [True, True]
    client.pause()
    assert client.stats()["paused"] is True
    assert client.health()["ok"] is True


def test_a_broker_without_a_token_answers_its_advertised_host(tmp_path: Path) -> None:
    server = BrokerServer(FileStore(str(tmp_path)), "127.0.0.1", 0,
                          advertise_url="http://broker.example:8765").start_in_thread()
    try:
        here = f"http://127.0.0.1:{server.port}"
        for host in ("broker.example:8765", "Broker.Example.:80", f"localhost:{server.port}"):
            status, answer, _ = raw(here, "GET", "/healthz", host)
            assert status == 200 and orjson.loads(answer)["url"] == server.url, host
        status, answer, _ = raw(here, "GET", "/healthz", "other.example:8765")
        assert status == 403 and orjson.loads(answer)["code"] == "forbidden"
    finally:
        server.stop()
