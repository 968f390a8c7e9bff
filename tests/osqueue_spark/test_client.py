"""QueueClient against real brokers over HTTP: retries that are safe, and owner discovery.

A lost response is injected in the client's transport (the transport seam,
:mod:`osqueue_spark.transport`): the request reaches the broker and is
applied, then the client sees the connection break (what a timeout or a
dropped reply looks like from the client's side).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import urllib3

from broker import paths
from broker.errors import BrokerUnavailable, InvalidRequest, OsqueueError
from broker.http.server import BrokerServer
from broker.model.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.transport import Response, Urllib3Transport


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerServer]:
    with start_broker(f"file://{tmp_path}") as b:
        yield b


class LosingReplies(Urllib3Transport):
    """The real transport, but the next ``times`` requests whose path ends with
    ``path_end`` reach the broker and lose their reply (``lost`` counts them)."""

    def __init__(self, path_end: str, times: int = 1) -> None:
        super().__init__()
        self.path_end, self.times = path_end, times
        self.lost: list[int] = []

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> Response:
        resp = super().send(method, url, headers, body, timeout_s)
        if url.endswith(self.path_end) and len(self.lost) < self.times:
            self.lost.append(resp.status)
            raise BrokerUnavailable("injected: connection reset after sending")
        return resp


def lose_replies(client: QueueClient, path_end: str, times: int = 1) -> list[int]:
    """Make the next ``times`` requests of ``client`` whose path ends with
    ``path_end`` reach the broker but lose their reply; return a list that counts them."""
    transport = LosingReplies(path_end, times)
    client._transport = transport
    return transport.lost


def test_a_claim_whose_reply_was_lost_strands_nothing(broker: BrokerServer) -> None:
    """Defect 21: the retried claim must hand back the jobs the first one claimed."""
    client = QueueClient(broker.url, "q", retry_s=10)
    client.push_many(range(10))
    lost = lose_replies(client, "/claim")
    jobs = client.claim("w", max_jobs=3, lease_s=60)
    assert lost == [200]  # the first claim was applied; its answer never arrived
    stats = client.stats()
    assert len(jobs) == 3 and stats["counts"]["claimed"] == 3  # no holder-less claims
    assert all(client.complete(j.token).ok for j in jobs)


def test_a_push_whose_reply_was_lost_is_not_enqueued_twice(broker: BrokerServer) -> None:
    """Defect 1: a retried push after a lost reply made two jobs (and without a key
    the client refused to retry at all)."""
    client = QueueClient(broker.url, "q", retry_s=10)
    lost = lose_replies(client, "/push")
    ids = client.push_many([{"n": 1}, {"n": 2}])
    assert lost == [200]
    assert client.stats()["total"] == 2
    assert [j["id"] for j in client.jobs()] == ids


def test_complete_and_fail_whose_replies_were_lost_answer_as_they_landed(
        broker: BrokerServer) -> None:
    client = QueueClient(broker.url, "q", retry_s=10)
    client.push_many([1, 2])
    done, failed = client.claim("w", max_jobs=2)
    lost = lose_replies(client, "/complete")
    assert client.complete(done.token, {"ok": 1}).ok and lost == [200]
    lost = lose_replies(client, "/fail")
    answer = client.fail(failed.token, "boom")
    assert answer.ok and answer.status == "pending" and lost == [200]


def test_the_client_finds_the_owner_among_several_urls(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    store_url = f"file://{tmp_path}"
    with start_broker(store_url) as owner, start_broker(store_url) as standby:
        QueueClient(owner.url, "q").push("made by the owner")
        client = QueueClient([dead, standby.url, owner.url], "q", retry_s=20)
        assert client.push("second")  # dead -> standby ("not the broker") -> owner
        assert client.url == owner.url
        state = decode_state(FileStore(tmp_path).read(paths.state_key("q")).data)
        assert state.broker is not None and state.broker.url == owner.url
        assert QueueClient(f"{dead},{owner.url}", "q", retry_s=20).stats()["total"] == 2


def test_client_urls_are_checked() -> None:
    with pytest.raises(InvalidRequest):
        QueueClient([], "q")
    with pytest.raises(InvalidRequest):
        QueueClient("ftp://x", "q")
    client = QueueClient(["http://a:1/", " http://b:2"], "q")
    assert client.urls == ["http://a:1", "http://b:2"] and "token" not in repr(client)


def test_a_payload_nested_too_deep_is_refused_and_changes_nothing(broker: BrokerServer) -> None:
    """Review R12: such a payload was stored, and then broke GET /jobs (500)."""
    value: object = 1
    for _ in range(252):
        value = [value]
    client = QueueClient(broker.url, "q", retry_s=2)
    client.push({"n": 1})
    with pytest.raises(InvalidRequest, match="nested"):
        client.push(value)
    assert [j["payload"] for j in client.jobs()] == [{"n": 1}]


def test_job_listing_passes_payloads_through_verbatim(broker: BrokerServer) -> None:
    client = QueueClient(broker.url, "q", retry_s=2)
    client.stage_lines("w/c0", b'\t{"account":123456789012345678901234567890}\n')
    client.publish("w/", ["w/c0"], once="write:w")
    raw = urllib3.request("GET", f"{broker.url}/v1/queues/q/jobs").data
    assert b'"payload":{"account":123456789012345678901234567890}' in raw


def test_a_client_given_only_the_store_finds_the_owner(tmp_path: Path) -> None:
    store_url = f"file://{tmp_path}"
    with pytest.raises(InvalidRequest):
        QueueClient(None, "q")  # neither brokers nor a store
    with start_broker(store_url) as b:
        nobody = QueueClient(None, "q", store=store_url, retry_s=0.5)
        with pytest.raises(OsqueueError, match="no broker serves"):
            nobody.push("x")  # no queue object yet: nothing names a broker
        QueueClient(b.url, "q").push("made by its broker")
        client = QueueClient(None, "q", store=store_url, retry_s=5)
        assert client.push("found") and client.url == b.url
        assert client.stats()["total"] == 2
