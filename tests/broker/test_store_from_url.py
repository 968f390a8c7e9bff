"""Opening a store from its URL (``store_from_url``: schemes, the S3 options
``endpoint``, ``timeout_s`` and ``retries``, refused options), and the S3
store's retries of transient errors."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from broker.errors import InvalidRequest, StorageUnavailable
from broker.storage import MemoryStore, S3Store, Versioned, store_from_url


class _FlakyClient:
    """An injected fault: the first ``failures`` calls answer 503."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise ClientError(
                {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                "GetObject",
            )
        return {"Body": io.BytesIO(b"ok"), "ETag": '"e"'}


def test_s3_retries_transient_errors_then_gives_up() -> None:
    flaky = _FlakyClient(failures=2)
    store = S3Store("b", client=flaky, retries=5)
    assert store.read("k") == Versioned(b"ok", '"e"')
    assert flaky.calls == 3
    hopeless = S3Store("b", client=_FlakyClient(failures=100), retries=3)
    with pytest.raises(StorageUnavailable):
        hopeless.read("k")


def test_store_from_url() -> None:
    assert isinstance(store_from_url("memory://t1"), MemoryStore)
    assert store_from_url("memory://t1") is store_from_url("memory://t1")
    s3 = store_from_url("s3://bkt/some/prefix?endpoint=http://127.0.0.1:9")
    assert isinstance(s3, S3Store) and s3.prefix == "some/prefix"
    for bad in ("file://relative/path", "s3:///nobucket", "nonsense"):
        with pytest.raises(InvalidRequest):
            store_from_url(bad)


def test_s3_url_options_set_timeout_and_retries() -> None:
    store = store_from_url("s3://bkt/p?endpoint=http://127.0.0.1:9&timeout_s=2&retries=3")
    assert isinstance(store, S3Store)
    assert (store.timeout_s, store.retries) == (2.0, 3)
    config = store._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.0, 2.0)
    assert store._client.meta.endpoint_url == "http://127.0.0.1:9"
    default = store_from_url("s3://bkt/p")
    assert isinstance(default, S3Store)
    assert (default.timeout_s, default.retries) == (10.0, 5)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("endpoint=http://h:1&timeout=2&colour=red", "colour, timeout"),
        ("retries=0", "retries='0'"),
        ("retries=two", "retries='two'"),
        ("retries=1.5", "retries='1.5'"),
        ("timeout_s=-1", "timeout_s='-1'"),
        ("timeout_s=nan", "timeout_s='nan'"),
        ("retries=1&retries=2", "more than once: retries"),
    ],
)
def test_s3_url_options_are_checked(query: str, named: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        store_from_url(f"s3://bkt/p?{query}")
    assert named in str(info.value)


def test_s3_url_timeout_applies_to_requests(unanswering_port: int) -> None:
    store = store_from_url(
        f"s3://bkt/p?endpoint=http://127.0.0.1:{unanswering_port}&timeout_s=0.3&retries=2")
    assert isinstance(store, S3Store)
    sent: list[str] = []
    store._client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method))
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="ReadTimeout"):
        store.read("q/queue.json")
    assert time.monotonic() - started < 5  # the default 10 s timeout would take 20 s
    assert sent == ["GET", "GET"]
    store.close()


@pytest.fixture()
def unanswering_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])
