"""S3 (and S3-compatible) store using conditional writes.

``write_if_match`` sends ``If-Match: <etag>`` and ``create_if_absent`` sends
``If-None-Match: *``; ``head`` is a ``HEAD`` of the object (no body) and
returns the ``ETag`` exactly as ``GET`` does. An ETag is the MD5 of the
bytes, so writing the same bytes again gives the same ETag back
(``etags_differ_on_same_bytes`` is False; see :mod:`broker.storage.base`).
Answers map to errors thus:

* 412 (precondition failed) and 409 (a concurrent conditional write) mean
  "lost the race": :class:`Conflict`.
* 404 for a key: :class:`NotFound`; for the bucket (``NoSuchBucket``):
  :class:`StorageRefused`, since no retry will create it.
* Other 3xx/4xx (403 access denied, 400 bad request, 301/307 wrong region or
  endpoint) and missing or partial credentials: :class:`StorageRefused`,
  raised at once: nothing was written.
* Throttling, 408, 429, 5xx, connection errors and timeouts are retried with
  exponential backoff (tenacity); when ``retries`` attempts are used up the
  call raises :class:`StorageUnavailable` and, for a write, the outcome is
  unknown.

Credentials come from the usual boto3 chain (environment, profile, instance
role); the endpoint from ``endpoint_url=`` or ``AWS_ENDPOINT_URL``. The
store's ``url`` and every message name only bucket, prefix and endpoint host,
never a credential.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, cast

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

from broker.errors import (
    Conflict,
    NotFound,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from broker.storage.base import Data, Versioned
from broker.storage.cloud import CloudStore, PartsReader
from broker.storage.urlopts import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
     "ServiceUnavailable", "RequestTimeTooSkewed"}
)


def _classify(exc: Exception, key: str, bucket: str = "") -> StorageError:
    """Map a botocore error for ``key`` to the storage error the contract names."""
    where = f"s3://{bucket}" if bucket else "the bucket"
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode", 0) or 0)
        said = f"{code} (HTTP {status})" if code and status else (code or f"HTTP {status}")
        if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return Conflict(f"object {key!r} changed since it was read ({code or status})")
        if code == "NoSuchBucket":
            return StorageRefused(f"S3 bucket {where} does not exist ({said})")
        if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
            return NotFound(f"no object {key!r}")
        if status >= 500 or status in (408, 429) or code in _THROTTLE_CODES:
            return StorageUnavailable(f"S3 answered {said} for {key!r}")
        if status in (301, 307) or code in ("PermanentRedirect", "TemporaryRedirect"):
            region = meta.get("HTTPHeaders", {}).get("x-amz-bucket-region") or err.get("Region")
            hint = f" (it is in region {region})" if region else ""
            return StorageRefused(
                f"S3 redirected the request for {key!r}: {said}; {where} is not served by this "
                f"region or endpoint{hint}: set AWS_REGION or ?region= in the store URL"
            )
        if status == 403 or code == "AccessDenied":
            return StorageRefused(
                f"S3 denied access to {key!r} in {where}: {said}; "
                "check the credentials' permissions"
            )
        if 300 <= status < 500:
            return StorageRefused(f"S3 refused the request for {key!r}: {said}")
        return StorageUnavailable(f"S3 answered {said} for {key!r}")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        # The botocore message is not shown: only the class, never a key or secret.
        return StorageRefused(
            f"S3 credentials are missing or incomplete ({type(exc).__name__}): set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile or an instance role"
        )
    if isinstance(exc, ParamValidationError):
        return StorageRefused(f"invalid S3 request for {key!r}: {str(exc)[:300]}")
    return StorageUnavailable(f"S3 request for {key!r} failed: {type(exc).__name__}")


def _body(data: Data) -> IO[bytes]:
    """A fresh reader of ``data``'s parts for one attempt of a PUT (see PartsReader)."""
    return cast("IO[bytes]", PartsReader(data))  # a binary file in all but its stub type


def _stop_region_lookup_loops(**_: Any) -> None:
    """Refuse a bucket-region lookup nested inside another one.

    botocore answers a redirect that names no region by asking the bucket for
    its region (a ``HeadBucket``); if that is redirected too, without a region
    (a proxy or an S3-compatible endpoint that redirects everything), it asks
    again from inside the first lookup, without end: a ``RecursionError`` after
    about a thousand requests. Raising here, at the second level, makes the
    lookup find no region, so the original call fails with its redirect, which
    ``_classify`` refuses with its hint. Registered on ``before-call`` of
    ``HeadBucket`` only; costs a walk of a few dozen frames on that call.
    """
    depth = 0
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "get_bucket_region":
            depth += 1
            if depth >= 2:
                answer: Any = {
                    "Error": {"Code": "PermanentRedirect", "Message": "nested region lookup"},
                    "ResponseMetadata": {"HTTPStatusCode": 301, "HTTPHeaders": {}},
                }
                raise ClientError(answer, "HeadBucket")
        frame = frame.f_back  # type: ignore[assignment]


class S3Store(CloudStore):
    """Objects under ``s3://bucket/prefix``.

    ``retries`` is the number of attempts per call (at least 1) for transient
    failures; ``timeout_s`` (seconds) bounds both connecting and each read of
    the answer. ``client`` replaces the boto3 client (tests). Raises
    ``StorageRefused`` if the client cannot be set up (partial credentials,
    a named profile that does not exist).
    """

    etags_differ_on_same_bytes = False  # the MD5 of the bytes
    shared_across_processes = True
    failures = (ClientError, BotoCoreError)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client: Any | None = None,
    ) -> None:
        self.bucket = bucket
        endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        super().__init__("s3", bucket, prefix, retries=retries, timeout_s=timeout_s,
                         endpoint=endpoint_url.split("@")[-1] if endpoint_url else None)
        if client is None:
            region = region_name or os.environ.get("AWS_REGION") or os.environ.get(
                "AWS_DEFAULT_REGION") or "us-east-1"
            try:
                client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=endpoint_url,
                    region_name=region,
                    config=Config(
                        # One HTTP attempt per call: tenacity does the retrying, and
                        # botocore's "max_attempts" counts retries, so 1 would mean 2.
                        retries={"total_max_attempts": 1, "mode": "standard"},
                        connect_timeout=timeout_s,
                        read_timeout=timeout_s,
                        max_pool_connections=64,
                    ),
                )
            except (NoCredentialsError, PartialCredentialsError) as exc:
                raise _classify(exc, "", bucket) from None
            except BotoCoreError as exc:  # a named profile that does not exist, say
                raise StorageRefused(
                    f"cannot set up the S3 client for s3://{bucket}: {type(exc).__name__}"
                ) from None
        client.meta.events.register("before-call.s3.HeadBucket", _stop_region_lookup_loops)
        self._client = client

    def _error(self, exc: Exception, key: str) -> StorageError:
        return _classify(exc, key, self.bucket)

    # -- CAS objects -----------------------------------------------------
    def read(self, key: str) -> Versioned:
        def go() -> Versioned:
            resp = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            return Versioned(resp["Body"].read(), str(resp["ETag"]))

        return self._call(key, go)

    def head(self, key: str) -> str:
        """The object's ETag from a ``HEAD`` request (no body is transferred).

        A missing key raises ``NotFound`` after one more ``HEAD``, of the bucket,
        to tell it from a missing bucket (``StorageRefused``).
        """

        def go() -> str:
            resp = self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            return str(resp["ETag"])

        try:
            return self._call(key, go)
        except NotFound:
            # A HEAD answer has no body, so a missing bucket looks like a missing key.
            if self._bucket_missing():
                raise StorageRefused(f"S3 bucket s3://{self.bucket} does not exist") from None
            raise

    def _bucket_missing(self) -> bool:
        """True only if S3 says the bucket does not exist; False on any doubt."""
        try:
            self._call("", lambda: self._client.head_bucket(Bucket=self.bucket))
        except NotFound:
            return True
        except StorageError:
            return False
        return False

    def write_if_match(self, key: str, data: Data, etag: str) -> str:
        # The parts are streamed (a fresh reader per attempt), never joined: see
        # PartsReader. botocore still sends the body's CRC32, which S3 checks.
        def go() -> str:
            resp = self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=_body(data), IfMatch=etag,
                ContentType="application/json",
            )
            return str(resp["ETag"])

        try:
            return self._call(key, go)
        except NotFound:
            raise Conflict(f"object {key!r} vanished since it was read") from None

    def create_if_absent(self, key: str, data: Data) -> str:
        def go() -> str:
            resp = self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=_body(data), IfNoneMatch="*",
                ContentType="application/json",
            )
            return str(resp["ETag"])

        return self._call(key, go)

    # -- plain objects ---------------------------------------------------
    def put(self, key: str, data: bytes) -> str:
        resp = self._call(key, lambda: self._client.put_object(
            Bucket=self.bucket, Key=self._key(key), Body=data))
        return str(resp["ETag"])

    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix)

        def go() -> list[str]:
            paginator = self._client.get_paginator("list_objects_v2")
            return self._names(obj["Key"] for page in paginator.paginate(
                Bucket=self.bucket, Prefix=full) for obj in page.get("Contents", []))

        return self._call(prefix, go)

    def delete(self, key: str) -> None:
        self._call(key, lambda: self._client.delete_object(
            Bucket=self.bucket, Key=self._key(key)))

    def close(self) -> None:
        self._client.close()
