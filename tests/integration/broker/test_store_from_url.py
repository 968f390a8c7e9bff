"""Opening a store from its URL (``store_from_url``: schemes, the S3 options
``endpoint``, ``timeout_s`` and ``retries``, refused options), and the S3
store's retries of transient errors."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from broker.errors import InvalidRequest, StorageUnavailable
from broker.storage import MemoryStore, S3Store, Versioned, store_from_url
from tests.support.faultproxy import FaultConfig, FaultProxy
from tests.support.motoserver import MotoServer


def test_s3_retries_transient_errors_then_gives_up(moto_server: MotoServer,
                                                  s3_bucket: str) -> None:
    # the fault proxy in front of moto answers the next two requests 503 SlowDown
    config = FaultConfig(rate=1.0, weights={"error": 1.0, "error500": 0.0, "error503": 0.0,
                                            "drop": 0.0, "delay": 0.0},
                         error_status=503, error_code="SlowDown", limit=2)
    direct = S3Store(s3_bucket, endpoint_url=moto_server.endpoint)
    etag = direct.put("k", b"ok")
    with FaultProxy(moto_server.endpoint, config=config) as proxy:
        store = S3Store(s3_bucket, endpoint_url=proxy.url, retries=5)
        assert store.read("k") == Versioned(b"ok", etag)
        assert proxy.stats()["requests"] == 3
        proxy.configure(limit=None)
        hopeless = S3Store(s3_bucket, endpoint_url=proxy.url, retries=3)
        with pytest.raises(StorageUnavailable, match="SlowDown"):
            hopeless.read("k")
        assert proxy.stats()["requests"] == 6
        store.close()
        hopeless.close()
    direct.close()


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
