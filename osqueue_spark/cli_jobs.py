"""The ``osqueue`` commands that run a job's life by hand: look a job up
(``job``: the queue object, a segment, a spill object or the archive, with
its error history), ``claim`` jobs and settle them by token (``complete``,
``fail``, ``heartbeat``). See :mod:`osqueue_spark.cli` for the rest and the
exit statuses.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from broker import wire
from broker.limits import DEFAULT_LEASE_S, MAX_CLAIM_JOBS
from osqueue_spark.cli_out import (
    console,
    dump,
    error_rows,
    json_arg,
    json_line,
    positive,
    say,
    table,
)
from osqueue_spark.client import QueueClient


def cmd_job(client: QueueClient, args: argparse.Namespace) -> int:
    job = client.job(args.id)
    if args.json:
        dump(job)
        return 0
    rows = [(k, wire.dumps(v).decode() if isinstance(v, dict) else v)
            for k, v in job.items() if k not in ("payload", "result", "errors")]
    out = console()
    out.print(table(rows, ["job " + str(job.get("id")), "value"]))
    say("payload: " + wire.dumps(job.get("payload")).decode())
    if job.get("status") == "completed":
        say("result: " + wire.dumps(job.get("result")).decode())
    errors = error_rows(job.get("errors"))
    if errors:  # (oldest first, as the broker keeps them: the newest is the last line)
        say("errors, oldest first (each text whole: --json):")
        out.print(table(errors, ["attempt", "failed_at", "error"]))
    return 0


def _job_of(token: str) -> str:
    """The job a token is for (its id, the token's start), not the token itself."""
    head = token.partition(".")[0]
    return head if head.startswith("j") and head[1:].isdigit() else "(a token)"


def cmd_claim(client: QueueClient, args: argparse.Namespace) -> int:
    worker = args.worker or f"osqueue-cli-{socket.gethostname()}-{os.getpid()}"
    # (a job's group only when it has one, as the broker answers it)
    jobs = [{k: v for k, v in j._asdict().items() if v is not None or k != "group"}
            for j in client.claim(worker, args.max_jobs, args.lease_s, args.wait_s)]
    if args.json:
        dump({"queue": client.queue, "worker": worker, "jobs": jobs})
        return 0
    for job in jobs:  # one JSON line a job (jq -c), escaped as --json escapes
        print(json_line(job))
    say(f"claimed {len(jobs)} job(s) from {client.queue} as {worker}; settle each with "
        "'osqueue complete TOKEN' or 'osqueue fail TOKEN' before its lease "
        f"({args.lease_s:g} s) runs out" if jobs else f"no job to claim in {client.queue}",
        sys.stderr)
    return 0


def _settled(client: QueueClient, args: argparse.Namespace, verb: str,
             answers: Sequence[wire.ItemResult], done: str) -> int:
    """Say per token what became of it; 1 if any was refused."""
    if args.json:
        dump({"queue": client.queue, "results": [
            {**a._asdict(), "id": _job_of(a.token)} for a in answers]})
    else:
        for a in answers:
            if a.ok:
                say(f"{_job_of(a.token)}: {a.status or done}")
            else:
                say(f"osqueue {verb}: {_job_of(a.token)}: {a.status or 'refused'}: {a.reason}",
                    sys.stderr)
    return 0 if all(a.ok for a in answers) else 1


def cmd_complete(client: QueueClient, args: argparse.Namespace) -> int:
    result = None if args.result is None else json_arg(args.result, "--result", "complete")
    answers = client.complete_many([(t, result) for t in args.tokens])
    return _settled(client, args, "complete", answers, "completed")


def cmd_fail(client: QueueClient, args: argparse.Namespace) -> int:
    answers = client.fail_many([(t, args.error, args.retry_in_s) for t in args.tokens])
    return _settled(client, args, "fail", answers, "failed")


def cmd_heartbeat(client: QueueClient, args: argparse.Namespace) -> int:
    answers = client.heartbeat(args.tokens, args.lease_s)
    return _settled(client, args, "heartbeat", answers, f"lease extended to {args.lease_s:g} s")


def add_commands(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Add this module's commands with ``command(name, help)``, which makes a
    sub-parser (the ``osqueue`` parser's, with ``--json``)."""
    tokens: dict[str, Any] = {"nargs": "+", "metavar": "TOKEN", "help": "tokens from claim"}
    jb = command("job", "one job by id, wherever it is (the queue, a segment, a spill "
                       "object, the archive), with its error history")
    jb.add_argument("id", metavar="ID", help="a job id, such as j0000000042")
    jb.set_defaults(fn=cmd_job)

    cl = command("claim", "claim jobs: one JSON line each, with the token that settles it")
    cl.add_argument("--worker", help="the worker name the lease records "
                                     "(default osqueue-cli-HOST-PID)")
    cl.add_argument("--max-jobs", type=positive, default=1,
                    help=f"most jobs to claim (default 1, at most {MAX_CLAIM_JOBS})")
    cl.add_argument("--lease-s", type=float, default=DEFAULT_LEASE_S,
                    help=f"seconds until an unsettled job is claimable again "
                         f"(default {DEFAULT_LEASE_S:g})")
    cl.add_argument("--wait-s", type=float, default=0.0,
                    help="wait up to this many seconds for a job (default 0)")
    cl.set_defaults(fn=cmd_claim)

    cp = command("complete", "complete claimed jobs by their tokens")
    cp.add_argument("tokens", **tokens)
    cp.add_argument("--result", metavar="JSON", help="the jobs' result (JSON; default null)")
    cp.set_defaults(fn=cmd_complete)

    fl = command("fail", "fail claimed jobs: retried with backoff, dead after their last "
                         "attempt")
    fl.add_argument("tokens", **tokens)
    fl.add_argument("--error", default="", help="why it failed (shown with the job)")
    fl.add_argument("--retry-in-s", type=float,
                    help="retry after this many seconds (default: the queue's backoff)")
    fl.set_defaults(fn=cmd_fail)

    hb = command("heartbeat", "extend the leases of claimed jobs")
    hb.add_argument("tokens", **tokens)
    hb.add_argument("--lease-s", type=float, default=DEFAULT_LEASE_S,
                    help=f"the new lease, from now (default {DEFAULT_LEASE_S:g} s)")
    hb.set_defaults(fn=cmd_heartbeat)
