"""S3 (and S3-compatible) store using conditional writes.

``write_if_match`` sends ``If-Match: <etag>`` and ``create_if_absent`` sends
``If-None-Match: *``. 412 (precondition failed) and 409 (a concurrent
conditional write) both mean "lost the race" and raise :class:`Conflict`;
404 raises :class:`NotFound`. Throttling, 5xx and connection errors are
retried with exponential backoff (tenacity); when retries run out the call
raises :class:`StorageUnavailable` and, for a write, the outcome is unknown.

Credentials come from the usual boto3 chain (environment, profile, instance
role); the endpoint from ``endpoint_url=`` or ``AWS_ENDPOINT_URL``. The
store's ``url`` and every message name only bucket, prefix and endpoint host.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from tenacity import (
    retry_if_exception_type,
    stop_after_attempt,
)

from broker.errors import Conflict, NotFound, StorageError, StorageUnavailable
from broker.retry import retrying
from broker.storage.base import Data, ObjectStore, Versioned, as_bytes

T = TypeVar("T")

_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
     "ServiceUnavailable", "RequestTimeTooSkewed"}
)


def _classify(exc: Exception, key: str) -> StorageError:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return Conflict(f"object {key!r} changed since it was read ({code or status})")
        if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
            return NotFound(f"no object {key!r}")
        if status >= 500 or status == 429 or code in _THROTTLE_CODES:
            return StorageUnavailable(f"S3 answered {code or status} for {key!r}")
        return StorageError(f"S3 refused {key!r}: {code or status}")
    return StorageUnavailable(f"S3 request for {key!r} failed: {type(exc).__name__}")


class S3Store(ObjectStore):
    """Objects under ``s3://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        retries: int = 5,
        timeout_s: float = 10.0,
        client: Any | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        shown = f" at {endpoint_url.split('@')[-1]}" if endpoint_url else ""
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/") + shown
        self._retries = max(1, retries)
        if client is None:
            region = region_name or os.environ.get("AWS_REGION") or os.environ.get(
                "AWS_DEFAULT_REGION") or "us-east-1"
            client = boto3.session.Session().client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                config=Config(
                    retries={"max_attempts": 1, "mode": "standard"},  # tenacity retries
                    connect_timeout=timeout_s,
                    read_timeout=timeout_s,
                    max_pool_connections=64,
                ),
            )
        self._client = client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, key: str, fn: Callable[[], T]) -> T:
        def attempt() -> T:
            try:
                return fn()
            except (ClientError, BotoCoreError) as exc:
                raise _classify(exc, key) from None

        policy = retrying(retry=retry_if_exception_type(StorageUnavailable),
                          stop=stop_after_attempt(self._retries))
        return policy(attempt)

    # -- CAS objects -----------------------------------------------------
    def read(self, key: str) -> Versioned:
        def go() -> Versioned:
            resp = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            return Versioned(resp["Body"].read(), str(resp["ETag"]))

        return self._call(key, go)

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        body = as_bytes(data)

        def go() -> str:
            resp = self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=body, IfMatch=etag,
                ContentType="application/json",
            )
            return str(resp["ETag"])

        try:
            return self._call(key, go)
        except NotFound:
            raise Conflict(f"object {key!r} vanished since it was read") from None

    def create_if_absent(self, key: str, data: Data) -> str:
        body = as_bytes(data)

        def go() -> str:
            resp = self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=body, IfNoneMatch="*",
                ContentType="application/json",
            )
            return str(resp["ETag"])

        return self._call(key, go)

    # -- plain objects ---------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        self._call(key, lambda: self._client.put_object(
            Bucket=self.bucket, Key=self._key(key), Body=data))

    def get(self, key: str) -> bytes:
        return self.read(key).data

    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        strip = len(self._key(""))

        def go() -> list[str]:
            keys: list[str] = []
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(obj["Key"][strip:] for obj in page.get("Contents", []))
            return sorted(keys)

        return self._call(prefix, go)

    def delete(self, key: str) -> None:
        self._call(key, lambda: self._client.delete_object(
            Bucket=self.bucket, Key=self._key(key)))

    def close(self) -> None:
        self._client.close()
