"""A broker in a dict, for :class:`~osqueue_spark.transport.MockTransport`: enough of
the HTTP API (push, claim, heartbeat, complete, fail, stats) for unit tests of the
client and the workers, with faults scripted per path. No thread, no socket."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker.errors import OsqueueError
from osqueue_spark import QueueClient
from osqueue_spark.transport import MockTransport, Request, Response

#: A scripted fault: an error to raise (as a transport would) or an answer to give.
Fault = OsqueueError | Response


def error(exc: OsqueueError) -> Response:
    """The answer a broker gives for ``exc``."""
    return Response.json(exc.to_dict(), exc.status)


@dataclass
class FakeBroker:
    """Jobs live in ``pending`` (id -> payload) until claimed into ``held``
    (token -> id); ``outcomes`` records completes and fails by job id. A job
    whose payload is ``{"fail_as": status}`` fails into that status (``dead``);
    a token in ``lost_tokens`` is answered as a lease lost."""

    url: str = "http://fake:1"
    pending: dict[str, Any] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    payloads: dict[str, Any] = field(default_factory=dict)  # every job pushed, by id
    outcomes: dict[str, tuple[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    faults: dict[str, deque[Fault]] = field(default_factory=dict)
    lost_tokens: set[str] = field(default_factory=set)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def client(self, **kw: Any) -> QueueClient:
        """A client of queue ``q`` on this broker (retries short unless told)."""
        kw.setdefault("retry_s", 2.0)
        return QueueClient(kw.pop("url", self.url), "q", transport=MockTransport(self), **kw)

    def fail_next(self, action: str, *faults: Fault) -> None:
        """The next calls to ``action`` (``push``, ``claim``, ...) meet ``faults`` in turn."""
        self.faults.setdefault(action, deque()).extend(faults)

    def __call__(self, request: Request) -> Response:
        self.requests.append(request)
        action = request.url.rsplit("/", 1)[-1]
        queued = self.faults.get(action)
        if queued:
            fault = queued.popleft()
            if isinstance(fault, Response):
                return fault
            raise fault
        handler: Callable[[Request], Any] | None = getattr(self, f"_{action}", None)
        if handler is None:
            return Response(404, {}, b"no such route")
        return Response.json(handler(request))

    # -- the API ---------------------------------------------------------------------
    def _push(self, request: Request) -> dict[str, Any]:
        assert request.body is not None
        ids = []
        for line in request.body.decode().splitlines():
            _, _, payload = line.partition("\t")
            job_id = f"j{next(self._ids)}"
            self.pending[job_id] = self.payloads[job_id] = orjson.loads(payload)
            ids.append(job_id)
        return {"ids": ids}

    def _claim(self, request: Request) -> dict[str, Any]:
        want = request.json()["max_jobs"]
        jobs = []
        for job_id in list(self.pending)[:want]:
            token = f"t-{job_id}"
            self.held[token] = job_id
            jobs.append({"id": job_id, "payload": self.pending.pop(job_id), "token": token,
                         "attempt": 1, "lease_expires_at": "2030-01-01T00:00:00.000Z"})
        return {"jobs": jobs}

    def _answer(self, token: str, status: str) -> dict[str, Any]:
        if token in self.lost_tokens or token not in self.held:
            return {"token": token, "ok": False, "reason": "stale_token"}
        return {"token": token, "ok": True, "status": status}

    def _heartbeat(self, request: Request) -> dict[str, Any]:
        return {"results": [self._answer(t, "claimed") for t in request.json()["tokens"]]}

    def _complete(self, request: Request) -> dict[str, Any]:
        results = []
        for item in request.json()["items"]:
            results.append(answer := self._answer(item["token"], "gone"))
            if answer["ok"]:
                self.outcomes[self.held.pop(item["token"])] = ("completed", item["result"])
        return {"results": results}

    def _fail(self, request: Request) -> dict[str, Any]:
        results = []
        for item in request.json()["items"]:
            token = item["token"]
            payload = self._payload_of(token)
            status = payload.get("fail_as", "pending") if isinstance(payload, dict) else "pending"
            results.append(answer := self._answer(token, status))
            if answer["ok"]:
                self.outcomes[self.held.pop(token)] = ("failed", item["error"])
        return {"results": results}

    def _payload_of(self, token: str) -> Any:
        return self.payloads.get(self.held.get(token, ""))

    def _stats(self, request: Request) -> dict[str, Any]:
        return {"total": len(self.pending) + len(self.held)}
