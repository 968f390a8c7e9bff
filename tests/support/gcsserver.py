"""A small Google Cloud Storage JSON-API test server on 127.0.0.1, written by us for
osqueue's tests. It is NOT Google's and NOT an emulator of all of GCS.

Why it exists: the GCS emulator on PyPI (``gcp-storage-emulator``) ignores generation
preconditions (a stale ``ifGenerationMatch`` write and a create over an existing object
are both accepted), so it cannot show compare-and-set; Google's own testbench and
fake-gcs-server are not on the package registries this project installs from. This
server serves exactly the requests the official ``google-cloud-storage`` client makes
for :class:`broker.storage.gcs.GCSStore`, and enforces the preconditions:

* uploads: ``POST /upload/storage/v1/b/{bucket}/o?uploadType=multipart|media|resumable``
  (a resumable upload is finished by ``PUT`` of the session URL it answers with);
* reads: ``GET /download/storage/v1/b/{bucket}/o/{name}?alt=media`` (also without
  ``/download``) with ``X-Goog-Generation`` and ``X-Goog-Hash`` (md5, and crc32c when
  ``google-crc32c`` is installed); ``GET /storage/v1/b/{bucket}/o/{name}`` (metadata);
* ``GET /storage/v1/b/{bucket}/o?prefix=&maxResults=&pageToken=`` (sorted, paginated);
* ``DELETE /storage/v1/b/{bucket}/o/{name}``; ``GET /storage/v1/b/{bucket}``;
  ``POST /storage/v1/b`` (create a bucket).

Preconditions (query parameters, as the JSON API takes them): ``ifGenerationMatch=N``
holds only if the object's live generation is N, and ``ifGenerationMatch=0`` only if
there is no live object; ``ifGenerationNotMatch=N`` holds only if the live generation
is not N (0: only if the object exists). A failed one answers 412 and changes nothing.
``ifMetagenerationMatch`` / ``ifMetagenerationNotMatch`` are answered 501 rather than
ignored. Generations come from one counter per server, at least the current time in
microseconds (as GCS's do), so they only grow and never repeat, not even after a
delete. A resumable upload checks its preconditions when it is started and again when
its last byte arrives. No authentication: any credentials or none are accepted.
:meth:`GCSServer.inject` makes the next requests answer chosen error statuses
without touching any object (injected faults for tests).

Objects live in memory only; every request is decided under one lock, so conditional
writes are atomic even with a threaded server. ``ignore_preconditions=True``
(``--ignore-preconditions``) makes the server accept every write regardless, as
``gcp-storage-emulator`` does: the store's self-test must refuse it.

In-process (a thread)::

    server = GCSServer().start(); server.create_bucket("b"); ...; server.stop()

As its own process (prints ``gcsserver ready on http://127.0.0.1:PORT`` on stderr once
it accepts requests)::

    python -m tests.support.gcsserver [--port 0] [--bucket NAME ...] [--ignore-preconditions]
"""

from __future__ import annotations

import argparse
import base64
import collections
import datetime
import hashlib
import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.support.serving import StopSignals, ThreadedServer

#: Largest page a list request gets (GCS: 1000).
MAX_PAGE = 1000


@dataclass
class _Object:
    data: bytes
    generation: int
    content_type: str
    updated: str


@dataclass
class _Upload:
    bucket: str
    name: str
    content_type: str
    query: dict[str, str]


class _Refusal(Exception):
    """An error answer: HTTP status, GCS ``reason`` and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def _hashes(data: bytes) -> dict[str, str]:
    """The object's ``md5Hash`` and ``crc32c`` (base64), crc32c only if it can be had."""
    out = {"md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode()}
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - installed with google-cloud-storage
        return out
    out["crc32c"] = base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
    return out


class GCSState:
    """Buckets and objects, and every decision about them, under one lock."""

    def __init__(self, *, ignore_preconditions: bool = False, max_page: int = MAX_PAGE) -> None:
        self.ignore_preconditions = ignore_preconditions
        self.max_page = max_page
        self.lock = threading.Lock()
        self.buckets: dict[str, dict[str, _Object]] = {}
        self.uploads: dict[str, _Upload] = {}
        #: (status, method or None: any) of the injected faults still to answer, in order.
        self.faults: list[tuple[int, str | None]] = []
        #: "METHOD /path" of the latest requests (faulted ones too), oldest first.
        self.seen: collections.deque[str] = collections.deque(maxlen=1000)
        self._last_generation = 0

    def take_fault(self, request: str) -> int | None:
        """Note ``request`` (``"METHOD /path"``); the status an injected fault answers it
        with, if any: the first one still to answer that applies to its method."""
        method = request.partition(" ")[0]
        with self.lock:
            self.seen.append(request)
            for i, (status, only) in enumerate(self.faults):
                if only is None or only == method:
                    del self.faults[i]
                    return status
            return None

    def _next_generation(self) -> int:
        self._last_generation = max(self._last_generation + 1, time.time_ns() // 1000)
        return self._last_generation

    def bucket(self, name: str) -> dict[str, _Object]:
        try:
            return self.buckets[name]
        except KeyError:
            raise _Refusal(404, "notFound", "The specified bucket does not exist.") from None

    def check(self, bucket: str, name: str, query: dict[str, str]) -> _Object | None:
        """The live object (or None) if the request's preconditions hold, else 412."""
        current = self.bucket(bucket).get(name)
        for unsupported in ("ifMetagenerationMatch", "ifMetagenerationNotMatch"):
            if unsupported in query:
                raise _Refusal(501, "notImplemented",
                               f"{unsupported} is not supported by this test server")
        if self.ignore_preconditions:
            return current
        live = current.generation if current is not None else 0
        match = query.get("ifGenerationMatch")
        if match is not None and _generation(match) != live:
            raise _Refusal(412, "conditionNotMet", "At least one of the pre-conditions you "
                                                    "specified did not hold.")
        not_match = query.get("ifGenerationNotMatch")
        if not_match is not None and _generation(not_match) == live:
            raise _Refusal(412, "conditionNotMet", "At least one of the pre-conditions you "
                                                    "specified did not hold.")
        return current

    def write(self, bucket: str, name: str, data: bytes, content_type: str,
              query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            self.check(bucket, name, query)
            now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
            obj = _Object(data, self._next_generation(), content_type, now.replace("+00:00", "Z"))
            self.buckets[bucket][name] = obj
            return _resource(bucket, name, obj)

    def read(self, bucket: str, name: str, query: dict[str, str]) -> _Object:
        with self.lock:
            obj = self.check(bucket, name, query)
            wanted = query.get("generation")
            if obj is None or (wanted is not None and _generation(wanted) != obj.generation):
                raise _Refusal(404, "notFound", f"No such object: {bucket}/{name}")
            return obj

    def delete(self, bucket: str, name: str, query: dict[str, str]) -> None:
        with self.lock:
            obj = self.check(bucket, name, query)
            if obj is None:
                raise _Refusal(404, "notFound", f"No such object: {bucket}/{name}")
            del self.buckets[bucket][name]

    def list(self, bucket: str, query: dict[str, str]) -> dict[str, Any]:
        prefix = query.get("prefix", "")
        try:
            size = min(int(query.get("maxResults", self.max_page)), self.max_page)
        except ValueError:
            raise _Refusal(400, "invalid", "maxResults must be a number") from None
        after = query.get("pageToken", "")
        with self.lock:
            objects = self.bucket(bucket)
            names = sorted(n for n in objects if n.startswith(prefix) and n > after)
            page = names[:max(size, 1)]
            out: dict[str, Any] = {"kind": "storage#objects",
                                   "items": [_resource(bucket, n, objects[n]) for n in page]}
        if len(names) > len(page):
            out["nextPageToken"] = page[-1]
        return out

    def create_bucket(self, name: str) -> dict[str, Any]:
        with self.lock:
            if name in self.buckets:
                raise _Refusal(409, "conflict", "Your previous request to create the named "
                                                "bucket succeeded and you already own it.")
            self.buckets[name] = {}
        return _bucket_resource(name)


def _generation(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise _Refusal(400, "invalid", f"invalid generation {raw!r}") from None


def _resource(bucket: str, name: str, obj: _Object) -> dict[str, Any]:
    gen = str(obj.generation)
    return {"kind": "storage#object", "id": f"{bucket}/{name}/{gen}", "name": name,
            "bucket": bucket, "generation": gen, "metageneration": "1",
            "contentType": obj.content_type, "size": str(len(obj.data)),
            "timeCreated": obj.updated, "updated": obj.updated,
            "storageClass": "STANDARD", "etag": base64.b64encode(gen.encode()).decode(),
            **_hashes(obj.data)}


def _bucket_resource(name: str) -> dict[str, Any]:
    return {"kind": "storage#bucket", "id": name, "name": name, "metageneration": "1",
            "location": "US", "storageClass": "STANDARD"}


def _split_multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes, str]:
    """The metadata JSON, the media bytes and their content type of a multipart upload."""
    boundary = ""
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise _Refusal(400, "invalid", "multipart upload without a boundary")
    delim = b"--" + boundary.encode()
    first = body.find(delim)
    second = body.find(b"\r\n" + delim, first + len(delim))
    last = body.rfind(b"\r\n" + delim + b"--")
    if first < 0 or second < 0 or last <= second:
        raise _Refusal(400, "invalid", "malformed multipart upload")
    meta_part = body[first + len(delim):second]
    media_part = body[second + 2 + len(delim):last]
    meta_json = meta_part.partition(b"\r\n\r\n")[2]
    media_headers, _, media = media_part.partition(b"\r\n\r\n")
    media_type = "application/octet-stream"
    for line in media_headers.decode("latin-1").split("\r\n"):
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-type":
            media_type = value.strip()
    try:
        meta = json.loads(meta_json or b"{}")
    except ValueError:
        raise _Refusal(400, "invalid", "the metadata part is not JSON") from None
    return meta, media, meta.get("contentType") or media_type


def _check_crc32c(meta: dict[str, Any], data: bytes) -> None:
    """Refuse an upload whose declared crc32c does not match its bytes (as GCS does)."""
    declared = meta.get("crc32c")
    actual = _hashes(data).get("crc32c")
    if declared and actual and declared != actual:
        raise _Refusal(400, "invalid", "Provided CRC32C does not match the data")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.access_log:
            super().log_message(format, *args)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/json; charset=UTF-8") -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if body or status not in (204, 304):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        self._send(status, json.dumps(doc).encode())

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        segments = [unquote(s) for s in parts.path.split("/")]
        body = self._body()
        try:
            fault = self.server.state.take_fault(f"{self.command} {parts.path}")
            if fault is not None:
                raise _Refusal(fault, "injected", f"injected fault: HTTP {fault}")
            self._route(self.command, segments, query, body)
        except _Refusal as refusal:
            self._json(refusal.status, {"error": {
                "code": refusal.status, "message": refusal.message,
                "errors": [{"message": refusal.message, "domain": "global",
                            "reason": refusal.reason}]}})

    do_GET = do_POST = do_PUT = do_DELETE = _handle

    def _route(self, method: str, seg: list[str], query: dict[str, str], body: bytes) -> None:
        state = self.server.state
        # ['', 'storage', 'v1', 'b', bucket, 'o', name] and friends
        if seg[1:4] == ["upload", "storage", "v1"] and len(seg) == 7 and seg[6] == "o":
            self._upload(method, seg[5], query, body)
            return
        download = seg[1:4] == ["download", "storage", "v1"]
        api = seg[1:3] == ["storage", "v1"]
        if ((download and len(seg) == 8 and seg[4] == "b" and seg[6] == "o")
                or (api and len(seg) == 7 and seg[3] == "b" and seg[5] == "o")):
            bucket, name = seg[-3], seg[-1]
            if method == "GET" and (download or query.get("alt") == "media"):
                obj = state.read(bucket, name, query)
                self._send(200, obj.data, content_type=obj.content_type, headers={
                    "X-Goog-Generation": str(obj.generation), "X-Goog-Metageneration": "1",
                    "X-Goog-Stored-Content-Length": str(len(obj.data)),
                    "X-Goog-Hash": ",".join(f"{'md5' if k == 'md5Hash' else k}={v}"
                                            for k, v in sorted(_hashes(obj.data).items())),
                    "ETag": str(obj.generation)})
                return
            if method == "GET":
                self._json(200, _resource(bucket, name, state.read(bucket, name, query)))
                return
            if method == "DELETE":
                state.delete(bucket, name, query)
                self._send(204)
                return
        if api and len(seg) == 6 and seg[3] == "b" and seg[5] == "o" and method == "GET":
            self._json(200, state.list(seg[4], query))
            return
        if api and len(seg) == 5 and seg[3] == "b" and method == "GET":
            with state.lock:
                state.bucket(seg[4])
            self._json(200, _bucket_resource(seg[4]))
            return
        if api and len(seg) == 4 and seg[3] == "b" and method == "POST":
            name = json.loads(body or b"{}").get("name") or query.get("name", "")
            self._json(200, state.create_bucket(name))
            return
        raise _Refusal(501, "notImplemented",
                       f"{method} {urlsplit(self.path).path} is not served by this test server")

    def _upload(self, method: str, bucket: str, query: dict[str, str], body: bytes) -> None:
        state = self.server.state
        kind = query.get("uploadType", "")
        if method == "POST" and kind == "multipart":
            meta, data, content_type = _split_multipart(self.headers.get("Content-Type", ""),
                                                        body)
            _check_crc32c(meta, data)
            name = meta.get("name") or query.get("name", "")
            self._json(200, state.write(bucket, name, data, content_type, query))
            return
        if method == "POST" and kind == "media":
            content_type = self.headers.get("Content-Type", "application/octet-stream")
            self._json(200, state.write(bucket, query.get("name", ""), body, content_type,
                                        query))
            return
        if method == "POST" and kind == "resumable":
            meta = json.loads(body or b"{}")
            name = meta.get("name") or query.get("name", "")
            content_type = (meta.get("contentType")
                            or self.headers.get("X-Upload-Content-Type")
                            or "application/octet-stream")
            with state.lock:
                state.check(bucket, name, query)  # checked again when the last byte lands
                upload_id = uuid.uuid4().hex
                state.uploads[upload_id] = _Upload(bucket, name, content_type, query)
            host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_port}"
            location = (f"http://{host}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
                        f"?uploadType=resumable&upload_id={upload_id}")
            self._send(200, headers={"Location": location})
            return
        if method == "PUT" and kind == "resumable":
            self._resumable_put(query.get("upload_id", ""), body)
            return
        raise _Refusal(501, "notImplemented", f"upload {method} uploadType={kind!r}")

    def _resumable_put(self, upload_id: str, body: bytes) -> None:
        """One PUT carrying the whole object (``Content-Range: bytes 0-N/TOTAL``); a
        partial chunk is refused, since the client sends objects of up to 100 MiB whole."""
        state = self.server.state
        with state.lock:
            upload = state.uploads.pop(upload_id, None)
        if upload is None:
            raise _Refusal(404, "notFound", "no such upload session")
        span = self.headers.get("Content-Range", "")
        total = span.rpartition("/")[2]
        if not total.isdigit() or int(total) != len(body) or not span.startswith("bytes 0-"):
            raise _Refusal(501, "notImplemented",
                           f"only whole-object resumable PUTs are served (got {span!r})")
        self._json(200, state.write(upload.bucket, upload.name, body, upload.content_type,
                                    upload.query))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], state: GCSState, access_log: bool) -> None:
        super().__init__(addr, _Handler)
        self.state = state
        self.access_log = access_log

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops its connection (a timeout, a closed pool) is no error here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class GCSServer(ThreadedServer):
    """The test server on a thread of this process (``port=0``: a free port)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 ignore_preconditions: bool = False, max_page: int = MAX_PAGE,
                 access_log: bool = False) -> None:
        self.state = GCSState(ignore_preconditions=ignore_preconditions, max_page=max_page)
        super().__init__(_Server((host, port), self.state, access_log), "gcsserver")
        self.endpoint = f"http://{host}:{self.port}"

    def create_bucket(self, name: str) -> None:
        self.state.create_bucket(name)

    def inject(self, *statuses: int, method: str | None = None) -> None:
        """Answer the next requests (only those of ``method``, if given: e.g. ``"PUT"``,
        the last step of a resumable upload) with these statuses, changing nothing (tests)."""
        with self.state.lock:
            self.state.faults.extend((status, method) for status in statuses)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.gcsserver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    p.add_argument("--bucket", action="append", default=[], help="create this bucket first")
    p.add_argument("--ignore-preconditions", action="store_true",
                   help="accept every write regardless of preconditions (an unsafe store, "
                        "as gcp-storage-emulator is)")
    p.add_argument("--access-log", action="store_true", help="log every request on stderr")
    args = p.parse_args(argv)
    server = GCSServer(args.host, args.port, ignore_preconditions=args.ignore_preconditions,
                       access_log=args.access_log)
    stop = StopSignals()
    server.start()
    for bucket in args.bucket:
        server.create_bucket(bucket)
    print(f"gcsserver ready on {server.endpoint}", file=sys.stderr, flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
