"""Send fuzz requests (:mod:`tests.support.fuzz_requests`) to a real broker and judge
each answer (the fuzz suite, tests/integration/broker/test_fuzz_http.py).

:meth:`Harness.check` sends one request over a kept-alive connection and
returns what it broke, each problem one line:

* ``5xx``: any status of 500 or more (but a 503 from ``/healthz``, its "not ok", and
  the SPEC's 503 ``queue_full``);
* ``format``: an answer that is neither 2xx nor a JSON error ``{"error", "code"}``
  (:class:`broker.http.schemas.ErrorBody`; a redirect is neither), a 2xx answer its
  route's response model refuses, or an error message over :data:`MAX_MESSAGE_CHARS`;
* ``refused``: a request that must be refused (see :func:`must_refuse`) that was not;
* ``state``: a refused request after which the store differs (see :meth:`Harness.snapshot`;
  the one exception, a keyed push refused as full, is :meth:`Harness._remembered_refusal`);
* ``secret``: a 10-character piece of the token or of the fake store credentials in
  the answer's body or headers, or a queue name or the broker id in a 2xx answer to
  a caller without the token.

**Quiet store.** A request is blamed for every change to the store made while
it ran, so the broker must make none of its own: the queues the suite uses are
kept paused (a claim takes nothing, so no lease expires and no job is
reclaimed), valid tokens are never sent (nothing completes, so nothing is
archived), the broker's own lease is an hour (no renewal), and receipts a keyed
call leaves unwritten are written at once by a harness write (:meth:`Harness.settle`)
instead of a second later. A purge or redrive that succeeded is followed by
re-seeding (:meth:`Harness.seed`), so later ones have jobs to destroy.
"""

from __future__ import annotations

import base64
import os
import re
import time
from pathlib import Path
from typing import Any

import orjson
import urllib3
from pydantic import BaseModel, ValidationError

from broker.http import schemas
from broker.http.route import JSON, JSON_OR_STAGED, STAGED
from broker.limits import MAX_LEASE_S, MAX_QUEUE_NAME_CHARS
from broker.wire import STAGED_CONTENT_TYPE
from tests.support.fuzz_requests import OVERSIZE, SEEDED, VALID_QUEUES, FuzzRequest

#: Longest error message allowed: a bad value may be quoted by a short prefix only.
MAX_MESSAGE_CHARS = 1000
#: Auth kinds that carry no valid token (see fuzz_requests.AUTH_KINDS); "lowercase" and
#: "double-space" may fairly be read as the token, so neither way is asserted for them.
UNAUTHORISED = frozenset({"none", "wrong", "token+x", "token-1", "bare", "basic", "empty"})
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_QUEUE_NAME_CHARS - 1}}}")
#: Hidden version files of the file store's objects (``.name.v-<etag>``).
_VERSION = re.compile(r"^\.(.+)\.v-[^/]+$")
_SECRET_WINDOW = 10
#: The media types each kind of route body takes (the OpenAPI document's).
_TAKES = {JSON: {"application/json"}, STAGED: {STAGED_CONTENT_TYPE},
          JSON_OR_STAGED: {"application/json", STAGED_CONTENT_TYPE}}


def valid_queue(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and ".." not in name


def unknown_fields(value: Any, schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """Paths of object keys in ``value`` that ``schema`` does not name (where it names them)."""
    ref = schema.get("$ref")
    if ref:
        schema = defs[ref.rsplit("/", 1)[1]]
    for branch in schema.get("anyOf", []):
        found = unknown_fields(value, branch, defs)
        if found:
            return found
    out = []
    if isinstance(value, dict) and "properties" in schema and \
            schema.get("additionalProperties") is not True:
        props = schema["properties"]
        for key, sub in value.items():
            if key not in props:
                out.append(key)
            else:
                out += [f"{key}.{k}" for k in unknown_fields(sub, props[key], defs)]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += [f"[{i}].{k}" for k in unknown_fields(item, schema["items"], defs)]
    return out


def body_refusal(model: type[BaseModel], raw: bytes) -> str | None:
    """Why ``model`` refuses the JSON body ``raw`` (an empty body read as ``{}``), or None.

    The body is parsed as the broker parses it (orjson), then validated: pydantic's own
    JSON parser stops at 200 levels, short of a payload the broker takes."""
    raw = raw if raw.strip() else b"{}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "not JSON"
    try:
        model.model_validate(value)
    except ValidationError as exc:
        return f"model: {exc.errors()[0]['type']} at {exc.errors()[0]['loc']}"
    except TypeError:  # schemas._storable on an integer past 64 bits: the model cannot say
        return None
    schema = model.model_json_schema()
    unknown = unknown_fields(value, schema, schema.get("$defs", {}))
    return f"unknown field {unknown[0]!r}" if unknown else None


def must_refuse(req: FuzzRequest) -> str | None:
    """Why the broker must refuse ``req`` (answer 4xx), or None if it may serve it."""
    route = req.route
    if route is None:
        return "no route serves this method and path"
    if route.auth and req.auth in UNAUTHORISED:
        return f"no valid token ({req.auth})"
    if any(name == "Origin" for name, _ in req.headers):
        return "an Origin not the broker's own (a web page's request)"
    if route.method not in ("GET", "HEAD"):
        sent = next((v for name, v in req.headers if name == "Content-Type"), None)
        if sent is None or sent.partition(";")[0].strip().lower() not in _TAKES[route.body]:
            return f"content type {sent!r}, not one the route takes"
    if req.queue is not None and not valid_queue(req.queue):
        return "invalid queue name"
    if route.request is None:  # takes no body (and reads none)
        return None
    if len(req.body) >= OVERSIZE:
        return "body over the request-size limit"
    if route.body == STAGED:
        return body_refusal(schemas.StageHeader, req.body.partition(b"\n")[0] or b"null")
    return None if req.staged else body_refusal(route.request, req.body)


def windows(secret: str) -> list[bytes]:
    raw = secret.encode()
    return [raw[i:i + _SECRET_WINDOW] for i in range(len(raw) - _SECRET_WINDOW + 1)]


class Harness:
    """Sends requests to the broker at ``url`` whose store is the directory ``root``.

    ``secrets``: strings no answer may hold any 10-character piece of (the token first).
    ``watched``: directories snapshot along with the store (canaries outside it).
    ``private``: strings only a caller with the token may see (queue names, broker id).
    """

    def __init__(self, url: str, root: Path, secrets: list[str], watched: list[Path],
                 private: list[str]) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.pool = urllib3.HTTPConnectionPool(
            host, int(port), maxsize=1, block=True, retries=False,
            timeout=urllib3.Timeout(connect=5.0, read=30.0))
        self.root = root
        self.token = secrets[0]
        self.secret_windows = [w for s in secrets for w in windows(s)]
        self.watched = [root, *watched]
        self.private = [p.encode() for p in private]
        self.sent = 0  # fuzz requests sent (not the harness's own calls)
        self.started = time.monotonic()

    # -- sending -------------------------------------------------------------------
    def auth_header(self, kind: str) -> str | None:
        token = self.token
        return {"valid": f"Bearer {token}", "none": None, "wrong": "Bearer wrong-token",
                "token+x": f"Bearer {token}x", "token-1": f"Bearer {token[:-1]}",
                "lowercase": f"bearer {token}", "bare": token,
                "basic": "Basic " + base64.b64encode(f"fz:{token}".encode()).decode(),
                "double-space": f"Bearer  {token}", "empty": ""}[kind]

    def send(self, method: str, path: str, body: bytes = b"", auth: str = "valid",
             headers: tuple[tuple[str, str], ...] = ()) -> urllib3.BaseHTTPResponse:
        h = urllib3.HTTPHeaderDict()
        for name, value in headers:
            h.add(name, value)
        authorization = self.auth_header(auth)
        if authorization is not None:
            h.add("Authorization", authorization)
        return self.pool.urlopen(method, path, body=body if body or method not in (
            "GET", "HEAD") else None, headers=h, redirect=False, assert_same_host=False,
            preload_content=True, retries=False)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """A harness call with the token, that must succeed; its decoded answer."""
        r = self.send(method, path, b"" if body is None else orjson.dumps(body),
                      headers=(("Content-Type", "application/json"),))
        assert r.status < 300, f"harness call {method} {path} -> {r.status} {r.data[:300]!r}"
        return orjson.loads(r.data) if r.data else None

    # -- the store -----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Every directory, file and link under the store root (and the canaries): path ->
        its bytes (a link: its target and that file's bytes). Left out: the file store's
        superseded version files, which no link names and its reaper thread deletes in
        the background; nothing reads them."""
        out: dict[str, Any] = {}
        for top in self.watched:
            for dirpath, _dirs, filenames in os.walk(top):
                here = Path(dirpath)
                out[str(here)] = "dir"
                linked = set()
                for name in filenames:
                    path = here / name
                    if path.is_symlink():
                        target = os.readlink(path)
                        linked.add(target)
                        out[str(path)] = ("link", target, _read(path))
                for name in filenames:
                    path = here / name
                    if path.is_symlink() or (_VERSION.match(name) and name not in linked):
                        continue
                    out[str(path)] = _read(path)
        return out

    # -- judging ---------------------------------------------------------------------
    def check(self, req: FuzzRequest) -> list[str]:
        """Send ``req``; the invariants it broke (see the module docstring)."""
        before = self.snapshot()
        try:
            r = self.send(req.method, req.path, req.body, req.auth, req.headers)
        except urllib3.exceptions.HTTPError as exc:
            return [f"no answer: {type(exc).__name__}: {str(exc)[:200]}"]
        finally:
            self.sent += 1
        status, data = r.status, r.data
        problems = self._judge(req, status, dict(r.headers), data)
        if status >= 400:
            after = self.snapshot()
            if after != before and not self._remembered_refusal(req, status, data, before,
                                                                 after):
                problems.append("state: the store changed: " + _diff(before, after))
        self.settle(req, status)
        return [f"{p} [{req.method} -> {status} {data[:200]!r}]" for p in problems]

    def _remembered_refusal(self, req: FuzzRequest, status: int, data: bytes,
                            before: dict[str, Any], after: dict[str, Any]) -> bool:
        """A keyed push refused as ``queue_full`` is remembered, by design, so that a
        late copy of it is refused too (broker.model.transitions._push): that write to
        its queue's object is the one change a refused request may make."""
        keyed = any(n.lower() == "idempotency-key" for n, _ in req.headers)
        if status != 503 or _code(data) != "queue_full" or not keyed or req.queue is None:
            return False
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        return changed == {str(self.root / req.queue / "queue.json")}

    def _judge(self, req: FuzzRequest, status: int, headers: dict[str, str],
               data: bytes) -> list[str]:
        problems = []
        healthz_not_ok = status == 503 and req.path.startswith("/healthz")
        # SPEC: "503 ... queue full" (a push past max_state_bytes), in the error format
        if status >= 500 and not healthz_not_ok and not (
                status == 503 and _code(data) == "queue_full"):
            problems.append(f"5xx: status {status}")
        why = must_refuse(req)
        if why is not None and status < 400:
            problems.append(f"refused: must be refused ({why}) but got {status}")
        if not 200 <= status < 300 and not healthz_not_ok:
            problems += self._error_format(req, status, data)
        elif req.method != "HEAD" and req.route is not None and req.route.response is not None \
                and 200 <= status < 300:
            try:  # (parsed by orjson: pydantic's parser stops at 200 levels, short of a payload)
                req.route.response.model_validate(orjson.loads(data))
            except (ValidationError, orjson.JSONDecodeError) as exc:
                problems.append(f"format: a {status} answer its response model refuses: "
                                f"{str(exc)[:200]}")
        seen = data + repr(sorted(headers.items())).encode()
        leaked = [w for w in self.secret_windows if w in seen]
        if leaked:
            problems.append(f"secret: the answer holds {leaked[0][:4]!r}... of a secret")
        if req.auth in UNAUTHORISED and 200 <= status < 300:
            shown = [p.decode()[:20] for p in self.private if p in data]
            if shown:
                problems.append(f"secret: an answer without the token shows {shown}")
        return problems

    @staticmethod
    def _error_format(req: FuzzRequest, status: int, data: bytes) -> list[str]:
        if status < 400:
            return [f"format: status {status} is neither a success nor an error"]
        if req.method == "HEAD":
            return []  # an answer to HEAD has no body
        try:
            error = schemas.ErrorBody.model_validate(orjson.loads(data))
        except (ValidationError, orjson.JSONDecodeError):
            return [f"format: a {status} that is not JSON {{error, code}}"]
        if len(error.error) > MAX_MESSAGE_CHARS:
            return [f"format: a {len(error.error)}-character error message"]
        return []

    # -- keeping the store quiet ---------------------------------------------------------
    def settle(self, req: FuzzRequest, status: int) -> None:
        """After ``req``: keep its queue paused, write receipts it left unwritten, and
        re-seed a seeded queue a purge or redrive may have emptied."""
        queue = req.queue
        if queue not in VALID_QUEUES or req.route is None or req.route.method == "GET":
            return
        keyed = any(n.lower().startswith("idempotency-") for n, _ in req.headers)
        if status < 300 or keyed:
            r = self.send("POST", f"/v1/queues/{queue}/pause",
                          headers=(("Content-Type", "application/json"),))
            if r.status == 200 and keyed:  # two writes: each carries the receipts
                self.call("POST", f"/v1/queues/{queue}/resume")
                self.call("POST", f"/v1/queues/{queue}/pause")
        if status < 300 and queue in SEEDED:
            self.seed(queue, check=True)

    def seed(self, queue: str, check: bool = False) -> None:
        """Give ``queue`` pending, claimed (leased for a day) and dead jobs, and pause it.
        ``check``: only if it lacks one of them (or its object grew large)."""
        q = f"/v1/queues/{queue}"
        if check:
            counts = self.call("GET", f"{q}/stats")["counts"]
            small = (self.root / queue / "queue.json").stat().st_size < 256 * 1024
            if small and all(counts.get(s, 0) >= 2 for s in ("pending", "claimed", "dead")):
                return
        self.call("PUT", q, {"settings": {"max_state_bytes": 512 * 1024 * 1024,
                                          "max_payload_bytes": 256 * 1024, "max_attempts": 3}})
        self.call("POST", f"{q}/resume")
        self.call("POST", f"{q}/purge", {"statuses": ["pending", "claimed", "dead"]})
        for n, max_attempts in ((2, 1), (2, 3)):  # to be dead, to stay claimed
            self.call("POST", f"{q}/push", {"jobs": [
                {"payload": {"seed": i}, "max_attempts": max_attempts} for i in range(n)]})
            jobs = self.call("POST", f"{q}/claim", {"worker": "seed", "max_jobs": n,
                                                    "lease_s": MAX_LEASE_S})["jobs"]
            assert len(jobs) == n
            if max_attempts == 1:
                self.call("POST", f"{q}/fail", {"items": [
                    {"token": j["token"], "error": "seeded"} for j in jobs]})
        self.call("POST", f"{q}/push", {"jobs": [{"payload": {"seed": i}} for i in range(3)]})
        self.call("POST", f"{q}/pause")


def _code(data: bytes) -> Any:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None


def _diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return ", ".join(("+" if k not in before else "-" if k not in after else "~") + k
                     for k in changed[:5]) + (f" and {len(changed) - 5} more"
                                              if len(changed) > 5 else "")
