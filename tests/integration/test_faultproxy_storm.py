"""The fault proxy's storms (tests/support/faultproxy/storm.py): every request of
the methods named faulted with the kinds named, for a count of requests or a
time, whatever ``rate`` says; then they end by themselves. Also through the
control endpoint, as another process drives them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.error import HTTPError

import pytest

from tests.support.faultproxy import FaultConfig, FaultProxy, RemoteControl
from tests.support.motoserver import MotoServer


def _client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1}))


@pytest.fixture()
def proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint, seed=1, config=FaultConfig(rate=0.0)) as p:
        yield p


def _status(call: Any) -> int:
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    return 200


def test_a_counted_storm_faults_its_methods_only_then_ends(
        proxy: FaultProxy, s3_bucket: str) -> None:
    s3 = _client(proxy.url)
    s3.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    proxy.storm(("error403",), count=2, methods=["get"])
    assert proxy.stats()["storm"] == {"kinds": ["error403"], "left": 2, "left_s": None,
                                      "methods": ["GET"]}
    get = lambda: s3.get_object(Bucket=s3_bucket, Key="k")  # noqa: E731
    put = lambda: s3.put_object(Bucket=s3_bucket, Key="k", Body=b"y")  # noqa: E731
    assert [_status(get), _status(put), _status(get), _status(get)] == [403, 200, 403, 200]
    stats = proxy.stats()
    assert stats["storm"] is None and stats["faults"]["error403"] == 2


def test_a_timed_storm_ends_and_calm_ends_one(proxy: FaultProxy, s3_bucket: str) -> None:
    s3 = _client(proxy.url)
    head = lambda: s3.head_bucket(Bucket=s3_bucket)  # noqa: E731
    proxy.storm(("error500", "error503"), seconds=0)  # over as it starts
    assert _status(head) == 200 and proxy.stats()["storm"] is None
    proxy.storm(("error503",), seconds=600)
    assert [_status(head) for _ in range(3)] == [503, 503, 503]
    proxy.calm()
    assert _status(head) == 200


def test_a_storm_through_the_control_endpoint(proxy: FaultProxy, s3_bucket: str) -> None:
    control = RemoteControl(proxy.url)
    assert control.storm(["error500"], count=1)["storm"]["left"] == 1
    s3 = _client(proxy.url)
    assert [_status(lambda: s3.head_bucket(Bucket=s3_bucket)) for _ in range(2)] == [500, 200]
    with pytest.raises(HTTPError, match="400"):
        control.storm(["nope"], count=1)
    with pytest.raises(HTTPError, match="400"):
        control.storm(["error500"])  # neither seconds nor count
