"""A claim whose answer a connection loses before it is written is handed back
(broker.http.connections marks the request, broker.http.disconnect releases
its jobs), on real sockets.

The send stall bound drops a connection whose client reads none of its
answers; the answers still waiting for room are discarded unsent. A claim
answered into such a connection had committed its lease, so its jobs stayed
claimed by a client that never heard of them until the lease expired (the
claim's lease, up to an hour), although the claim's contract is that a client
gone before its answer is sent gets its jobs handed back.

The slow reader here first asks for a page of large jobs (megabytes: the
broker's send buffer stays full, since the client reads nothing, with a 1 KiB
receive buffer), then claims on the same connection: the claim commits, its
answer waits for room, and the connection is dropped after ``body_timeout_s``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker.http.server import BrokerServer
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.broker_process import eventually
from tests.support.sockets import ask, request_bytes

TOKEN = "lost-claims-token-0123456789"
READER = "127.0.0.2"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[BrokerServer]:
    """A broker with a send (and body) stall bound of 1 s."""
    config = BrokerConfig(self_test=False, body_timeout_s=1.0, header_timeout_s=30.0)
    with BrokerServer(FileStore(tmp_path), token=TOKEN, config=config).start_in_thread() as s:
        yield s


def jobs_of(root: Path, queue: str) -> list[dict[str, object]]:
    """The jobs of ``queue``'s object in the store, as stored."""
    jobs: list[dict[str, object]] = orjson.loads(
        FileStore(root).read(f"{queue}/queue.json").data)["jobs"]
    return jobs


def push(port: int, queue: str, jobs: list[dict[str, object]]) -> None:
    answer = ask(port, "POST", f"/v1/queues/{queue}/push", orjson.dumps({"jobs": jobs}),
                 token=TOKEN)
    assert answer.status == 200, answer


def claim_behind_a_full_buffer(port: int, claim: dict[str, object]) -> socket.socket:
    """A connection that asks for a page of 4 MB of jobs, then makes ``claim``
    (keyed), and reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(20.0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.bind((READER, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(request_bytes("GET", "/v1/queues/big/jobs?limit=20", token=TOKEN)
                 + request_bytes("POST", "/v1/queues/q/claim", orjson.dumps(claim),
                                 token=TOKEN, headers={"Idempotency-Key": "lost-claim-1"}))
    return sock


@pytest.mark.parametrize("wait_s", [0, 30], ids=["claim", "long-poll claim"])
def test_a_claim_answer_dropped_unsent_hands_its_jobs_back(
        server: BrokerServer, tmp_path: Path, wait_s: int) -> None:
    push(server.port, "big", [{"payload": "x" * 200_000}] * 20)
    push(server.port, "q", [{"payload": 1}])
    book = server.connections
    assert book is not None
    sock = claim_behind_a_full_buffer(
        server.port, {"worker": "w", "max_jobs": 1, "lease_s": 3600, "wait_s": wait_s})
    try:
        # the claim commits its lease, then its answer waits behind the page
        eventually(lambda: jobs_of(tmp_path, "q")[0]["status"] == "claimed", timeout_s=10,
                   what="the slow reader's claim committed")
        eventually(lambda: book.count(READER) == 0, timeout_s=10,
                   what="the slow reader dropped")
        # its answer was never written: the job is pending again, the attempt not counted
        eventually(lambda: jobs_of(tmp_path, "q")[0]["status"] == "pending", timeout_s=10,
                   what="the job of the lost claim answer handed back")
        job = jobs_of(tmp_path, "q")[0]
        assert job["attempts"] == 0 and "lease" not in job, job
        # and another worker gets it now, not an hour later
        answer = ask(server.port, "POST", "/v1/queues/q/claim",
                     orjson.dumps({"worker": "w2", "max_jobs": 1}), token=TOKEN)
        assert [j["id"] for j in answer.json()["jobs"]] == [job["id"]], answer
    finally:
        sock.close()


def test_a_claim_answer_sent_whole_keeps_its_jobs(server: BrokerServer, tmp_path: Path) -> None:
    """What the hand-back must not touch: an answer written whole, then the
    connection closed (the client has its jobs)."""
    push(server.port, "q", [{"payload": 1}])
    answer = ask(server.port, "POST", "/v1/queues/q/claim",
                 orjson.dumps({"worker": "w", "max_jobs": 1, "lease_s": 3600}), token=TOKEN,
                 headers={"Idempotency-Key": "kept-claim-1"})
    assert len(answer.json()["jobs"]) == 1
    heard = ask(server.port, "GET", "/v1/queues/q/stats", token=TOKEN)  # (one more call served)
    assert heard.status == 200
    job = jobs_of(tmp_path, "q")[0]
    assert job["status"] == "claimed" and job["attempts"] == 1, job
