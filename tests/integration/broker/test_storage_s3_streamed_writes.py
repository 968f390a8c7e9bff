"""S3Store's conditional writes stream an object's parts (PartsReader) instead of
joining them: what lands is exactly the joined bytes, a retried attempt resends the
whole body, and the body's checksum still guards it in transit (moto's real server,
a fault injected by the fault proxy)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from broker.storage import S3Store
from tests.support.faultproxy import FaultConfig, FaultProxy
from tests.support.motoserver import MotoServer, set_default_credentials

KEY = "q/queue.json"

#: parts as the codec makes them: a header, empty parts, blocks of many sizes
PARTS = [b'{"v":5', b"", b',\n"jobs":[\n'] + [bytes([65 + i % 26]) * (i * 997 % 70_000)
                                                for i in range(60)] + [b"", b"}\n"]
JOINED = b"".join(PARTS)

#: every storage request faulted with a 503 SlowDown, nothing forwarded
ONLY_503 = {"error500": 0.0, "error503": 1.0, "drop": 0.0, "delay": 0.0}


def _stored(moto_server: MotoServer, bucket: str) -> bytes | None:
    client = boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")
    try:
        return bytes(client.get_object(Bucket=bucket, Key=f"p/{KEY}")["Body"].read())
    except client.exceptions.NoSuchKey:
        return None
    finally:
        client.close()


@pytest.fixture()
def store(moto_server: MotoServer, s3_bucket: str) -> Iterator[S3Store]:
    s = S3Store(s3_bucket, "p", endpoint_url=moto_server.endpoint, retries=3)
    yield s
    s.close()


def test_s3_writes_of_parts_land_the_joined_bytes(store: S3Store, moto_server: MotoServer,
                                                  s3_bucket: str) -> None:
    etag = store.create_if_absent(KEY, PARTS)
    assert _stored(moto_server, s3_bucket) == JOINED
    assert etag.strip('"') == hashlib.md5(JOINED).hexdigest()
    smaller = [*PARTS[:3], b"]}\n"]
    etag2 = store.write_if_match(KEY, smaller, etag)
    assert store.read(KEY).data == b"".join(smaller)
    assert etag2.strip('"') == hashlib.md5(b"".join(smaller)).hexdigest()
    store.write_if_match(KEY, b"plain bytes", etag2)  # one bytes object, as before
    assert _stored(moto_server, s3_bucket) == b"plain bytes"


@pytest.mark.parametrize("method", ["create_if_absent", "write_if_match"])
def test_s3_write_retried_after_a_503_resends_the_whole_body(
        moto_server: MotoServer, s3_bucket: str, method: str) -> None:
    direct = S3Store(s3_bucket, "p", endpoint_url=moto_server.endpoint)
    etag = direct.create_if_absent(KEY, b"old") if method == "write_if_match" else None
    with FaultProxy(moto_server.endpoint,
                    config=FaultConfig(rate=1.0, weights=ONLY_503, limit=1)) as proxy:
        store = S3Store(s3_bucket, "p", endpoint_url=proxy.url, retries=3)
        try:
            if etag is None:
                store.create_if_absent(KEY, PARTS)
            else:
                store.write_if_match(KEY, PARTS, etag)
        finally:
            store.close()
        stats = proxy.stats()
    direct.close()
    assert stats["faults"]["error503"] == 1
    assert stats["by_method"]["PUT"] == 2  # the faulted attempt and the retry
    assert _stored(moto_server, s3_bucket) == JOINED


def _sent_headers(store: S3Store) -> list[dict[str, str]]:
    """The headers of every PutObject the store's client sends (observed, not changed)."""
    seen: list[dict[str, str]] = []

    def keep(request: Any, **_: Any) -> None:
        seen.append({k.lower(): v.decode() if isinstance(v, bytes) else v
                     for k, v in request.headers.items()})

    store._client.meta.events.register("before-send.s3.PutObject", keep)
    return seen


@pytest.mark.parametrize("method", ["create_if_absent", "write_if_match"])
def test_s3_streamed_write_still_sends_the_body_checksum(
        store: S3Store, moto_server: MotoServer, s3_bucket: str, method: str) -> None:
    etag = store.create_if_absent(KEY, b"old") if method == "write_if_match" else None
    sent = _sent_headers(store)
    if etag is None:
        store.create_if_absent(KEY, PARTS)
    else:
        store.write_if_match(KEY, PARTS, etag)
    (headers,) = sent
    # S3 checks the CRC32 against the bytes it received and refuses a mismatch; the
    # conditional header is sent as before
    assert headers["x-amz-checksum-crc32"] == base64.b64encode(
        zlib.crc32(JOINED).to_bytes(4, "big")).decode()
    assert headers["x-amz-content-sha256"] == hashlib.sha256(JOINED).hexdigest()
    assert int(headers["content-length"]) == len(JOINED)
    assert ("if-none-match" if etag is None else "if-match") in headers
    assert _stored(moto_server, s3_bucket) == JOINED


@pytest.fixture()
def moto_process() -> Iterator[str]:
    """moto's server in a process of its own (so that this process's allocations are
    the client's alone), with bucket ``streamed``; its endpoint."""
    set_default_credentials()
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.motoserver",
                             "--bucket", "streamed"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # waits for the ready line (or EOF if it died)
        assert "motoserver ready on " in line, line
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_s3_write_of_parts_does_not_join_them(moto_process: str) -> None:
    parts = [bytes([97 + i % 26]) * 65_536 for i in range(320)]  # 20 MiB in 64 KiB parts
    store = S3Store("streamed", "p", endpoint_url=moto_process)
    etag = store.create_if_absent(KEY, b"old")
    tracemalloc.start()
    try:
        store.write_if_match(KEY, parts, etag)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # a joined copy alone would be 20 MiB; streamed, the SDK holds a block or two
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB allocated at the peak of the write"
    assert store.read(KEY).data == b"".join(parts)
    store.close()
