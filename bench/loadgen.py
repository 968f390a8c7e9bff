"""A closed-loop HTTP load generator: N clients, one keep-alive connection each.

Each client sends a request, waits for the answer, records its latency, and
sends the next. Modes:

* ``noop``: POST /noop (the bare-Starlette ceiling);
* ``push``: push ``--batch`` jobs a request (``--body json``: a JSON body;
  ``--body lines``: the compact body ``QueueClient`` sends);
* ``cycle``: push ``--batch`` jobs, claim up to ``--batch``, complete them in one
  request; latencies are kept per operation.

    python bench/loadgen.py URL --mode cycle --clients 64 --seconds 3 [--batch 1]
    python bench/loadgen.py URL --mode fill [--fill 400000]
    python bench/loadgen.py URL --mode process --clients 8 --batch 2000 [--fill 0]

``process`` is what ``process()`` workers do to a deep queue: the queue is
filled first (``--fill`` jobs, pushes of 10,000 compact lines, not measured;
``--mode fill`` does only that, so a caller measuring the broker's CPU can
leave it out), then each client claims ``--batch`` and completes them, without
pushing, until the time is up or the queue is empty.

Prints one JSON object: per operation the count, requests/s, jobs/s, p50 and
p99 latency (ms). The same generator drives every server in a run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from urllib.parse import urlsplit

import orjson


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host
        self.client = f"{id(self):012x}"[-12:]
        self.n = 0

    async def post(self, path: str, body: bytes, content_type: str = "application/json",
                   key: tuple[str, int] | None = None) -> tuple[int, bytes]:
        # a request key and the client's floor, as QueueClient sends them
        extra = (f"Idempotency-Key: {key[0]}\r\nIdempotency-Floor: {key[1]}\r\n"
                 if key else "")
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{extra}"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        data = await self.reader.readexactly(length) if length else b""
        return int(status_line.split()[1]), data


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(url: str, mode: str, clients: int, seconds: float, batch: int,
              queue: str, body: str = "json", keys: bool = True, groups: int = 0,
              group_limit: int | None = None, fill: int = 0) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    base = f"/v1/queues/{queue}"
    lat: dict[str, list[float]] = {"push": [], "claim": [], "complete": [], "noop": []}
    jobs_done: dict[str, int] = {"push": 0, "claim": 0, "complete": 0, "noop": 0}
    errors: list[str] = []
    counter = itertools.count()
    payloads = [{"n": i, "doc": f"doc-{i}"} for i in range(batch)]
    if body == "lines":  # the compact body QueueClient sends: options, tab, payload
        push_body = b"".join(b"\t" + orjson.dumps(p) + b"\n" for p in payloads)
        push_type = "application/vnd.osqueue.staged"
    else:
        push_body = orjson.dumps({"jobs": [{"payload": p} for p in payloads]})
        push_type = "application/json"
    if groups:  # each client's pushes spread over the groups (JSON bodies)
        push_bodies = [orjson.dumps({"jobs": [
            {"payload": p, "group": f"g{(n * batch + i) % groups:05d}"}
            for i, p in enumerate(payloads)]}) for n in range(clients)]
        push_type = "application/json"
    noop_body = orjson.dumps({"jobs": [{"payload": {"n": 0, "doc": "doc-0"}}]})
    start_gate = asyncio.Event()
    measuring = [False]
    stop_at = [0.0]

    async def timed(conn: Conn, op: str, path: str, body: bytes,
                    content_type: str = "application/json") -> bytes | None:
        # a request key on push and claim, as QueueClient sends (receipts are on the happy
        # path); each connection is one client whose earlier calls all have their answers
        key = None
        if keys and op in ("push", "claim"):
            conn.n += 1
            key = (f"r-{conn.client}-{conn.n}", conn.n)
        t0 = time.perf_counter()
        status, data = await conn.post(path, body, content_type, key)
        t1 = time.perf_counter()
        if status != 200:
            errors.append(f"{op}: {status} {data[:120]!r}")
            return None
        if measuring[0]:
            lat[op].append(t1 - t0)
        return data

    async def client(n: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        conn = Conn(reader, writer, f"{host}:{port}")
        worker = f"lg-{n}"
        await start_gate.wait()
        while time.perf_counter() < stop_at[0] and len(errors) < 20:
            if mode == "noop":
                if await timed(conn, "noop", "/noop", noop_body) is not None and measuring[0]:
                    jobs_done["noop"] += 1
                continue
            if mode != "process" and await timed(
                    conn, "push", f"{base}/push", push_bodies[n] if groups else push_body,
                    push_type) is not None and measuring[0]:
                jobs_done["push"] += batch
            if mode == "push":
                continue
            body = orjson.dumps({"worker": worker, "max_jobs": batch, "lease_s": 60})
            data = await timed(conn, "claim", f"{base}/claim", body)
            if data is None:
                continue
            claimed = orjson.loads(data)["jobs"]
            if measuring[0]:
                jobs_done["claim"] += len(claimed)
            if not claimed:
                if mode == "process":
                    break  # (the filled queue is drained)
                continue
            items = [{"token": j["token"], "result": next(counter)} for j in claimed]
            if await timed(conn, "complete", f"{base}/complete",
                           orjson.dumps({"items": items})) is not None and measuring[0]:
                jobs_done["complete"] += len(items)
        writer.close()

    if group_limit is not None:
        reader, writer = await asyncio.open_connection(host, port)
        status, data = await Conn(reader, writer, f"{host}:{port}").post(
            base, orjson.dumps({"settings": {"group_limit": group_limit}}))
        writer.close()
        if status != 200:
            errors.append(f"settings: {status} {data[:120]!r}")
    if mode in ("process", "fill"):
        await _fill(host, port, base, fill)
    if mode == "fill":
        return {"mode": mode, "filled": fill, "errors": []}
    tasks = [asyncio.create_task(client(n)) for n in range(clients)]
    await asyncio.sleep(0.2)  # connections open
    warmup = min(1.0, seconds / 4)
    begin = time.perf_counter()
    stop_at[0] = begin + warmup + seconds
    start_gate.set()
    await asyncio.sleep(warmup)
    measuring[0] = True
    t_measure = time.perf_counter()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t_measure
    out: dict[str, object] = {"mode": mode, "clients": clients, "batch": batch,
                              "seconds": elapsed, "errors": errors[:5]}
    for op, values in lat.items():
        if not values:
            continue
        out[op] = {"requests": len(values), "req_per_s": len(values) / elapsed,
                   "jobs_per_s": jobs_done[op] / elapsed,
                   "p50_ms": pct(values, 0.5) * 1000, "p99_ms": pct(values, 0.99) * 1000}
    return out


async def _fill(host: str, port: int, base: str, jobs: int) -> None:
    """Push ``jobs`` small jobs (compact lines, 10,000 a request), unmeasured."""
    reader, writer = await asyncio.open_connection(host, port)
    conn = Conn(reader, writer, f"{host}:{port}")
    chunk = 10_000
    for first in range(0, jobs, chunk):
        body = b"".join(b"\t" + orjson.dumps({"n": i, "doc": f"doc-{i}"}) + b"\n"
                        for i in range(first, min(jobs, first + chunk)))
        status, data = await conn.post(f"{base}/push", body, "application/vnd.osqueue.staged",
                                       None)
        if status != 200:
            raise SystemExit(f"fill: push answered {status} {data[:200]!r}")
    writer.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--mode", choices=["noop", "push", "cycle", "process", "fill"], default="cycle")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--queue", default="bench")
    p.add_argument("--no-keys", action="store_true",
                   help="send no Idempotency-Key with pushes and claims")
    p.add_argument("--fill", type=int, default=400_000,
                   help="process mode: jobs pushed before the clients start")
    p.add_argument("--body", choices=["json", "lines"], default="json",
                   help="push body: JSON, or the compact staged lines QueueClient sends")
    p.add_argument("--groups", type=int, default=0,
                   help="push jobs into this many groups (g00000...), JSON bodies")
    p.add_argument("--group-limit", type=int, default=None,
                   help="set the queue's group_limit before the run")
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(run(args.url, args.mode, args.clients, args.seconds, args.batch,
                             args.queue, args.body, not args.no_keys, args.groups,
                             args.group_limit, args.fill))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
