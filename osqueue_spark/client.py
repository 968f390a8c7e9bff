"""``QueueClient``: a synchronous, thread-safe client of the broker's HTTP API.

Synchronous on purpose: Spark executors are threads and processes, not event
loops. Connections are kept alive in a pool shared by the client's threads.

Retries (tenacity, exponential backoff, for up to ``retry_s``): errors whose
class is ``retryable`` (connection errors, "outcome unknown", storage or
broker unavailable, "not the broker") are retried, each retry logged; others
are raised at once; a broker that never answered is given up on within
seconds (:mod:`osqueue_spark.retries`). Every operation is safe to repeat:
each push and each claim carries a fresh request key (the ``Idempotency-Key``
header), so a repeat after a lost answer gets the first answer (the same ids,
the same claimed jobs) instead of enqueueing twice or stranding jobs;
complete, fail and heartbeat are idempotent per token; publish is once-keyed.
A push whose retries ran out raises with its request key
(``exc.request_key``): pushing the same jobs again with ``request_key=`` it
creates nothing twice (:meth:`QueueClient.push_many`).

Transport: how bytes move is :mod:`osqueue_spark.transport`'s (urllib3 by
default; ``transport=MockTransport(handler)`` in tests).

Broker discovery: ``url`` may name several brokers (a list, or a
comma-separated string). When a broker answers "not the broker" it names the
owner and the client follows; when a broker cannot be reached the client
reads the owner from the queue object (given ``store=``) or tries the next
URL.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import orjson

from broker import paths
from broker.errors import (
    BrokerUnavailable,
    BrokerUnreachable,
    InvalidRequest,
    NotTheBroker,
    OsqueueError,
    RequestKeyReused,
    from_dict,
    shown,
)
from broker.fields import error_text
from broker.limits import (
    MAX_CLAIM_JOBS,
    MAX_DELAY_S,
    MAX_ITEMS,
    MAX_JOB_ID_CHARS,
    MAX_LEASE_S,
    MAX_PAGE_JOBS,
    MAX_WAIT_S,
    MAX_WORKER_CHARS,
    MIN_LEASE_S,
)
from broker.wire import STAGED_CONTENT_TYPE, CancelAnswer, ItemResult, loads, stage_body
from osqueue_spark.args import InvalidArgument, integer, json_bytes, number, text
from osqueue_spark.bodies import (
    BATCH_BYTES,
    ClaimedJob,
    checked,
    claimed_job,
    items_of,
    job_body,
    job_staged_line,
    json_default,
    line_chunks,
)
from osqueue_spark.calls import (
    KeyedCall,
    RequestNumbers,
    not_this_push,
    partly_pushed,
    push_key,
    reused_in_batch,
)
from osqueue_spark.retries import Attempts, answered
from osqueue_spark.transport import Transport, Urllib3Transport

#: The headers that carry a call's request key and the client's floor (see
#: :mod:`broker.model.receipts`).
REQUEST_KEY_HEADER = "idempotency-key"
REQUEST_FLOOR_HEADER = "idempotency-floor"




def _broker_urls(url: str | Sequence[str] | None, store: str | None) -> list[str]:
    items = [] if url is None else url.split(",") if isinstance(url, str) else list(url)
    urls = [u.strip().rstrip("/") for u in items if u and u.strip()]
    if not urls and store is None:
        raise InvalidRequest("QueueClient needs a broker URL, several, or store= (to find "
                             "the queue's broker from its object)")
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise InvalidRequest(f"broker URLs must be http(s) URLs, got {bad[0]!r}")
    return urls


def failure_text(i: int, error: Any) -> str:
    """Item ``i``'s error text as sent: a string (else ``InvalidArgument``), lone
    surrogates escaped (:func:`broker.fields.error_text`), which would otherwise
    make the body unencodable and the fail, not the job, fail."""
    if not isinstance(error, str):
        raise InvalidArgument(f"items[{i}].error must be a string, got {shown(error)}")
    return error_text(error)


class QueueClient:
    """Client of one queue.

    ``url``: the broker (``http://host:port``), or several (a list or a
    comma-separated string): the client finds the one that owns the queue;
    ``queue``: the queue name; ``token``: bearer token, if the brokers want
    one; ``store``: the store URL, for finding the owner when a broker cannot
    be reached; ``timeout_s``: per request (a long-poll claim adds its
    ``wait_s``); ``retry_s``: how long to keep retrying retryable failures
    before raising the last one; ``pool_size``: kept-alive connections per
    broker; ``transport``: another way to send requests (see
    :mod:`osqueue_spark.transport`), kept as given across forks and pickled
    with the client (the default one is rebuilt instead).
    """

    def __init__(self, url: str | Sequence[str] | None, queue: str = "default", *,
                 token: str | None = None, store: str | None = None, timeout_s: float = 30.0,
                 retry_s: float = 60.0, pool_size: int = 32,
                 transport: Transport | None = None) -> None:
        self.urls = _broker_urls(url, store)
        self.url = self.urls[0] if self.urls else ""  # "" with store only: found on first use
        self.queue = paths.check_queue_name(queue)
        self.store_url = store
        self.timeout_s = number("timeout_s", timeout_s, 0.001, math.inf)
        self.retry_s = number("retry_s", retry_s, 0.0, math.inf)
        self._token = token
        self._pool_size = pool_size
        self._custom_transport = transport
        self._own()

    def _own(self) -> None:
        """This process's connections, locks and request numbers: made at start,
        after unpickling, and again in a process forked from this one (which must
        share neither the parent's kept-alive connections nor its request keys;
        :func:`_renew_after_fork` calls this in the child before any of its
        threads can run)."""
        self._lock = threading.Lock()
        self._requests = RequestNumbers()
        self._headers = {"content-type": "application/json"}
        if self._token:
            self._headers["authorization"] = f"Bearer {self._token}"
        self._staged_headers = {**self._headers, "content-type": STAGED_CONTENT_TYPE}
        self._transport: Transport = self._custom_transport or Urllib3Transport(self._pool_size)
        _LIVE.add(self)

    # pickling: Spark ships clients to executors; pools and locks are rebuilt there
    def __getstate__(self) -> dict[str, Any]:
        return {"urls": self.urls, "url": self.url, "queue": self.queue,
                "store_url": self.store_url, "timeout_s": self.timeout_s,
                "retry_s": self.retry_s, "_token": self._token, "_pool_size": self._pool_size,
                "_custom_transport": self._custom_transport}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._own()  # a copy is another client: its own connections and keys

    def __repr__(self) -> str:
        return f"QueueClient({self.url!r}, queue={self.queue!r})"  # never the token

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> QueueClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def with_queue(self, queue: str) -> QueueClient:
        """A client of another queue on the same broker."""
        client = QueueClient(self.urls, queue, token=self._token, store=self.store_url,
                             timeout_s=self.timeout_s, retry_s=self.retry_s,
                             pool_size=self._pool_size, transport=self._custom_transport)
        client.url = self.url
        return client

    # -- transport -----------------------------------------------------------------
    def _send(self, method: str, path: str, body: Any, timeout_s: float,
              call: KeyedCall | None = None) -> Any:
        """One request to the current broker; its parsed answer, or the error it
        names (the transport's ``BrokerUnreachable``/``BrokerUnavailable`` pass)."""
        if isinstance(body, bytes):  # staged lines
            data: bytes | None = body
            headers = self._staged_headers
        else:
            data = None if body is None else json_bytes(body, "", json_default)
            headers = self._headers
        if call is not None:
            headers = {**headers, REQUEST_KEY_HEADER: call.key}
            if call.numbering is not None:
                headers[REQUEST_FLOOR_HEADER] = str(call.numbering.floor())
        url = self.url
        if not url:  # given only the store: ask the queue object who serves it
            url = self._store_owner() or ""
            if not url:
                raise BrokerUnreachable(f"no broker serves queue {self.queue!r} according to "
                                        f"{self.store_url}; pass broker URLs to create it")
            with self._lock:
                self.url = url = url.rstrip("/")
        status, _, answer = self._transport.send(method, url + path, headers, data, timeout_s)
        answered(url)
        if status == 200:
            return loads(answer) if answer else None  # payloads and results exact
        try:
            parsed = orjson.loads(answer)
        except orjson.JSONDecodeError:  # not a broker's error (a proxy's page): its first line
            text = answer[:200].decode("utf-8", "replace").strip().split("\n", 1)[0]
            parsed = {"error": f"HTTP {status}: {text or 'no error body'}", "code": ""}
        if not isinstance(parsed, dict):
            parsed = {"error": f"HTTP {status}", "code": ""}
        if status == 409 and "results" in parsed:
            return parsed  # per-token answers, some stale
        raise from_dict(parsed, status)

    def _store_owner(self) -> str | None:
        """The owner's URL as the queue object names it (needs ``store``)."""
        if self.store_url is None:
            return None
        from broker.storage import store_from_url

        try:
            store = store_from_url(self.store_url)
            try:
                raw = orjson.loads(store.read(paths.state_key(self.queue)).data)
            finally:
                store.close()
        except (OsqueueError, orjson.JSONDecodeError):
            return None
        broker = raw.get("broker") if isinstance(raw, dict) else None
        url = broker.get("url") if isinstance(broker, dict) else None
        return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None

    def _discover(self, failed: str, hint: str | None) -> None:
        """Point the client at the broker to try next, after ``failed`` did not
        serve: the owner named by ``hint`` or the queue object, else the next
        of the given URLs."""
        url = hint or self._store_owner()
        if (not url or url.rstrip("/") == failed) and self.urls:
            url = self.urls[(self.urls.index(failed) + 1) % len(self.urls)] \
                if failed in self.urls else self.urls[0]
        if not url:
            return
        with self._lock:
            if self.url == failed:
                self.url = url.rstrip("/")

    def request(self, method: str, path: str, body: Any = None, *,
                timeout_s: float | None = None, keyed: bool = False,
                call: KeyedCall | None = None) -> Any:
        """Send one API call with retries and broker discovery; return the parsed body.

        ``keyed`` (push and claim): the call gets a request key, sent with every
        retry of it, so a repeat gets the first answer; ``call``: that key, made
        by the caller (:meth:`push_many`).
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        numbering = self._requests
        n = numbering.begin() if keyed and call is None else None
        if n is not None:
            call = KeyedCall(numbering.key(n), numbering)
        attempts = Attempts(method, path, self.retry_s, lambda: [self.url, *self.urls])

        def once() -> Any:
            url = attempts.url = self.url
            try:
                return self._send(method, path, body, timeout, call)
            except NotTheBroker as exc:
                self._discover(url, exc.details.get("url"))
                raise
            except BrokerUnavailable as exc:
                attempts.failed(url, exc)
                self._discover(url, None)
                raise

        try:
            return attempts.run(once)
        finally:
            if n is not None:
                numbering.end(n)

    def _q(self, action: str = "") -> str:
        return f"/v1/queues/{quote(self.queue)}" + (f"/{action}" if action else "")

    # -- queue operations -------------------------------------------------------------
    def push(self, payload: Any, *, priority: int = 0, delay_s: float = 0.0,
             max_attempts: int | None = None, key: str | None = None,
             request_key: str | None = None, group: str | None = None) -> str:
        """Enqueue one job; return its id once durable. ``request_key``: as for
        :meth:`push_many`; ``group``: the job's group (1..128 characters without
        control characters; None: none), shown wherever the job is."""
        job = {"payload": payload, "priority": priority, "delay_s": delay_s,
               "max_attempts": max_attempts, "key": key, "group": group}
        return self.push_many([job], request_key=request_key)[0]

    def push_many(self, jobs: Iterable[Any], batch_size: int = 1000, *,
                  request_key: str | None = None,
                  batch_bytes: int = BATCH_BYTES) -> list[str]:
        """Enqueue jobs in batches; each item is a payload or a dict with ``payload`` and
        optional ``priority``, ``delay_s``, ``max_attempts``, ``key``, ``group``. A batch is
        one request of at most ``batch_size`` jobs and ``batch_bytes`` bytes
        (8 MiB; a single larger job goes alone): keep it under the broker's
        request limit (64 MiB by default), past which it is refused (413).

        The call has a request key: ``request_key`` (1 to 192 printable ASCII
        characters: :func:`osqueue_spark.calls.push_key`), else one the client
        makes. Its first batch is sent under it, batch ``i`` under ``{key}.{i}``,
        and each is retried under its own.
        A retryable error raised once a batch was sent (the outcome is unknown:
        some of the jobs may be in the queue) carries the key as
        ``exc.request_key`` and names it in its message: calling again with the
        same jobs, the same ``batch_size`` and ``batch_bytes``, and
        ``request_key=exc.request_key``
        within the queue's ``retry_ttl_s`` (default 600 s) answers the ids of the
        batches that landed, creating nothing for them, and pushes the rest
        (later, it pushes them all again). A repeat whose batch is answered with
        another number of ids than it holds (another ``batch_size``, other jobs)
        raises ``InvalidRequest`` before it pushes anything more; so does a
        batch whose receipt holds other jobs (``RequestKeyReused``: a key reused
        for new jobs, a repeat cut differently).
        A refusal (``queue_full``, a bad job) after earlier batches landed
        carries their count and ids, ``exc.details['pushed']`` and
        ``['ids']``: the jobs before the refused batch are in the queue, the
        rest are not. See docs/guarantees.md.
        """
        integer("batch_size", batch_size, 1, MAX_ITEMS)
        integer("batch_bytes", batch_bytes, 1, 1 << 40)
        numbering: RequestNumbers | None = None
        if request_key is None:
            numbering = self._requests
            n = numbering.begin()
            key = numbering.key(n)
        else:
            key = push_key(request_key)
        ids: list[str] = []
        sent = False
        try:
            for i, chunk in enumerate(line_chunks((job_body(j) for j in jobs), batch_size,
                                                  batch_bytes)):
                body = b"".join(chunk)  # the compact body: payloads pass through
                sent = True
                part = KeyedCall(key if i == 0 else f"{key}.{i}", numbering)
                try:
                    got = self.request("POST", self._q("push"), body, call=part)["ids"]
                except RequestKeyReused as exc:  # this batch's receipt holds other jobs
                    raise reused_in_batch(exc, key, i) from None
                if len(got) != len(chunk):  # answered from the receipt of another push
                    raise InvalidRequest(not_this_push(key, i, len(got), len(chunk)))
                ids.extend(got)
        except OsqueueError as exc:
            if not (sent and exc.retryable):
                if ids:  # refused after earlier batches landed: say which are in
                    raise partly_pushed(exc, ids).with_traceback(exc.__traceback__) from None
                raise
            if numbering is not None:  # the call stays open: its receipts are kept for a repeat
                self._abandon(numbering)
                numbering = None
            raise type(exc)(f"{exc.message}; the push's request key is {key!r}: push the same "
                            f"jobs with request_key={key!r} to learn what landed without "
                            "pushing them twice", **{**exc.details, "request_key": key}
                            ).with_traceback(exc.__traceback__) from None
        finally:
            if numbering is not None:
                numbering.end(n)
        return ids

    def _abandon(self, numbering: RequestNumbers) -> None:
        """A call of ``numbering`` may be repeated later, by its key: leave it open
        there for good (the floor that numbering's calls send never passes it, so
        the broker keeps its receipts, until ``retry_ttl_s``) and number this
        client's next calls afresh, so their receipts are still dropped at once."""
        with self._lock:
            if self._requests is numbering:
                self._requests = RequestNumbers()

    def claim(self, worker: str, max_jobs: int = 1, lease_s: float = 30.0,
              wait_s: float = 0.0, *, wait_for_queue: bool = False) -> list[ClaimedJob]:
        """Claim up to ``max_jobs``; with ``wait_s`` > 0, wait that long for one to appear.

        Raises ``UnknownQueue`` if the queue does not exist (a mistyped name),
        unless ``wait_for_queue``: then a queue not created yet (by its first
        push, or :meth:`create`) gives no jobs, after waiting ``wait_s`` for it.
        """
        text("worker", worker, MAX_WORKER_CHARS)
        integer("max_jobs", max_jobs, 1, MAX_CLAIM_JOBS)
        number("lease_s", lease_s, MIN_LEASE_S, MAX_LEASE_S)
        number("wait_s", wait_s, 0.0, MAX_WAIT_S)
        body = {"worker": worker, "max_jobs": max_jobs, "lease_s": lease_s, "wait_s": wait_s}
        if wait_for_queue:  # (only when asked: a broker before it refuses the field)
            body["wait_for_queue"] = True
        out = self.request("POST", self._q("claim"), body,
                           timeout_s=self.timeout_s + wait_s, keyed=True)
        return list(map(claimed_job, out["jobs"]))

    def heartbeat(self, tokens: Sequence[str], lease_s: float = 30.0, *,
                  raise_on_stale: bool = False) -> list[ItemResult]:
        """Extend the leases of ``tokens`` to ``lease_s`` s from now; refusals as for complete.
        Raises ``UnknownQueue`` if the queue does not exist."""
        number("lease_s", lease_s, MIN_LEASE_S, MAX_LEASE_S)
        out = self.request("POST", self._q("heartbeat"),
                           {"tokens": list(tokens), "lease_s": lease_s})
        return checked(items_of(out), raise_on_stale)

    def complete(self, token: str, result: Any = None, *,
                 raise_on_stale: bool = False) -> ItemResult:
        """Complete the job ``token`` holds. A token that no longer holds its job (lease
        ran out, job claimed again) gets ``ok=False`` and a reason and does not raise,
        unless ``raise_on_stale``: then ``StaleToken`` names every refused token."""
        return self.complete_many([(token, result)], raise_on_stale=raise_on_stale)[0]

    def complete_many(self, items: Iterable[tuple[str, Any]], *,
                      raise_on_stale: bool = False) -> list[ItemResult]:
        # No "result": null, no "retry_in_s": null: a body without null needs no NaN search.
        body = {"items": [{"token": t} if r is None else {"token": t, "result": r}
                          for t, r in items]}
        return checked(items_of(self.request("POST", self._q("complete"), body)), raise_on_stale)

    def fail(self, token: str, error: str = "", retry_in_s: float | None = None, *,
             raise_on_stale: bool = False) -> ItemResult:
        """Fail the job ``token`` holds (retried after ``retry_in_s`` s, or the queue's
        backoff; dead after its last attempt); refusals as for :meth:`complete`."""
        return self.fail_many([(token, error, retry_in_s)], raise_on_stale=raise_on_stale)[0]

    def fail_many(self, items: Iterable[tuple[str, str, float | None]], *,
                  raise_on_stale: bool = False) -> list[ItemResult]:
        body = {"items": [{"token": t, "error": failure_text(i, e)} if r is None else {
            "token": t, "error": failure_text(i, e),
            "retry_in_s": number(f"items[{i}].retry_in_s", r, 0.0, MAX_DELAY_S)}
            for i, (t, e, r) in enumerate(items)]}
        return checked(items_of(self.request("POST", self._q("fail"), body)), raise_on_stale)

    def stats(self) -> dict[str, Any]:
        return dict(self.request("GET", self._q("stats")))

    def jobs(self, status: str | None = None, limit: int = 100,
             after: str | None = None, *, tokens: bool = False) -> list[dict[str, Any]]:
        """A page of jobs in enqueue order. A lease shows its worker and times; its
        token (usable: it settles the job) only with ``tokens``."""
        params = [f"limit={integer('limit', limit, 1, MAX_PAGE_JOBS)}"]
        if status:
            params.append(f"status={quote(status)}")
        if after:
            params.append(f"after={quote(after)}")
        if tokens:
            params.append("tokens=true")
        return list(self.request("GET", self._q("jobs") + "?" + "&".join(params))["jobs"])

    def job(self, job_id: str) -> dict[str, Any]:
        """One job by id, wherever it is: the queue object, a segment object or the
        archive (``location`` says which), with its status, payload, result and
        last error; never a lease token. Raises ``JobNotFound`` if none holds it
        (no such id, or purged) and ``UnknownQueue`` for a queue that does not
        exist. The archive is searched by the job's block of the index: a few
        LISTs and GETs (docs/operations.md)."""
        text("job_id", job_id, MAX_JOB_ID_CHARS)
        return dict(self.request("GET", self._q(f"jobs/{quote(job_id, safe='')}")))

    def iter_jobs(self, status: str | None = None, page: int = 1000, *,
                  tokens: bool = False) -> Iterator[dict[str, Any]]:
        """Every job in enqueue order, a page of ``page`` at a time. Only an empty
        page ends it: a broker answers full pages until the last, but an older
        one could answer a short page of a queue with segments while more
        followed (one request more at the end is the price of reading either)."""
        after = None
        while batch := self.jobs(status, page, after, tokens=tokens):
            yield from batch
            after = batch[-1]["id"]

    def create(self, **settings: Any) -> dict[str, Any]:
        """Create the queue now (or change settings such as ``max_attempts``)."""
        return dict(self.request("PUT", self._q(), {"settings": settings}))

    def redrive(self, ids: Sequence[str] | None = None) -> int:
        """Return dead jobs to pending: those in ``ids``, or every one (``None``);
        how many. An empty ``ids`` is refused (``InvalidRequest``)."""
        body: dict[str, Any] = {"all": True} if ids is None else {"ids": list(ids)}
        return int(self.request("POST", self._q("redrive"), body, keyed=True)["redriven"])

    def purge(self, statuses: Sequence[str] | None = None) -> int:
        """Delete the jobs in ``statuses`` (pending, claimed, dead), or every pending
        and dead job (``None``); how many. An empty ``statuses`` is refused
        (``InvalidRequest``): "everything" is only ever asked for with ``None``."""
        body: dict[str, Any] = ({"all": True} if statuses is None
                                else {"statuses": list(statuses)})
        return int(self.request("POST", self._q("purge"), body, keyed=True)["purged"])

    def cancel(self, ids: Sequence[str]) -> list[CancelAnswer]:
        """Cancel jobs by id; one answer per id, in order: ``ok`` and status
        ``cancelled`` (a pending or delayed job: archived as cancelled) or
        ``cancel_requested`` (a claimed job: its worker's next heartbeat,
        complete or fail is answered cancelled), or not ``ok``, status
        ``finished`` or ``unknown``, with the reason (nothing changed). Safe to
        repeat. An empty ``ids`` is refused (``InvalidRequest``)."""
        if isinstance(ids, str) or not 0 < len(ids) <= MAX_ITEMS:
            raise InvalidArgument(f"cancel needs a list of 1..{MAX_ITEMS} job ids")
        ids = [text(f"ids[{n}]", i, MAX_JOB_ID_CHARS) for n, i in enumerate(ids)]
        out = self.request("POST", self._q("cancel"), {"ids": ids})
        return [CancelAnswer(r["id"], r["ok"], r.get("reason"), r.get("status"))
                for r in out["results"]]

    def pause(self) -> None:
        self.request("POST", self._q("pause"), {})

    def resume(self) -> None:
        self.request("POST", self._q("resume"), {})

    def stage(self, write_id: str, jobs: Sequence[Any]) -> int:
        """Stage jobs (as for :meth:`push`) under ``write_id`` without enqueueing
        them; staging a write id again replaces it. Returns how many were staged."""
        return self.stage_lines(write_id, b"".join(map(job_staged_line, jobs)))

    def stage_lines(self, write_id: str, lines: bytes) -> int:
        """Stage jobs already encoded as staged lines (see :mod:`broker.wire`)."""
        return int(self.request("POST", self._q("stage"), stage_body(write_id, lines))["staged"])

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


_LIVE: weakref.WeakSet[QueueClient] = weakref.WeakSet()


def _renew_after_fork() -> None:
    """In a forked child: every client gets its own connections, locks and keys."""
    for client in list(_LIVE):
        client._own()


os.register_at_fork(after_in_child=_renew_after_fork)
