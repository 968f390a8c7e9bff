"""QueueClient's retries as a user sees them: each one logged, a broker that never
answered reported within seconds, and a broker that answered once ridden out
for the whole ``retry_s`` when it restarts (a real broker process, killed and
started again on its port; the store checked afterwards)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.errors import BrokerUnreachable, OsqueueError
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from osqueue_spark.retries import FIRST_CONTACT_S
from osqueue_spark.transport import MockTransport, Request, Response
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.fake_broker import FakeBroker

TOKEN = "s3cret-first-contact"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def retries(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "osqueue.client"]


def test_a_dead_port_is_reported_within_seconds_and_each_retry_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    """It took 61.6 s (retry_s and a last backoff) and logged nothing."""
    caplog.set_level(logging.WARNING, "osqueue.client")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    client = QueueClient(url, "q", token=TOKEN)  # retry_s: the default 60 s
    began = time.monotonic()
    with pytest.raises(BrokerUnreachable) as info:
        client.claim("w")
    took = time.monotonic() - began
    assert FIRST_CONTACT_S <= took < 10, took
    message = str(info.value)
    assert message.startswith(f"nothing listens at {url}: is the broker running? "
                              "(Connection refused"), message
    logged = retries(caplog)
    assert len(logged) >= 2 and all(r.levelno == logging.WARNING for r in logged)
    for n, record in enumerate(logged, 1):
        text = record.getMessage()
        assert f"POST {url}/v1/queues/q/claim failed (attempt {n}, BrokerUnreachable" in text
        assert TOKEN not in text
    assert TOKEN not in message


def test_first_contact_gives_up_early_only_on_connection_failures() -> None:
    """A broker that answers (here: retryable 503s) is retried for retry_s, even
    before any call succeeded; only "never connected" ends after FIRST_CONTACT_S."""
    fake = FakeBroker("http://first-contact-503:1")
    answers = iter(range(1000))

    def busy_then_fine(request: Request) -> Response:
        if next(answers) < 3:
            return Response.json({"error": "busy", "code": "broker_unavailable"}, 503)
        return fake(request)

    client = QueueClient(fake.url, "q", retry_s=30, transport=MockTransport(busy_then_fine))
    assert client.push("x") == "j0"


def test_a_broker_that_answered_once_is_ridden_out_past_the_first_contact_bound(
        caplog: pytest.LogCaptureFixture) -> None:
    """Connection refused for longer than FIRST_CONTACT_S, after the broker had
    answered this process: retried until it is back, as a restart needs."""
    caplog.set_level(logging.WARNING, "osqueue.client")
    fake = FakeBroker("http://first-contact-restart:1")
    down_since: list[float] = []

    def restarting(request: Request) -> Response:
        if not down_since:  # the first call: answered, then the broker goes down
            down_since.append(time.monotonic())
            return fake(request)
        if time.monotonic() - down_since[0] < FIRST_CONTACT_S + 1:
            raise BrokerUnreachable("cannot reach broker at http://first-contact-restart:1: "
                                    "Connection refused (NewConnectionError)")
        return fake(request)

    client = QueueClient(fake.url, "q", retry_s=30, transport=MockTransport(restarting))
    client.push("before")
    assert client.push("during") == "j1"
    assert len(retries(caplog)) >= 2


def test_a_connection_refused_after_first_contact_is_retried_and_loses_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The real thing: the broker process is killed (SIGKILL: refused connections),
    stays down past FIRST_CONTACT_S while a push is retried, and a new broker
    starts on the same port and takes the queue over. The push lands once; the
    store holds every acknowledged job exactly once."""
    caplog.set_level(logging.WARNING, "osqueue.client")
    store_url = f"file://{tmp_path}"
    port = free_port()
    args = ("--listen", f"127.0.0.1:{port}", "--lease-s", "2")
    first = BrokerProcess(store_url, *args).start()
    second = BrokerProcess(store_url, *args)
    try:
        client = QueueClient(first.url, "q", retry_s=60)
        [before] = client.push_many(["before"])
        first.stop(signal.SIGKILL)
        killed = time.time()
        outcome: list[object] = []

        def push() -> None:
            try:
                outcome.extend(client.push_many(["during"]))
            except OsqueueError as exc:
                outcome.append(exc)

        pusher = threading.Thread(target=push)
        pusher.start()
        # (a retry logged well past the first-contact bound: the client kept going)
        eventually(lambda: any(r.created - killed > FIRST_CONTACT_S + 0.5
                               for r in retries(caplog)) or not pusher.is_alive(),
                   30, "a retry logged after the first-contact bound")
        assert pusher.is_alive(), outcome
        second.start()
        pusher.join(60)
        assert not pusher.is_alive()
        [during] = outcome
        assert isinstance(during, str), during
    finally:
        second.stop()
        first.stop(signal.SIGKILL)
    state = decode_state(FileStore(tmp_path).read(paths.state_key("q")).data)
    stored = {job.id: orjson.loads(job.payload) for job in state.jobs.values()}
    assert stored == {before: "before", during: "during"}
