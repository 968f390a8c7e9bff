"""QueueClient through its transport seam: retries, request keys, floors, discovery,
and the default transport's errors. No broker process, no Spark."""

from __future__ import annotations

import pickle
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from broker.errors import (
    BrokerUnavailable,
    BrokerUnreachable,
    InvalidRequest,
    NotTheBroker,
    OsqueueError,
    OutcomeUnknown,
    QueueFull,
    StaleToken,
    StorageUnavailable,
)
from osqueue_spark import QueueClient
from osqueue_spark.client import REQUEST_FLOOR_HEADER, REQUEST_KEY_HEADER
from osqueue_spark.transport import MockTransport, Request, Response, Urllib3Transport
from tests.support.fake_broker import FakeBroker, error


@pytest.fixture()
def fake() -> FakeBroker:
    return FakeBroker()


def sent(fake: FakeBroker, action: str) -> list[Request]:
    return [r for r in fake.requests if r.url.endswith("/" + action)]


# -- retries ---------------------------------------------------------------------------

@pytest.mark.parametrize("exc", [BrokerUnreachable("down"), BrokerUnavailable("reset"),
                                 OutcomeUnknown("maybe"), StorageUnavailable("slow")])
def test_retryable_errors_are_retried_with_the_same_request_key(
        fake: FakeBroker, exc: OsqueueError) -> None:
    assert type(exc).retryable
    client = fake.client()
    fake.fail_next("push", exc, error(exc))  # raised by the transport, then answered
    assert client.push({"n": 1}) == "j0"
    pushes = sent(fake, "push")
    assert len(pushes) == 3 and len(fake.pending) == 1
    assert len({r.headers[REQUEST_KEY_HEADER] for r in pushes}) == 1  # one call, one key


@pytest.mark.parametrize("exc", [InvalidRequest("bad"), QueueFull("full"), StaleToken("old")])
def test_errors_that_cannot_pass_are_raised_at_once(fake: FakeBroker, exc: OsqueueError) -> None:
    assert not type(exc).retryable
    client = fake.client(retry_s=30)
    fake.fail_next("push", error(exc))
    with pytest.raises(type(exc), match=exc.message):
        client.push({"n": 1})
    assert len(sent(fake, "push")) == 1 and not fake.pending


def test_retries_stop_after_retry_s_with_the_last_error(fake: FakeBroker) -> None:
    client = fake.client(retry_s=0.3)
    fake.fail_next("stats", *[BrokerUnreachable(f"down {n}") for n in range(1000)])
    began = time.monotonic()
    with pytest.raises(BrokerUnreachable, match="down"):
        client.stats()
    elapsed = time.monotonic() - began
    assert 0.3 <= elapsed < 3.0  # the last backoff may overrun retry_s by at most 2 s
    assert 2 <= len(sent(fake, "stats")) < 1000


def test_every_keyed_call_gets_its_own_key_and_the_floor_of_open_calls(
        fake: FakeBroker) -> None:
    client = fake.client()
    client.push("a")  # call 0
    nested: list[object] = []

    def claim_while_pushing(request: Request) -> Response:
        # call 1 (a push) is still open when call 2 (a claim) is sent
        if request.url.endswith("/push") and not nested:
            nested.append(client.claim("w", 1))
        return fake(request)

    client._transport = MockTransport(claim_while_pushing)
    client.push("b")
    client.push("c")  # call 3: every earlier call has its answer
    keyed = [r for r in fake.requests if REQUEST_KEY_HEADER in r.headers]
    got = [(r.url.rsplit("/", 1)[1], r.headers[REQUEST_KEY_HEADER].rsplit("-", 1)[1],
            r.headers[REQUEST_FLOOR_HEADER]) for r in keyed]
    assert got == [("push", "0", "0"), ("claim", "2", "1"), ("push", "1", "1"),
                   ("push", "3", "3")]
    client_ids = {r.headers[REQUEST_KEY_HEADER].rsplit("-", 1)[0] for r in keyed}
    assert len(client_ids) == 1
    assert not any(REQUEST_KEY_HEADER in r.headers for r in sent(fake, "stats"))


def test_a_copy_of_a_client_has_its_own_request_keys(fake: FakeBroker) -> None:
    client = QueueClient(fake.url, "q", token="s3cret")
    copy = pickle.loads(pickle.dumps(client))
    assert copy._requests.client != client._requests.client
    assert copy._headers["authorization"] == "Bearer s3cret" and "s3cret" not in repr(copy)


def test_the_token_is_sent_and_never_shown(fake: FakeBroker) -> None:
    client = fake.client(token="s3cret")
    client.stats()
    assert fake.requests[0].headers["authorization"] == "Bearer s3cret"
    assert "s3cret" not in repr(client) and "s3cret" not in repr(client._transport)


# -- answers ---------------------------------------------------------------------------

def test_answers_become_results_and_errors(fake: FakeBroker) -> None:
    client = fake.client()
    client.push_many([{"payload": {"n": 1}, "priority": 5}, 2])
    first, second = client.claim("w", 2)
    assert (first.id, first.payload, first.attempt) == ("j0", {"n": 1}, 1)
    assert client.complete(first.token, {"ok": True}).ok
    assert fake.outcomes["j0"] == ("completed", {"ok": True})
    fake.lost_tokens.add(second.token)
    answer = client.fail(second.token, "boom")
    assert not answer.ok and answer.reason == "stale_token"
    fake.fail_next("stats", Response(500, {}, b"<html>oops</html>"))
    with pytest.raises(OsqueueError, match="HTTP 500"):
        client.stats()
    fake.fail_next("stats", Response.json([1, 2], 502))
    with pytest.raises(OsqueueError, match="HTTP 502"):
        client.stats()


def test_a_stale_token_answer_with_results_is_returned(fake: FakeBroker) -> None:
    client = fake.client()
    stale = {"results": [{"token": "t", "ok": False, "reason": "stale_token"}]}
    fake.fail_next("complete", Response.json(stale, 409))
    assert client.complete("t") == ("t", False, "stale_token", None)


def test_bad_jobs_are_refused_before_sending(fake: FakeBroker) -> None:
    client = fake.client()
    with pytest.raises(InvalidRequest, match="unknown job fields"):
        client.push_many([{"payload": 1, "prio": 2}])
    with pytest.raises(TypeError, match="not JSON serializable"):
        client.push(object())
    assert fake.requests == []


# -- discovery -------------------------------------------------------------------------

def test_not_the_broker_sends_the_client_to_the_owner_it_names() -> None:
    owner = FakeBroker("http://owner:2")
    seen: list[str] = []

    def route(request: Request) -> Response:
        seen.append(request.url.split("/v1")[0])
        if request.url.startswith(owner.url):
            return owner(request)
        return error(NotTheBroker("not mine", url=owner.url + "/"))

    client = QueueClient("http://standby:1", "q", retry_s=5, transport=MockTransport(route))
    assert client.push("x") == "j0"
    assert seen == ["http://standby:1", "http://owner:2"] and client.url == owner.url
    client.push("y")
    assert seen[-1] == owner.url  # it stays with the owner


def test_an_unreachable_broker_sends_the_client_to_the_next_url() -> None:
    good = FakeBroker("http://b:2")
    seen: list[str] = []

    def route(request: Request) -> Response:
        seen.append(request.url.split("/v1")[0])
        if request.url.startswith(good.url):
            return good(request)
        raise BrokerUnreachable("connection refused")

    client = QueueClient("http://a:1, http://b:2, http://c:3", "q", retry_s=5,
                         transport=MockTransport(route))
    assert client.push("x") == "j0"
    assert seen == ["http://a:1", "http://b:2"] and client.url == good.url


def test_with_queue_keeps_the_transport_and_the_broker(fake: FakeBroker) -> None:
    client = fake.client(url=["http://other:9", fake.url])
    client.url = fake.url
    other = client.with_queue("q2")
    assert other.url == fake.url and other._transport is client._transport
    other.stats()
    assert fake.requests[-1].url == f"{fake.url}/v1/queues/q2/stats"


# -- the default transport ---------------------------------------------------------------

@pytest.fixture()
def resetting_server() -> Iterator[str]:
    """A server that accepts one connection at a time and closes it unanswered."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    sock.close()


def test_the_default_transport_tells_not_sent_from_lost() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # nobody listens
    transport = Urllib3Transport()
    with pytest.raises(BrokerUnreachable,
                       match=re.escape(f"cannot reach broker at {nobody}: Connection refused")):
        transport.send("GET", nobody + "/healthz", {}, None, 1.0)
    assert repr(transport) == "Urllib3Transport()"


def test_a_reply_lost_after_sending_is_broker_unavailable(resetting_server: str) -> None:
    transport = Urllib3Transport()
    with pytest.raises(BrokerUnavailable, match="failed after sending") as info:
        transport.send("POST", resetting_server + "/v1/queues/q/push", {}, b"\t1\n", 2.0)
    assert not isinstance(info.value, BrokerUnreachable)
    transport.close()
