"""QueueClient's refusals: a stale token with ``raise_on_stale``, an answer that is
not the broker's JSON error."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.errors import OsqueueError, StaleToken
from osqueue_spark import QueueClient, start_broker
from osqueue_spark.transport import MockTransport, Request, Response


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[QueueClient]:
    with start_broker(f"file://{tmp_path}") as broker:
        yield QueueClient(broker.url, "refusals")


def stale_and_live(client: QueueClient) -> tuple[str, str]:
    """Two tokens of one job: the first's 50 ms lease ran out and a long-polling
    claim got the job again (no sleep: the claim waits for it)."""
    client.push({"doc": 1})
    first = client.claim("w1", lease_s=0.05)[0]
    second = client.claim("w2", lease_s=600, wait_s=30)[0]
    assert second.id == first.id and second.token != first.token
    return first.token, second.token


def test_a_stale_token_returns_ok_false_by_default(client: QueueClient) -> None:
    stale, _ = stale_and_live(client)
    assert not client.complete(stale).ok
    assert not client.fail(stale, "late").ok
    assert not client.heartbeat([stale])[0].ok


@pytest.mark.parametrize("call", ["complete", "fail", "heartbeat"])
def test_raise_on_stale_raises_stale_token_naming_it(client: QueueClient, call: str) -> None:
    stale, live = stale_and_live(client)
    with pytest.raises(StaleToken) as info:
        if call == "complete":
            client.complete(stale, {"r": 1}, raise_on_stale=True)
        elif call == "fail":
            client.fail(stale, "late", raise_on_stale=True)
        else:
            client.heartbeat([stale], raise_on_stale=True)
    err = info.value
    assert err.code == "stale_token" and stale in err.message
    assert err.message.startswith("1 of 1 token(s) refused: ")
    assert err.details["tokens"] == [stale] and err.details["reasons"][0]
    again = pickle.loads(pickle.dumps(err))  # Spark moves errors between processes
    assert isinstance(again, StaleToken) and again.details == err.details
    assert client.complete(live, raise_on_stale=True).ok  # the live token still acts


def test_raise_on_stale_in_a_batch_names_only_the_refused_and_the_rest_acted(
        client: QueueClient) -> None:
    stale, live = stale_and_live(client)
    with pytest.raises(StaleToken) as info:
        client.complete_many([(stale, None), (live, {"r": 2})], raise_on_stale=True)
    assert info.value.details["tokens"] == [stale] and live not in info.value.message
    assert info.value.message.startswith("1 of 2 token(s) refused")
    assert client.stats()["completed_total"] == 1


def test_an_answer_that_is_not_json_is_named_by_its_status_and_text() -> None:
    """A 404 printed as ``HTTP 404: b'Not Found'``."""
    def answer(request: Request) -> Response:
        body = b"Not Found" if request.url.endswith("/stats") else b"<html>\n<h1>502</h1>"
        return Response(404 if body == b"Not Found" else 502, {"content-type": "text/plain"},
                        body)

    client = QueueClient("http://proxy:1", "q", retry_s=0, transport=MockTransport(answer))
    with pytest.raises(OsqueueError) as info:
        client.stats()
    assert info.value.message == "HTTP 404: Not Found"
    with pytest.raises(OsqueueError) as info:
        client.jobs()
    assert info.value.message == "HTTP 502: <html>"


def test_the_package_exports_stale_token() -> None:
    import osqueue_spark

    assert osqueue_spark.StaleToken is StaleToken
