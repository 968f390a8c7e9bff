"""``osqueue``: the queue from a terminal.

    osqueue --broker http://host:8765 --queue jobs push '{"doc": 1}' '{"doc": 2}'
    osqueue --queue jobs push --file jobs.jsonl        # one JSON payload a line; '-' for stdin
    osqueue --queue jobs stats
    osqueue --queue jobs jobs --status dead --limit 20
    osqueue --queue jobs peek
    osqueue --queue jobs redrive [ID ...]
    osqueue --queue jobs purge --status dead --yes
    osqueue --queue jobs cancel j0000000042 j0000000043
    osqueue --queue jobs configure max_claims_per_s=50 claim_burst=100
    osqueue --queue jobs pause | resume
    osqueue --queue jobs job j0000000042               # one job, wherever it is (archive too)
    osqueue --queue jobs claim --max-jobs 2            # one JSON line a job, with its token
    osqueue --queue jobs complete TOKEN --result '{"ok": true}'
    osqueue --queue jobs fail TOKEN --error "boom" [--retry-in-s 30]
    osqueue --queue jobs heartbeat TOKEN [--lease-s 60]

``push --file`` sends requests of at most ``--batch-size`` jobs and
``--batch-bytes`` bytes (8 MiB: under the broker's request limit, 64 MiB by
default). With ``--request-key K`` chunk ``i`` of the input (from 0) is pushed
under request key ``K-{i}``: a re-run of the same input with the same ``K``,
``--batch-size`` and ``--batch-bytes``, within the queue's ``retry_ttl_s``
(600 s by default), is answered the ids of the chunks that landed and pushes
only the rest (a chunk of other jobs under a key is refused,
``request_key_reused``). ``claim`` prints each job it claimed as one JSON line (id, payload,
token, attempt, lease_expires_at); ``complete``, ``fail`` and ``heartbeat``
take those tokens and say per token what happened (exit status 1 if any was
refused). ``job`` finds a finished job in the archive too.

The broker URL comes from ``--broker`` or ``OSQUEUE_BROKER``; a bearer token
from ``OSQUEUE_TOKEN``, or from the variable ``--token-env`` names (which must
then be set). ``--json`` (before or after the command) prints plain JSON for
scripts; otherwise tables and progress bars, control characters in the
queue's text shown as escapes (``\x1b``). A broker that cannot be reached is
reported at once, not retried.
``cancel`` says per id what became of it: cancelled (a pending or delayed
job), cancel requested (a claimed job: it ends cancelled at its worker's next
call about it), or why not (finished, unknown: nothing changed; exit status 1).
``configure`` sets queue settings (``max_attempts``, ``max_claims_per_s``: the
dispatch rate limit, 0 for none, ``claim_burst``, ...) and shows them all;
``max_attempts`` applies to jobs pushed from then on. ``--store`` takes a
store URL or a local directory (``./data`` means ``file:///abs/path/data``).
Exit status: 0 on success, 1 when the broker refused or cannot be reached, 2
for bad arguments (a payload that is not JSON, a file that cannot be read, a
bad broker URL or queue name, an unset token variable, an option out of range or
not finite), each said in one line.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

from broker import fields, wire
from broker.display import plain
from broker.errors import (
    BrokerUnreachable,
    InvalidRequest,
    OsqueueError,
    PayloadTooLarge,
    RequestKeyReused,
)
from osqueue_spark import cli_jobs, cli_out
from osqueue_spark.args import InvalidArgument
from osqueue_spark.bodies import BATCH_BYTES
from osqueue_spark.calls import MAX_PUSH_KEY_CHARS, push_key
from osqueue_spark.cli_out import UsageError, console, dump, json_arg, positive, say, table
from osqueue_spark.client import QueueClient
from osqueue_spark.transport import Response, Urllib3Transport


def _payloads(args: argparse.Namespace) -> tuple[Iterator[tuple[Any, int]], int | None]:
    """Each payload with the length of its text (about its bytes in a request),
    and how many there are (None: read from stdin, not known ahead)."""
    if args.file is None:
        if not args.payloads:
            raise UsageError("osqueue push: give payloads as arguments or --file FILE "
                             "(- for stdin)")
        values = [(json_arg(p, f"payload {n}"), len(p)) for n, p in enumerate(args.payloads, 1)]
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

    def lines() -> Iterator[tuple[Any, int]]:
        try:
            for n, line in enumerate(stream, 1):
                if line.strip():
                    yield json_arg(line.strip(), f"line {n}"), len(line)
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


#: Room a ``--request-key`` leaves for its chunk numbers (``-{i}``).
CHUNK_DIGITS = 12


def request_key_arg(text: str) -> str:
    """An argparse type: a ``--request-key``, short enough for ``-{chunk}`` after it."""
    try:
        if len(text) <= MAX_PUSH_KEY_CHARS - CHUNK_DIGITS:
            return push_key(text)
    except InvalidArgument:
        pass
    raise argparse.ArgumentTypeError(f"must be 1..{MAX_PUSH_KEY_CHARS - CHUNK_DIGITS} "
                                     "printable ASCII characters, no spaces")


def group_arg(text: str) -> str:
    """An argparse type: a ``--group`` (:func:`broker.fields.group`)."""
    try:
        return fields.group("--group", text, InvalidArgument)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def cmd_push(client: QueueClient, args: argparse.Namespace) -> int:
    pushed = [0]  # jobs of earlier requests, in the queue (set by _push)
    try:
        return _push(client, args, pushed)
    except PayloadTooLarge as exc:
        if "request body" not in exc.message:
            raise  # (a payload past the queue's max_payload_bytes: said as it is)
        done = pushed[0] + int(exc.details.get("pushed", 0))
        # (a re-run skips them only by their keys: advising --key-prefix after a run
        # without it, or another prefix, would push them twice)
        skip = (f"re-run with the same --key-prefix ({args.key_prefix}) to skip them"
                if args.key_prefix else "a re-run of the whole input pushes them again: "
                f"push only the jobs after the first {done}")
        raise PayloadTooLarge(
            f"{exc.message}: the broker refused a request of this "
            f"push as too large; pass a smaller --batch-bytes (now {args.batch_bytes}) or "
            f"--batch-size (now {args.batch_size}), or start the broker with a larger "
            f"--max-request-mb. " + (f"The first {done} job(s) of the input were pushed "
                                     f"before it and none after: {skip}" if done else
                                     "Nothing was pushed")
        ) from None
    except RequestKeyReused as exc:
        if not args.request_key:
            raise
        raise RequestKeyReused(
            f"{exc.message}. --request-key {args.request_key} names one input: a re-run "
            "pushes the same input with the same --batch-size and --batch-bytes; push "
            "other jobs under a new --request-key", **exc.details) from None
    except OsqueueError as exc:
        # the outcome of the request in flight is unknown (its answer lost, the broker
        # gone): a re-run under the same keys learns what landed
        if not args.request_key or not (exc.retryable or isinstance(exc, BrokerUnreachable)):
            raise
        # (push_many's advice names its own key, for Python callers)
        message = exc.message.partition("; the push's request key is ")[0]
        done = pushed[0] + int(exc.details.get("pushed", 0))
        raise type(exc)(
            f"{message}. The first {done} job(s) of the input are in the queue and the "
            f"request after them may have landed: re-run the same command with --request-key "
            f"{args.request_key} (the same input, --batch-size and --batch-bytes) within the "
            "queue's retry_ttl_s (600 s by default); the chunks that landed are answered, "
            "not pushed again, and the rest are pushed", **exc.details) from None


def _push(client: QueueClient, args: argparse.Namespace, pushed: list[int]) -> int:
    """Push the jobs ``args`` give; ``pushed[0]``: how many are in the queue so far."""
    payloads, total = _payloads(args)
    batch: list[dict[str, Any]] = []
    size = done = 0
    show = total is None or total >= args.batch_size
    bar: Progress | None = _progress(total) if show else None
    shown: AbstractContextManager[Any] = bar if bar is not None else nullcontext()
    ids: list[str] = []  # every id when they are shown, else the last batch's
    keep = args.json or (total is not None and total <= 20)
    chunks = 0  # push_many calls made: chunk i goes under request key f"{K}-{i}"

    def push(batch: list[dict[str, Any]]) -> list[str]:
        nonlocal chunks
        key = f"{args.request_key}-{chunks}" if args.request_key else None
        chunks += 1
        return client.push_many(batch, batch_size=args.batch_size,
                                batch_bytes=args.batch_bytes, request_key=key)

    with shown:
        task = bar.add_task("push", total=total) if bar is not None else None
        for n, (payload, nbytes) in enumerate(payloads):
            job: dict[str, Any] = {"payload": payload, "priority": args.priority,
                                   "delay_s": args.delay_s}
            if args.key_prefix:
                job["key"] = f"{args.key_prefix}{n}"
            if args.group is not None:
                job["group"] = args.group
            batch.append(job)
            size += nbytes
            if len(batch) >= args.batch_size or size >= args.batch_bytes or (
                    total is not None and n + 1 == total):
                got = push(batch)
                ids = [*ids, *got] if keep else got
                done += len(got)
                pushed[0] = done
                batch, size = [], 0
                if bar is not None and task is not None:
                    bar.update(task, completed=done)
        if batch:
            got = push(batch)
            ids = [*ids, *got] if keep else got
            done += len(got)
            if bar is not None and task is not None:
                bar.update(task, completed=done)
    if args.json:
        dump({"queue": client.queue, "pushed": done, "ids": ids})
        return 0
    if keep:
        for i in ids:
            say(i)
    # The answer gives an id per job, the existing job's for a key already present:
    # whether a keyed job was new cannot be told from it.
    say(f"pushed {done} job(s) to {client.queue}" if not args.key_prefix else
        f"pushed {done} keyed job(s) to {client.queue}; a key already present added "
        "nothing (its job's id is the one returned)")
    return 0


def cmd_stats(client: QueueClient, args: argparse.Namespace) -> int:
    s = client.stats()
    if args.json:
        dump(s)
        return 0
    # finished jobs leave the queue once archived: their counts here are the few
    # awaiting it, never "how many are done" (the totals below say that)
    rows = [(f"{k} (awaiting archive)" if k in ("completed", "cancelled") else k, v)
            for k, v in s["counts"].items()]
    rate = s.get("completed_per_min")
    rows += [("total", s["total"]), ("paused", s["paused"]),
             ("oldest pending age (s)", s["oldest_pending_age_s"]),
             ("enqueued (all time)", s["enqueued_total"]),
             ("completed (all time)", s["completed_total"]),
             ("completed / min (last minute)", rate if rate is not None else
              "n/a (just started)" if s.get("served_by_this_broker") else
              "n/a (another broker serves the queue)"),
             ("failed attempts (all time)", s["failed_total"]),
             ("dead (all time)", s["dead_total"]),
             ("cancelled (all time)", s["cancelled_total"]),
             ("cancel requested", s["cancel_requested"]),
             ("claims per s (last 10 s)", s["claims_per_s"]),
             ("claim limit per s", s["claim_limit_per_s"] or "none"),
             ("state bytes", s["state_bytes"]), ("commit seq", s["seq"]),
             ("broker", (s.get("broker") or {}).get("url"))]
    rows += cli_out.group_rows(s.get("groups")) + cli_out.spill_rows(s)  # (only while used)
    console().print(table(rows, ["queue " + client.queue, "value"]))
    return 0


def cmd_jobs(client: QueueClient, args: argparse.Namespace) -> int:
    jobs = client.jobs(args.status, args.limit, args.after)
    if args.json:
        dump(jobs)
        return 0
    if args.status in ("completed", "cancelled"):
        say(f"({args.status} jobs leave the queue once archived: these await it. "
            "'osqueue job ID' finds one in the archive; spark.read.format(\"osqueue\")"
            ".option(\"table\", \"archive\") reads them all)", sys.stderr)
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
    asked = len(set(args.ids))
    if args.json:
        dump({"queue": client.queue, "redriven": n, "asked": asked or None})
    else:
        say(f"redrove {n} dead job(s) in {client.queue}")
    if n < asked:  # the answer is a count: which ids were left is not known
        say(f"osqueue redrive: {asked - n} of the {asked} id(s) given were not redriven: "
            "not dead, or no such job", sys.stderr)
    return 0


def cmd_purge(client: QueueClient, args: argparse.Namespace) -> int:
    statuses = args.status or ["pending", "dead"]
    if not args.yes:
        say(f"osqueue purge: this deletes every {'/'.join(statuses)} job of {client.queue}; "
            "add --yes to do it", sys.stderr)
        return 2
    # no --status: every pending and dead job, asked for as such ({"all": true})
    n = client.purge(args.status or None)
    if args.json:
        dump({"queue": client.queue, "purged": n})
    else:
        say(f"purged {n} job(s) from {client.queue}")
    return 0


def cmd_cancel(client: QueueClient, args: argparse.Namespace) -> int:
    answers = client.cancel(args.ids)
    if args.json:
        dump({"queue": client.queue, "results": [a._asdict() for a in answers]})
    else:
        for a in answers:
            if a.ok:
                shown = "cancel requested" if a.status == wire.CANCEL_REQUESTED else a.status
                say(f"{a.id}: {shown}")
            else:
                say(f"osqueue cancel: {a.id}: {a.status}: {a.reason}", sys.stderr)
    return 0 if all(a.ok for a in answers) else 1


def _setting(text: str) -> tuple[str, Any]:
    """An argparse type: ``NAME=NUMBER``."""
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"not NAME=VALUE: {text[:40]!r}")
    try:  # (group_order and group_dead take a word: fifo, hold; or null)
        word = name in ("group_order", "group_dead") and value != "null"
        number = value if word else json.loads(value)
    except json.JSONDecodeError:  # (never sent as null: that would reset a group setting)
        raise argparse.ArgumentTypeError(f"{name[:40]}: not a number: {value[:20]!r}") from None
    if name.startswith("group_") and (number is None or isinstance(number, dict | str)):
        return name, number  # (group settings: null for the default, maps as JSON)
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise argparse.ArgumentTypeError(f"{name[:40]}: not a number: {value[:20]!r}")
    return name, number


def _settings_of(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs as settings; ``group_limits.GROUP=N`` is an entry of that map."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        base, dot, key = name.partition(".")
        if dot and base in ("group_limits", "group_weights"):
            out[base] = {**(out.get(base) or {}), key: value}  # (a map is sent whole)
        else:
            out[name] = value
    return out


#: What a changed setting does not change, said when it is set.
SETTING_NOTES = {"max_attempts": "max_attempts applies to jobs pushed from now on; jobs "
                                 "already in the queue keep the max_attempts they were "
                                 "pushed with"}


def cmd_configure(client: QueueClient, args: argparse.Namespace) -> int:
    settings = client.create(**_settings_of(args.settings))["settings"]
    notes = [SETTING_NOTES[name] for name in dict(args.settings) if name in SETTING_NOTES]
    if args.json:
        dump({"queue": client.queue, "settings": settings, "notes": notes})
    else:
        console().print(table(sorted(settings.items()), ["queue " + client.queue, "setting"]))
        for note in notes:
            say(f"note: {note}")
    return 0


def cmd_pause(client: QueueClient, args: argparse.Namespace) -> int:
    client.pause()
    if args.json:
        dump({"queue": client.queue, "paused": True})
    else:
        say(f"{client.queue}: paused (claims return nothing until resume)")
    return 0


def cmd_resume(client: QueueClient, args: argparse.Namespace) -> int:
    client.resume()
    if args.json:
        dump({"queue": client.queue, "paused": False})
    else:
        say(f"{client.queue}: resumed")
    return 0


class _FailFast:
    """The default transport for one-shot commands: once every way to the broker
    failed to connect (each URL given, and the store's owner with ``--store``), that
    is said at once instead of retried for ``retry_s`` (a broker that is down)."""

    def __init__(self, ways: int) -> None:
        self._inner = Urllib3Transport(pool_size=4)
        self._left = ways

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> Response:
        try:
            return self._inner.send(method, url, headers, body, timeout_s)
        except BrokerUnreachable as exc:
            if not exc.retryable:  # (TLS refused: no other way would do better)
                raise
            self._left -= 1
            if self._left > 0:
                raise
            raise _Unreachable(exc.message) from None

    def close(self) -> None:
        self._inner.close()


class _Unreachable(BrokerUnreachable):
    retryable = False


def _version() -> str:
    try:
        return importlib.metadata.version("osqueue-spark")
    except importlib.metadata.PackageNotFoundError:  # (a checkout on the path, not installed)
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    doc = plain(__doc__ or "").splitlines()
    p = argparse.ArgumentParser(prog="osqueue", description=doc[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(doc[2:]))
    p.add_argument("--version", action="version", version=f"osqueue {_version()}",
                   help="print the installed version and exit")
    p.add_argument("--broker", default=os.environ.get("OSQUEUE_BROKER"),
                   help="broker URL, or several comma-separated (default: $OSQUEUE_BROKER)")
    p.add_argument("--queue", "-q", default=os.environ.get("OSQUEUE_QUEUE", "default"),
                   help="queue name (default: $OSQUEUE_QUEUE, else default)")
    p.add_argument("--token-env", metavar="VAR",
                   help="variable holding the bearer token, which must be set "
                        "(default: OSQUEUE_TOKEN, if set)")
    p.add_argument("--store", help="the store URL (file:///abs/dir, s3://bucket/prefix, ...) "
                                   "or a local directory: to find the broker serving the "
                                   "queue when one given cannot be reached")
    p.add_argument("--json", action="store_true", help="print plain JSON (for scripts)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        # --json after the command too; SUPPRESS keeps the global one when not given here
        cmd = sub.add_parser(name, help=help, description=help)
        cmd.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                         help="print plain JSON (for scripts)")
        return cmd

    push = command("push", "enqueue JSON payloads")
    push.add_argument("payloads", nargs="*", metavar="PAYLOAD", help="JSON payloads")
    push.add_argument("--file", "-f", help="a file of JSON lines, or - for stdin")
    push.add_argument("--priority", type=int, default=0,
                      help="higher is claimed first (default 0)")
    push.add_argument("--delay-s", type=float, default=0.0,
                      help="seconds before the jobs may be claimed (default 0)")
    push.add_argument("--key-prefix", help="idempotency keys PREFIX<line number> (safe re-runs)")
    push.add_argument("--group", type=group_arg, metavar="NAME",
                      help="the jobs' group (1..128 characters without control characters); "
                           "shown wherever a job is, no effect on claims yet")
    push.add_argument("--request-key", type=request_key_arg, metavar="K",
                      help="push chunk i of the input under request key K-{i}: a re-run of "
                           "the same input with the same K, --batch-size and --batch-bytes "
                           "within the queue's retry_ttl_s pushes only what did not land")
    push.add_argument("--batch-size", type=positive, default=1000,
                      help="most jobs per request (default 1000)")
    push.add_argument("--batch-bytes", type=positive, default=BATCH_BYTES,
                      help="most bytes per request (default 8 MiB; keep it under the "
                           "broker's --max-request-mb)")
    push.set_defaults(fn=cmd_push)

    command("stats", "counts and figures").set_defaults(fn=cmd_stats)
    cli_jobs.add_commands(command)

    for name, limit in (("jobs", 100), ("peek", 10)):
        jp = command(name, "list jobs in enqueue order" if name == "jobs" else
                     "the first few jobs")
        jp.add_argument("--status",
                        choices=["pending", "claimed", "dead", "completed", "cancelled"],
                        help="only jobs of this status (completed and cancelled: those "
                             "awaiting their archive object)")
        jp.add_argument("--limit", type=positive, default=limit,
                        help=f"most jobs to list (default {limit})")
        jp.add_argument("--after", metavar="ID", help="page after this job id")
        jp.set_defaults(fn=cmd_jobs)

    rd = command("redrive", "return dead jobs (all, or the ids given) to pending")
    rd.add_argument("ids", nargs="*", metavar="ID", help="job ids (default: every dead job)")
    rd.set_defaults(fn=cmd_redrive)

    pg = command("purge", "delete jobs by status (default pending and dead)")
    pg.add_argument("--status", action="append",
                    choices=["pending", "claimed", "dead"],
                    help="a status to delete (repeat for several); nothing is archived")
    pg.add_argument("--yes", action="store_true", help="really delete")
    pg.set_defaults(fn=cmd_purge)

    cn = command("cancel", "cancel jobs by id: pending ones at once, claimed ones when "
                 "their worker next calls about them")
    cn.add_argument("ids", nargs="+", metavar="ID", help="job ids")
    cn.set_defaults(fn=cmd_cancel)

    cf = command("configure", "set queue settings (NAME=NUMBER ...); shows them all")
    cf.add_argument("settings", nargs="+", type=_setting, metavar="NAME=NUMBER",
                    help="e.g. max_claims_per_s=50 (0: no rate limit), claim_burst=100, "
                         "max_attempts=5 (for jobs pushed from then on), group_limit=2 (null: "
                         "unlimited), group_limits.tenantA=5, group_weights.tenantB=3 (a map is "
                         "sent whole), group_order=fifo, group_dead=hold, group_rate_per_s=10")
    cf.set_defaults(fn=cmd_configure)

    command("pause", "stop handing out jobs").set_defaults(fn=cmd_pause)
    command("resume", "hand out jobs again").set_defaults(fn=cmd_resume)
    return p


def _store_url(text: str) -> str:
    """``--store`` as a store URL: a URL as given, a local directory as
    ``file:///abs/path``; ``UsageError`` for a directory that is not there."""
    if "://" in text:
        return text
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(f"osqueue: --store {text[:60]!r} is neither a store URL "
                         "(file:///abs/dir, s3://bucket/prefix, gs://..., abfss://...) nor "
                         "an existing directory")
    return path.as_uri()


def _client(args: argparse.Namespace) -> QueueClient:
    """The client the arguments describe; ``UsageError`` for a bad broker URL, queue
    name or an unset ``--token-env`` variable."""
    if not args.broker:
        raise UsageError("osqueue: no broker: pass --broker URL or set OSQUEUE_BROKER")
    token = os.environ.get(args.token_env or "OSQUEUE_TOKEN") or None
    if args.token_env and token is None:
        raise UsageError(f"osqueue: --token-env names {args.token_env[:40]}, which is unset "
                         "or empty")
    urls = [u.strip() for u in args.broker.split(",") if u.strip()]
    for url in urls:
        try:
            parts = urlsplit(url)
            if parts.scheme in ("http", "https") and parts.hostname:
                parts.port  # noqa: B018 - raises ValueError for a bad port
                continue
        except ValueError:
            pass
        shown = url if len(url) <= 40 else url[:37] + "..."
        raise UsageError(f"osqueue: --broker wants http(s)://host:port, got {shown!r}")
    try:
        store = None if args.store is None else _store_url(args.store)
        return QueueClient(urls, args.queue, token=token, store=store, retry_s=10,
                           transport=_FailFast(len(urls) + (args.store is not None)))
    except InvalidRequest as exc:
        raise UsageError(f"osqueue: {exc.message}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        client = _client(args)
        with client:
            return int(args.fn(client, args))
    except UsageError as exc:
        say(str(exc), sys.stderr)
        return 2
    except InvalidArgument as exc:  # refused before anything was sent: a bad argument
        say(f"osqueue: {exc.message} [{exc.code}]", sys.stderr)
        return 2
    except OsqueueError as exc:
        code = "" if exc.code == OsqueueError.code else f" [{exc.code}]"
        say(f"osqueue: {exc.message}{code}", sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
