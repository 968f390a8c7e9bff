"""``osqueue``: the queue from a terminal.

    osqueue --broker http://host:8765 --queue jobs push '{"doc": 1}' '{"doc": 2}'
    osqueue --queue jobs push --file jobs.jsonl        # one JSON payload a line; '-' for stdin
    osqueue --queue jobs stats
    osqueue --queue jobs jobs --status dead --limit 20
    osqueue --queue jobs peek
    osqueue --queue jobs redrive [ID ...]
    osqueue --queue jobs purge --status dead --yes
    osqueue --queue jobs pause | resume

The broker URL comes from ``--broker`` or ``OSQUEUE_BROKER``; a bearer token
from the variable named by ``--token-env`` (default ``OSQUEUE_TOKEN``).
Exit status: 0 on success, 1 when the broker refused, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from broker.errors import OsqueueError
from osqueue_spark.client import QueueClient


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Rows as an aligned text table."""
    text = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in text]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _payloads(args: argparse.Namespace) -> tuple[Iterator[Any], int | None]:
    if args.file is None:
        if not args.payloads:
            raise SystemExit("osqueue push: give payloads as arguments or --file FILE "
                             "(- for stdin)")
        return (json.loads(p) for p in args.payloads), len(args.payloads)
    stream: IO[str]
    total: int | None = None
    if args.file == "-":
        stream = sys.stdin
    else:
        with open(args.file, encoding="utf-8") as fh:
            total = sum(1 for line in fh if line.strip())
        stream = open(args.file, encoding="utf-8")  # noqa: SIM115 - closed by the generator

    def lines() -> Iterator[Any]:
        try:
            for n, line in enumerate(stream, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise SystemExit(f"osqueue push: line {n} is not JSON: {exc}") from None
        finally:
            if stream is not sys.stdin:
                stream.close()

    return lines(), total


def _progress(done: int, total: int | None, out: IO[str]) -> None:
    if total:
        width = 30
        filled = width * done // total
        out.write(f"\rpushed {done:,}/{total:,} [{'#' * filled}{'.' * (width - filled)}] "
                  f"{100 * done // total}%")
    else:
        out.write(f"\rpushed {done:,}")
    out.flush()


def cmd_push(client: QueueClient, args: argparse.Namespace) -> int:
    payloads, total = _payloads(args)
    batch: list[dict[str, Any]] = []
    done = 0
    show = total is None or total >= args.batch_size
    for n, payload in enumerate(payloads):
        job: dict[str, Any] = {"payload": payload, "priority": args.priority,
                               "delay_s": args.delay_s}
        if args.key_prefix:
            job["key"] = f"{args.key_prefix}{n}"
        batch.append(job)
        if len(batch) >= args.batch_size:
            done += len(client.push_many(batch, batch_size=args.batch_size))
            batch = []
            if show:
                _progress(done, total, sys.stderr)
    if batch:
        ids = client.push_many(batch, batch_size=args.batch_size)
        done += len(ids)
        if total is not None and total <= 20:
            for i in ids:
                print(i)
    if show:
        _progress(done, total, sys.stderr)
        sys.stderr.write("\n")
    print(f"pushed {done} job(s) to {client.queue}")
    return 0


def cmd_stats(client: QueueClient, args: argparse.Namespace) -> int:
    s = client.stats()
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    rows = [(k, v) for k, v in s["counts"].items()]
    rows += [("total", s["total"]), ("paused", s["paused"]),
             ("oldest pending age (s)", s["oldest_pending_age_s"]),
             ("enqueued total", s["enqueued_total"]), ("completed total", s["completed_total"]),
             ("failed total", s["failed_total"]), ("dead total", s["dead_total"]),
             ("state bytes", s["state_bytes"]), ("commit seq", s["seq"]),
             ("broker", (s.get("broker") or {}).get("url"))]
    print(table(rows, ["queue " + client.queue, "value"]))
    return 0


def cmd_jobs(client: QueueClient, args: argparse.Namespace) -> int:
    jobs = client.jobs(args.status, args.limit, args.after)
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    rows = []
    for j in jobs:
        payload = json.dumps(j["payload"])
        rows.append((j["id"], j["status"], j["priority"], f"{j['attempts']}/{j['max_attempts']}",
                     j["run_at"], (j.get("lease") or {}).get("worker"),
                     payload if len(payload) <= 50 else payload[:47] + "...",
                     (j.get("last_error") or "")[:40]))
    print(table(rows, ["id", "status", "prio", "attempts", "run_at", "worker", "payload",
                       "last_error"]))
    return 0


def cmd_redrive(client: QueueClient, args: argparse.Namespace) -> int:
    n = client.redrive(args.ids or None)
    print(f"redrove {n} dead job(s) in {client.queue}")
    return 0


def cmd_purge(client: QueueClient, args: argparse.Namespace) -> int:
    statuses = args.status or ["pending", "dead"]
    if not args.yes:
        print(f"osqueue purge: this deletes every {'/'.join(statuses)} job of {client.queue}; "
              "add --yes to do it", file=sys.stderr)
        return 2
    print(f"purged {client.purge(statuses)} job(s) from {client.queue}")
    return 0


def cmd_pause(client: QueueClient, args: argparse.Namespace) -> int:
    client.pause()
    print(f"{client.queue}: paused (claims return nothing until resume)")
    return 0


def cmd_resume(client: QueueClient, args: argparse.Namespace) -> int:
    client.resume()
    print(f"{client.queue}: resumed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="osqueue", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--broker", default=os.environ.get("OSQUEUE_BROKER"),
                   help="broker URL (default: $OSQUEUE_BROKER)")
    p.add_argument("--queue", "-q", default=os.environ.get("OSQUEUE_QUEUE", "default"))
    p.add_argument("--token-env", default="OSQUEUE_TOKEN",
                   help="variable holding the bearer token (default OSQUEUE_TOKEN)")
    p.add_argument("--store", help="store URL, to find a broker that moved")
    sub = p.add_subparsers(dest="command", required=True)

    push = sub.add_parser("push", help="enqueue JSON payloads")
    push.add_argument("payloads", nargs="*", help="JSON payloads")
    push.add_argument("--file", "-f", help="a file of JSON lines, or - for stdin")
    push.add_argument("--priority", type=int, default=0)
    push.add_argument("--delay-s", type=float, default=0.0)
    push.add_argument("--key-prefix", help="idempotency keys PREFIX<line number> (safe re-runs)")
    push.add_argument("--batch-size", type=int, default=1000)
    push.set_defaults(fn=cmd_push)

    stats = sub.add_parser("stats", help="counts and figures")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(fn=cmd_stats)

    for name, limit in (("jobs", 100), ("peek", 10)):
        jp = sub.add_parser(name, help="list jobs" if name == "jobs" else "the first few jobs")
        jp.add_argument("--status", choices=["pending", "claimed", "dead"])
        jp.add_argument("--limit", type=int, default=limit)
        jp.add_argument("--after", help="page after this job id")
        jp.add_argument("--json", action="store_true")
        jp.set_defaults(fn=cmd_jobs)

    rd = sub.add_parser("redrive", help="return dead jobs (all, or the ids given) to pending")
    rd.add_argument("ids", nargs="*")
    rd.set_defaults(fn=cmd_redrive)

    pg = sub.add_parser("purge", help="delete jobs by status (default pending and dead)")
    pg.add_argument("--status", action="append",
                    choices=["pending", "claimed", "dead"])
    pg.add_argument("--yes", action="store_true", help="really delete")
    pg.set_defaults(fn=cmd_purge)

    sub.add_parser("pause", help="stop handing out jobs").set_defaults(fn=cmd_pause)
    sub.add_parser("resume", help="hand out jobs again").set_defaults(fn=cmd_resume)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.broker:
        print("osqueue: no broker: pass --broker URL or set OSQUEUE_BROKER", file=sys.stderr)
        return 2
    try:
        client = QueueClient(args.broker, args.queue, token=os.environ.get(args.token_env),
                             store=args.store, retry_s=10)
        return int(args.fn(client, args))
    except OsqueueError as exc:
        print(f"osqueue: {exc.message} [{exc.code}]", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
