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
Exit status: 0 on success, 1 when the broker refused, 2 for bad arguments
(a payload that is not JSON, a file that cannot be read), each said in one line.
Tables and progress bars are drawn by rich; ``--json`` prints plain JSON for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from broker import wire
from broker.errors import OsqueueError
from osqueue_spark.client import QueueClient


class UsageError(Exception):
    """A bad argument: said in one line, exit status 2."""


def console(file: IO[str] | None = None) -> Console:
    """A rich console on ``file`` (stdout): plain text, no markup read from data,
    and lines never wrapped when the output is not a terminal (a pipe, a file)."""
    out = file or sys.stdout
    return Console(file=out, highlight=False, width=None if out.isatty() else 100_000)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> Table:
    """Rows under a header line, columns aligned; cells shown as plain text."""
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in headers:
        grid.add_column(header, no_wrap=True)
    for row in rows:
        grid.add_row(*(Text("" if c is None else str(c)) for c in row))
    return grid


def _json_arg(text: str, what: str) -> Any:
    try:
        return wire.loads(text)  # numbers exact; NaN and Infinity refused, as JSON has none
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UsageError(f"osqueue push: {what} is not JSON ({exc.msg}): {shown!r}") from None


def _payloads(args: argparse.Namespace) -> tuple[Iterator[Any], int | None]:
    if args.file is None:
        if not args.payloads:
            raise UsageError("osqueue push: give payloads as arguments or --file FILE "
                             "(- for stdin)")
        values = [_json_arg(p, f"payload {n}") for n, p in enumerate(args.payloads, 1)]
        return iter(values), len(values)
    stream: IO[str]
    total: int | None = None
    if args.file == "-":
        stream = sys.stdin
    else:
        try:
            with open(args.file, encoding="utf-8") as fh:
                total = sum(1 for line in fh if line.strip())
            stream = open(args.file, encoding="utf-8")  # noqa: SIM115 - closed by the generator
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"osqueue push: cannot read {args.file}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None

    def lines() -> Iterator[Any]:
        try:
            for n, line in enumerate(stream, 1):
                if line.strip():
                    yield _json_arg(line.strip(), f"line {n}")
        finally:
            if stream is not sys.stdin:
                stream.close()

    return lines(), total


def _progress(total: int | None) -> Progress:
    """A progress bar on stderr: done/total and a bar, or a count with no total."""
    if total:
        columns: tuple[Any, ...] = (TextColumn("pushed {task.completed:,}/{task.total:,}"),
                                    BarColumn(), TaskProgressColumn())
    else:
        columns = (TextColumn("pushed {task.completed:,}"),)
    return Progress(*columns, console=console(sys.stderr), transient=False)


def cmd_push(client: QueueClient, args: argparse.Namespace) -> int:
    payloads, total = _payloads(args)
    batch: list[dict[str, Any]] = []
    done = 0
    show = total is None or total >= args.batch_size
    bar: Progress | None = _progress(total) if show else None
    shown: AbstractContextManager[Any] = bar if bar is not None else nullcontext()
    ids: list[str] = []
    with shown:
        task = bar.add_task("push", total=total) if bar is not None else None
        for n, payload in enumerate(payloads):
            job: dict[str, Any] = {"payload": payload, "priority": args.priority,
                                   "delay_s": args.delay_s}
            if args.key_prefix:
                job["key"] = f"{args.key_prefix}{n}"
            batch.append(job)
            if len(batch) >= args.batch_size or (total is not None and n + 1 == total):
                ids = client.push_many(batch, batch_size=args.batch_size)
                done += len(ids)
                batch = []
                if bar is not None and task is not None:
                    bar.update(task, completed=done)
        if batch:
            ids = client.push_many(batch, batch_size=args.batch_size)
            done += len(ids)
            if bar is not None and task is not None:
                bar.update(task, completed=done)
    if total is not None and total <= 20:
        for i in ids:
            print(i)
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
    console().print(table(rows, ["queue " + client.queue, "value"]))
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
    console().print(table(rows, ["id", "status", "prio", "attempts", "run_at", "worker",
                                 "payload", "last_error"]))
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
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except OsqueueError as exc:
        print(f"osqueue: {exc.message} [{exc.code}]", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
