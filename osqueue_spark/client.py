"""``QueueClient``: a synchronous, thread-safe client of the broker's HTTP API.

Synchronous on purpose: Spark executors are threads and processes, not event
loops. Connections are kept alive in a pool shared by the client's threads.

Retries (tenacity, exponential backoff): transient failures (connection
errors, 503 storage/broker unavailable) are retried. A request whose outcome
is unknown (sent, then the connection broke) is retried too, except a push of
jobs without idempotency keys, which could be enqueued twice: that raises
``BrokerUnavailable`` so the caller decides. Give jobs a ``key`` to make push
retries safe.

Broker discovery: when the broker answers "not the broker" it names the new
one and the client follows. When the broker cannot be reached and the client
was given ``store=``, it reads the broker record from the queue object and
follows that.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any, NamedTuple
from urllib.parse import quote

import orjson
import urllib3
from tenacity import retry_if_exception, stop_after_delay

from broker import api, keys
from broker.errors import (
    BrokerUnavailable,
    InvalidRequest,
    NotTheBroker,
    OsqueueError,
    from_dict,
)
from broker.gcpause import gc_paused_for
from broker.retry import retrying


# NamedTuples, not frozen dataclasses: a worker builds tens of thousands a
# second, and a frozen dataclass's __init__ costs several times more.
class ClaimedJob(NamedTuple):
    """A job this worker holds. ``token`` fences every later call about it."""

    id: str
    payload: Any
    token: str
    attempt: int
    lease_expires_at: str


class ItemResult(NamedTuple):
    """The broker's answer about one token: ``ok``, or why not (``reason``)."""

    token: str
    ok: bool
    reason: str | None = None
    status: str | None = None


class _NotSent(BrokerUnavailable):
    """The request never reached the broker (safe to retry anything)."""


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, NotTheBroker):
        return True
    return isinstance(exc, OsqueueError) and exc.code in (
        "broker_unavailable", "storage_unavailable", "storage_error")


def _job_body(job: Any) -> dict[str, Any]:
    if isinstance(job, dict) and "payload" in job:
        unknown = set(job) - {"payload", "priority", "delay_s", "max_attempts", "key"}
        if unknown:
            raise InvalidRequest(f"unknown job fields {sorted(unknown)}")
        return job
    return {"payload": job}


def staged_line(job: Any) -> bytes:
    """A job (as for :meth:`QueueClient.push`) as one staged line (see :mod:`broker.api`)."""
    return _body_line(_job_body(job))


def _body_line(body: dict[str, Any]) -> bytes:
    """:func:`staged_line` of a body :func:`_job_body` already checked."""
    options = {k: v for k, v in body.items() if k != "payload" and v is not None}
    return api.staged_line(orjson.dumps(body["payload"], default=_json_default), options)


class QueueClient:
    """Client of one queue on a broker.

    ``url``: the broker (``http://host:port``); ``queue``: the queue name;
    ``token``: bearer token, if the broker wants one; ``store``: the store URL,
    for finding the broker when it moved; ``timeout_s``: per request (a
    long-poll claim adds its ``wait_s``); ``retry_s``: how long to keep
    retrying transient failures before raising.
    """

    def __init__(self, url: str, queue: str = "default", *, token: str | None = None,
                 store: str | None = None, timeout_s: float = 30.0, retry_s: float = 60.0,
                 pool_size: int = 32) -> None:
        self.url = url.rstrip("/")
        self.queue = keys.check_queue_name(queue)
        self.store_url = store
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._token = token
        self._pool_size = pool_size
        self._local = threading.local()
        self._lock = threading.Lock()
        self._http = self._new_pool()

    def _new_pool(self) -> urllib3.PoolManager:
        headers = {"content-type": "application/json"}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        return urllib3.PoolManager(maxsize=self._pool_size, headers=headers, retries=False)

    # pickling: Spark ships clients to executors; pools and locks are rebuilt there
    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "queue": self.queue, "store_url": self.store_url,
                "timeout_s": self.timeout_s, "retry_s": self.retry_s, "_token": self._token,
                "_pool_size": self._pool_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._http = self._new_pool()

    def __repr__(self) -> str:
        return f"QueueClient({self.url!r}, queue={self.queue!r})"  # never the token

    def close(self) -> None:
        self._http.clear()

    def __enter__(self) -> QueueClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def with_queue(self, queue: str) -> QueueClient:
        """A client of another queue on the same broker."""
        return QueueClient(self.url, queue, token=self._token, store=self.store_url,
                           timeout_s=self.timeout_s, retry_s=self.retry_s)

    # -- transport -----------------------------------------------------------------
    def _send(self, method: str, path: str, body: Any, timeout_s: float,
              *, ok_statuses: tuple[int, ...] = (200,)) -> Any:
        headers = None
        if isinstance(body, bytes):  # staged lines
            data: bytes | None = body
            headers = {**self._http.headers, "content-type": api.STAGED_CONTENT_TYPE}
        else:
            data = None if body is None else orjson.dumps(body, default=_json_default)
        try:
            resp = self._http.request(method, self.url + path, body=data, headers=headers,
                                      timeout=urllib3.Timeout(connect=5.0, read=timeout_s))
        except (urllib3.exceptions.NewConnectionError,
                urllib3.exceptions.ConnectTimeoutError) as exc:
            raise _NotSent(f"cannot reach broker at {self.url}: {type(exc).__name__}") from None
        except urllib3.exceptions.HTTPError as exc:
            raise BrokerUnavailable(
                f"request to {self.url} failed after sending: {type(exc).__name__}") from None
        if resp.status in ok_statuses:
            return orjson.loads(resp.data) if resp.data else None
        try:
            parsed = orjson.loads(resp.data)
        except orjson.JSONDecodeError:
            parsed = {"error": f"HTTP {resp.status}: {resp.data[:200]!r}", "code": ""}
        if not isinstance(parsed, dict):
            parsed = {"error": f"HTTP {resp.status}", "code": ""}
        if resp.status == 409 and "results" in parsed:
            return parsed  # per-token answers, some stale
        raise from_dict(parsed, resp.status)

    def _discover(self, hint: str | None) -> bool:
        """Point the client at the current broker; True if the URL changed."""
        url = hint
        if url is None and self.store_url is not None:
            from broker.storage import store_from_url

            try:
                raw = orjson.loads(store_from_url(self.store_url).read(
                    keys.state_key(self.queue)).data)
                url = (raw.get("broker") or {}).get("url")
            except (OsqueueError, orjson.JSONDecodeError):
                return False
        if url and url.rstrip("/") != self.url:
            with self._lock:
                self.url = url.rstrip("/")
            return True
        return False

    def request(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None,
                safe_to_retry: bool = True) -> Any:
        """Send one API call with retries and broker discovery; return the parsed body."""
        timeout = self.timeout_s if timeout_s is None else timeout_s

        def once() -> Any:
            try:
                return self._send(method, path, body, timeout, ok_statuses=(200,))
            except NotTheBroker as exc:
                if not self._discover(exc.details.get("url")):
                    raise
                raise
            except _NotSent:
                self._discover(None)
                raise
            except BrokerUnavailable:
                if not safe_to_retry:
                    raise OsqueueError(
                        "the broker may or may not have applied this push (connection lost "
                        "after sending); give jobs idempotency keys to make retries safe"
                    ) from None
                self._discover(None)
                raise

        return retrying(retry=retry_if_exception(_retryable),
                        stop=stop_after_delay(self.retry_s))(once)

    def _q(self, action: str = "") -> str:
        return f"/v1/queues/{quote(self.queue)}" + (f"/{action}" if action else "")

    # -- queue operations -------------------------------------------------------------
    def push(self, payload: Any, *, priority: int = 0, delay_s: float = 0.0,
             max_attempts: int | None = None, key: str | None = None) -> str:
        """Enqueue one job; return its id once durable."""
        job = {"payload": payload, "priority": priority, "delay_s": delay_s,
               "max_attempts": max_attempts, "key": key}
        return self.push_many([job])[0]

    def push_many(self, jobs: Iterable[Any], batch_size: int = 1000) -> list[str]:
        """Enqueue jobs in batches; each item is a payload or a dict with ``payload`` and
        optional ``priority``, ``delay_s``, ``max_attempts``, ``key``."""
        ids: list[str] = []
        for chunk in _chunks((_job_body(j) for j in jobs), batch_size):
            keyed = all(j.get("key") for j in chunk)
            body = b"".join(map(_body_line, chunk))  # the compact body: payloads pass through
            out = self.request("POST", self._q("push"), body, safe_to_retry=keyed)
            ids.extend(out["ids"])
        return ids

    def claim(self, worker: str, max_jobs: int = 1, lease_s: float = 30.0,
              wait_s: float = 0.0) -> list[ClaimedJob]:
        """Claim up to ``max_jobs``; with ``wait_s`` > 0, wait that long for one to appear."""
        out = self.request("POST", self._q("claim"),
                           {"worker": worker, "max_jobs": max_jobs, "lease_s": lease_s,
                            "wait_s": wait_s}, timeout_s=self.timeout_s + wait_s)
        fields, new = _CLAIMED_FIELDS, tuple.__new__
        with gc_paused_for(len(out["jobs"])):
            return [new(ClaimedJob, fields(j)) for j in out["jobs"]]

    def heartbeat(self, tokens: Sequence[str], lease_s: float = 30.0) -> list[ItemResult]:
        out = self.request("POST", self._q("heartbeat"),
                           {"tokens": list(tokens), "lease_s": lease_s})
        return _items(out)

    def complete(self, token: str, result: Any = None) -> ItemResult:
        return self.complete_many([(token, result)])[0]

    def complete_many(self, items: Iterable[tuple[str, Any]]) -> list[ItemResult]:
        pairs = items if isinstance(items, list) else list(items)
        with gc_paused_for(len(pairs)):
            body = {"items": [{"token": t, "result": r} for t, r in pairs]}
        return _items(self.request("POST", self._q("complete"), body))

    def fail(self, token: str, error: str = "", retry_in_s: float | None = None) -> ItemResult:
        return self.fail_many([(token, error, retry_in_s)])[0]

    def fail_many(self, items: Iterable[tuple[str, str, float | None]]) -> list[ItemResult]:
        body = {"items": [{"token": t, "error": e, "retry_in_s": r} for t, e, r in items]}
        return _items(self.request("POST", self._q("fail"), body))

    def stats(self) -> dict[str, Any]:
        return dict(self.request("GET", self._q("stats")))

    def jobs(self, status: str | None = None, limit: int = 100,
             after: str | None = None) -> list[dict[str, Any]]:
        params = [f"limit={limit}"]
        if status:
            params.append(f"status={quote(status)}")
        if after:
            params.append(f"after={quote(after)}")
        return list(self.request("GET", self._q("jobs") + "?" + "&".join(params))["jobs"])

    def iter_jobs(self, status: str | None = None, page: int = 1000) -> Iterator[dict[str, Any]]:
        after = None
        while True:
            batch = self.jobs(status, page, after)
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1]["id"]

    def create(self, **settings: Any) -> dict[str, Any]:
        """Create the queue now (or change settings such as ``max_attempts``)."""
        return dict(self.request("PUT", self._q(), {"settings": settings}))

    def redrive(self, ids: Sequence[str] | None = None) -> int:
        body = {"ids": list(ids) if ids is not None else None}
        return int(self.request("POST", self._q("redrive"), body)["redriven"])

    def purge(self, statuses: Sequence[str] | None = None) -> int:
        body = {"statuses": list(statuses) if statuses else None}
        return int(self.request("POST", self._q("purge"), body)["purged"])

    def pause(self) -> None:
        self.request("POST", self._q("pause"), {})

    def resume(self) -> None:
        self.request("POST", self._q("resume"), {})

    def stage(self, write_id: str, jobs: Sequence[Any]) -> int:
        """Stage jobs (as for :meth:`push`) under ``write_id`` without enqueueing
        them; staging a write id again replaces it. Returns how many were staged."""
        return self.stage_lines(write_id, b"".join(map(staged_line, jobs)))

    def stage_lines(self, write_id: str, lines: bytes) -> int:
        """Stage jobs already encoded as staged lines (see :mod:`broker.api`)."""
        body = orjson.dumps({"write_id": write_id}) + b"\n" + lines
        return int(self.request("POST", self._q("stage"), body)["staged"])

    def publish(self, prefix: str, keep: Sequence[str], once: str | None = None) -> dict[str, Any]:
        """Enqueue the staged writes ``keep`` in one commit; drop every write under ``prefix``.

        ``once``: a key that makes the publish happen at most once (within the
        queue's dedup window); a repeat discards what is staged instead.
        Returns ``{"published": n, "discarded": m, "duplicate": bool}``.
        """
        body = {"prefix": prefix, "keep": list(keep), "once": once}
        return dict(self.request("POST", self._q("publish"), body))

    def health(self) -> dict[str, Any]:
        return dict(self.request("GET", "/healthz"))


def _json_default(value: Any) -> Any:
    """Encode what Spark rows hold and JSON lacks: decimals as strings, bytes as text."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


# NamedTuples built from a tuple of all their fields (half the cost of calling them:
# workers make one per job).
_CLAIMED_FIELDS = operator.itemgetter("id", "payload", "token", "attempt", "lease_expires_at")


def _items(out: dict[str, Any]) -> list[ItemResult]:
    new = tuple.__new__
    with gc_paused_for(len(out["results"])):
        return [new(ItemResult, (r["token"], r["ok"], r.get("reason"), r.get("status")))
                for r in out["results"]]


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
