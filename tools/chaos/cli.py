"""Chaos runner: real brokers, real clients, a seeded nemesis, then a check of the store.

    python -m tools.chaos --store file --seed 1 --seconds 60
    python -m tools.chaos --store s3 --seed 1 --preset short
    python -m tools.chaos --store azure --seed 1 --preset short
    python -m tools.chaos --store s3 --seed 1 --preset long --out chaos-s3.json

(from the checkout's root: ``-m`` finds this checkout's runner first, and every
child process gets this checkout first on its path.)

What one run does (all times are wall-clock seconds):

1. Setup. ``--brokers`` broker processes (``python -m broker``) on one store,
   each on a FIXED port chosen at start, so a restarted broker comes back at
   the same URL. ``--store file``: a directory in the run directory.
   ``--store s3``: a moto S3 server process and a fault proxy process
   (tests/support/faultproxy/) in front of it; brokers talk to S3 through the
   proxy, the runner's own reads (owner look-ups, the drain, the checker)
   and the clients' store look-ups go to moto directly. ``--store gcs``: the
   same with our GCS JSON-API test server (tests/support/gcsserver.py, which enforces
   generation preconditions) in place of moto. ``--store azure``: an
   Azurite process (``make test`` installs it) that every process reaches
   directly, its connection string in ``AZURE_STORAGE_CONNECTION_STRING``.
   Brokers run with ``--segment-push-jobs`` (default 200), a short
   ``--segment-grace-s`` and ``--sweep-s``, so bulk pushes and publishes go
   into segment objects and unreferenced ones are swept within seconds.
   The queue is created with ``--max-attempts`` and short retry backoffs.
2. Chaos phase (``--seconds``). Producer threads push jobs with unique
   payloads ``{"p": producer, "n": counter}`` through ``QueueClient.push_many``
   (batches of 1-50; the client's own request keys make its retries safe;
   with --push-keys each job also carries an idempotency key and a failed
   batch is pushed again with the same keys), at
   ``--push-rate`` jobs/s in total, pausing while more than ``--max-backlog``
   acknowledged jobs wait. Every acknowledged id is recorded with its
   payload; a push that raised is recorded as "attempted". Beside them, at
   ``--bulk-rate`` jobs/s together, ``--bulk-producers`` threads push
   batches of ``--bulk-min``..``--bulk-max`` bare payloads in one request
   each, and ``--publishers`` threads stage 2-4 chunks of that many jobs in
   all and publish them with a once key, as a Spark write does (replayed with
   the same once key or aborted when the publish fails; see
   tools/chaos/bulk.py): with the brokers' ``--segment-push-jobs`` at or
   below ``--bulk-min``, all of these go by reference (segment objects).
   A publish's payloads are acknowledged, without ids, when a publish
   answered success (``duplicate: true`` included). Consumer threads
   claim batches, complete most jobs with result ``{"by": worker, "token":
   token}``, fail ``--fail-prob`` of them (retried), and let ``--lapse-prob``
   of them lapse (a dead worker; half of those get a late complete with the
   old token after the lease ran out). Every answered complete is recorded.
   The wide load (tools/chaos/wide.py, off unless asked for: --preset wide)
   adds ``--big-claimers`` claiming up to ``--big-claim-max`` jobs at a time
   and heartbeating them while they hold them, failures retried at once and
   later, jobs failed until they die (``--doom-every``), and the nemesis
   events ``--redrives`` (a redrive of all the dead, or some by id, with the
   owner killed or paused while it runs) and ``--claim-kills`` (the owner
   killed around a claim of ``--big-claim-max`` jobs, before its answer or
   after it).
   With ``--groups N`` (``--preset groups``, ``groups-fifo``) single and bulk pushes
   give every job one of N skewed groups, the queue is created with
   ``--group-limit`` / ``--group-order`` if the broker accepts them (a refusal is
   said plainly; the run goes on without them), every claim, heartbeat answered
   ok and settlement is logged, and a sampler reads the head for the claimed jobs
   of each group (tools/chaos/groups.py). ``--grouped-segments`` runs the
   brokers with grouped segments: grouped bulk pushes become segment objects.
   The nemesis runs a schedule drawn from ``--seed`` (printed at start; the
   same seed gives the same schedule): ``--kills`` kill -9 of the broker that
   owns the queue (read from the queue object's ``broker.url``), restarted
   on its port after a random 0.5-3 s; ``--pauses`` SIGSTOP of the owner for
   ``--lease-s`` + 1-3 s, then SIGCONT; ``--competitors`` extra brokers
   started on the same store for a while, then stopped (SIGTERM or kill -9);
   on S3 the proxy faults ``--fault-rate`` of all storage requests
   throughout (500/503 without forwarding, PUTs that land with their answer
   dropped, requests held past the S3 client's timeout).
3. Heal: producers stop (a failed keyed batch is still pushed until it is
   acknowledged), faults off, SIGCONT everything, competitors stopped, every
   broker slot running.
4. Drain: consumers keep going (no more fails or lapses) until the queue
   object holds no pending, claimed or dead job and no claim record (the
   dead are redriven once nothing else is left), at most
   ``--drain-timeout-s``. Then clients stop; the runner waits (at most
   ``--segment-grace-s`` + 3 sweeps + 15 s) until no segment or spill
   object is left, and brokers get SIGTERM.
5. Check the store itself (queue object, the segment objects it references
   and the archive objects, read directly):
   * lost: an acknowledged push whose id (a publish: whose payload) is in
     neither the queue object, its segments, nor the archive;
   * duplicated: one payload present as more than one job (queue, segments
     and archive), or one job both in the head and in a segment's untaken
     part (or in two segments);
   * unexpected: a job whose payload no producer ever pushed, or whose id is
     not the acknowledged id of its payload;
   * segments left behind: segment objects the final queue object does not
     reference, after the wait above;
   * superseded: a complete answered ok for token T of job J, but the
     archive's line for J carries another token (consumers put their token
     in the result) or worker, or J is not archived (still queued, or gone);
   * double: a job id on more than one archive line;
   * ids acknowledged twice: one job id answered for pushes of two
     payloads; ack conflicts: one payload answered two ids (each id is
     checked for loss);
   * archived and queued: a job in the archive and still pending or
     claimed in the queue object; stale answers for completions that
     landed (complete is idempotent per token);
   * job objects left once drained (segments, spill objects), claim
     records left in the head;
   * drain: whether the queue emptied (no job pending, claimed or dead).
   * with groups and their settings accepted: any moment at which a group held
     more jobs than its limit (1 for fifo), from the log (each job's surely
     held interval: claim answer to the earlier of the settlement's send and
     the lease's end) and from the head samples; with fifo, completions or
     first claims of a group out of push order.
   The clients' records fail the run too: answers no broker may give
   (anomalies, a job claimed again after a complete of it answered ok, a
   claim answering a payload under another id than its push), and so do the
   runner's own problems (a client thread or a nemesis action that crashed,
   a thread stuck at the end) and too little work: fewer acknowledged jobs
   than ``--min-acked-share`` of those the producers were asked to push, or
   a kind of producer with no acknowledged operation.
   Exit status 1 if any of these is non-zero or the drain did not finish,
   0 otherwise (2: bad arguments or setup failed, 3: --max-runtime-s hit,
   130: interrupted). ``--require-bar`` also fails the run (status 4) when
   the acceptance figures (acknowledged jobs, kills, pauses, faults, outage)
   miss the bar given by --bar-*.

Availability: a client call counts as progress when it durably did
something: a push acknowledged, a claim that returned jobs, a complete with
at least one ok. Reported: the longest window without progress during the
chaos phase, and the outage after each kill (and each pause): the time from
the signal to the first progress of a call started after it.

Every child process runs in its own session and is killed in ``finally``
and ``atexit`` (and by the watchdog after ``--max-runtime-s``). The run
directory holds for post-mortems: children.txt (pid and command of every
child, should the runner itself be killed with -9), broker-*.log (each start marked with its
time), moto.log, faultproxy.log, s3-requests.jsonl (every storage request
with its fault and answer), records.json (what the clients saw: every
acknowledged id and when, every claim and complete answer) and, for S3 after
a failing run, store-dump/ (a copy of every object: moto keeps them in
memory). A temporary run directory is deleted after a passing run unless
``--keep-run-dir``; it is kept after a failing one (its path is printed), and
a ``--run-dir`` is always kept.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from tools.chaos.children import CHILDREN
from tools.chaos.report import write_result
from tools.chaos.run import Run

#: ``--preset`` values: defaults for a quick look and for the acceptance run
#: (options given on the command line still win).
PRESETS: dict[str, dict[str, Any]] = {
    "short": {"seconds": 30.0, "kills": 2, "pauses": 1, "competitors": 1},
    "wide": {"seconds": 360.0, "kills": 6, "pauses": 2, "competitors": 2, "redrives": 6,
             "claim_kills": 4, "push_rate": 10.0, "bulk_rate": 80.0, "bulk_min": 500,
             "bulk_max": 2000, "max_backlog": 12_000, "big_claimers": 3, "doom_every": 97,
             "max_attempts": 3, "fault_rate": 0.02, "drain_timeout_s": 300.0,
             "require_bar": True, "bar_kills": 10, "bar_pauses": 2},
    # the acceptance of group limits: 1,000 groups at limit 2, 16 workers, 100,000 jobs, >= 10
    # takeovers (the owner killed and taken over at random)
    "groups": {"seconds": 900.0, "kills": 12, "pauses": 2, "competitors": 1,
               "push_rate": 80.0, "bulk_rate": 120.0, "bulk_max": 800, "consumers": 16,
               "groups": 1000, "group_limit": 2, "max_backlog": 12_000,
               "drain_timeout_s": 300.0, "fault_rate": 0.02, "require_bar": True,
               "bar_acked": 100_000, "bar_kills": 10, "bar_pauses": 2},
    # the order acceptance: fifo groups, a fifth of the attempts failed
    "groups-fifo": {"seconds": 300.0, "kills": 6, "pauses": 1, "competitors": 1,
                    "push_rate": 60.0, "bulk_rate": 60.0, "bulk_max": 800, "consumers": 16,
                    "groups": 1000, "group_order": "fifo", "fail_prob": 0.2,
                    "lapse_prob": 0.02, "max_backlog": 12_000, "drain_timeout_s": 300.0},
    "long": {"seconds": 660.0, "kills": 16, "pauses": 6, "competitors": 4, "push_rate": 20.0,
             "bulk_rate": 40.0, "bulk_max": 800, "fault_rate": 0.02, "require_bar": True},
}


def build_parser() -> argparse.ArgumentParser:
    """The runner's options (its help is this module's docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m tools.chaos", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("run")
    g.add_argument("--preset", choices=sorted(PRESETS),
                   help="short: 30 s, 2 kills, 1 pause, 1 competitor. long (the acceptance "
                        "run, about 12-15 minutes): 660 s, 16 kills, 6 pauses, 4 competitors, "
                        "20 jobs/s of single pushes and 40 of bulk pushes and publishes of "
                        "200-800 jobs, 2%% faults on S3, --require-bar. wide (the wide queues' "
                        "run, about 6-7 minutes): 360 s, 6 kills, 2 pauses, 2 competitors, "
                        "6 redrives and 4 claim kills, 80 jobs/s of bulk pushes of "
                        "500-2,000 jobs, 3 big claimers of 500-2,000 jobs, every 97th job "
                        "doomed, max attempts 3, 2%% faults on S3, --require-bar (10 "
                        "owner kills, 2 pauses, and the wide load's own figures). groups "
                        "(the group limits' run, about 17-20 minutes): 900 s, 1,000 groups "
                        "at group_limit 2, 16 consumers, 12 kills, 2 pauses, 80 jobs/s of "
                        "single pushes and 120 of bulk pushes and publishes, --require-bar "
                        "with 100,000 acknowledged jobs and 10 owner kills. groups-fifo: "
                        "300 s, 1,000 fifo groups, 16 consumers, 20%% of attempts failed. "
                        "Explicit options win")
    g.add_argument("--store", choices=["file", "s3", "gcs", "azure"], default="file",
                   help="file: a directory in the run directory; s3: moto behind the fault "
                        "proxy; gcs: our GCS test server (tests/support/gcsserver.py) behind the "
                        "fault proxy; azure: Azurite (no fault proxy) (default file)")
    g.add_argument("--seed", type=int, default=1,
                   help="seeds the nemesis schedule, the clients' choices and the fault proxy")
    g.add_argument("--seconds", type=float, default=60.0,
                   help="duration of the chaos phase, s (default 60)")
    g.add_argument("--out", help="write all figures, the schedule and the nemesis log here "
                                 "(JSON)")
    g.add_argument("--run-dir", help="directory for logs and the file store (default: a new "
                                     "temporary directory)")
    g.add_argument("--keep-run-dir", action="store_true",
                   help="keep the run directory even after a passing run")
    g.add_argument("--dump-store", choices=["never", "fail", "always"], default="fail",
                   help="copy every object of an S3 store into RUN_DIR/store-dump after the "
                        "check (moto keeps it in memory only): never, after a failing run "
                        "(default), or always")
    g.add_argument("--max-runtime-s", type=float, default=None,
                   help="watchdog: kill everything and exit 3 after this long (default: "
                        "seconds + drain timeout + 300)")
    g = p.add_argument_group("brokers")
    g.add_argument("--brokers", type=int, default=3,
                   help="broker processes on the store, each on a fixed port (default 3)")
    g.add_argument("--lease-s", type=float, default=5.0,
                   help="broker lease, passed as --lease-s to python -m broker (default 5)")
    g.add_argument("--broker-log-level", default="info",
                   help="--log-level of the brokers (default info: the runner counts the "
                        "segment objects they wrote and swept from their logs)")
    g.add_argument("--broker-start-timeout-s", type=float, default=60.0,
                   help="how long a broker may take to print 'ready', s (default 60)")
    g = p.add_argument_group("clients")
    g.add_argument("--producers", type=int, default=4, help="producer threads (default 4)")
    g.add_argument("--consumers", type=int, default=4, help="consumer threads (default 4)")
    g.add_argument("--push-rate", type=float, default=60.0,
                   help="target jobs pushed per second, all producers together (default 60)")
    g.add_argument("--max-backlog", type=int, default=3000,
                   help="producers wait while more acknowledged jobs than this are "
                        "unfinished (default 3000)")
    g.add_argument("--pad-bytes", type=int, default=0,
                   help="extra bytes of padding in every payload (default 0)")
    g.add_argument("--push-keys", dest="push_keys", action="store_true", default=False,
                   help="give every job an idempotency key and push a failed batch again "
                        "with the same keys (default: no per-job keys, no re-push; the "
                        "client's own request keys must keep retried pushes from "
                        "duplicating)")
    g.add_argument("--no-push-keys", dest="push_keys", action="store_false",
                   help="push without per-job idempotency keys (the default)")
    g.add_argument("--claim-max", type=int, default=20, help="claim batches of 1..N (default 20)")
    g.add_argument("--claim-wait-s", type=float, default=0.5,
                   help="long-poll of a claim, s (default 0.5)")
    g.add_argument("--job-lease-s", type=float, default=8.0,
                   help="lease consumers ask for on claimed jobs, s (default 8)")
    g.add_argument("--fail-prob", type=float, default=0.05,
                   help="fraction of claimed jobs failed (retried later) (default 0.05)")
    g.add_argument("--lapse-prob", type=float, default=0.02,
                   help="fraction of claimed jobs left to lapse, as by a dead worker "
                        "(default 0.02)")
    g.add_argument("--max-attempts", type=int, default=10,
                   help="queue setting max_attempts (default 10)")
    g.add_argument("--client-timeout-s", type=float, default=5.0,
                   help="QueueClient timeout_s per request (default 5)")
    g.add_argument("--client-retry-s", type=float, default=5.0,
                   help="QueueClient retry_s: how long it retries transient failures "
                        "(default 5)")
    g = p.add_argument_group("bulk pushes and publishes (by reference)")
    g.add_argument("--bulk-producers", type=int, default=1,
                   help="threads pushing batches of bare payloads in one request each "
                        "(default 1)")
    g.add_argument("--publishers", type=int, default=1,
                   help="threads staging chunks and publishing them once, as a Spark write "
                        "does (default 1)")
    g.add_argument("--bulk-rate", type=float, default=40.0,
                   help="target jobs per second of bulk pushes and publishes together; 0: "
                        "none (default 40)")
    g.add_argument("--bulk-min", type=int, default=200,
                   help="jobs of one bulk push or publish, at least (default 200)")
    g.add_argument("--bulk-max", type=int, default=2000,
                   help="jobs of one bulk push or publish, at most (default 2000)")
    g.add_argument("--segment-push-jobs", type=int, default=200,
                   help="the brokers' --segment-push-jobs: pushes and publishes of at least "
                        "this many default-option jobs go into segment objects (default 200)")
    g.add_argument("--segment-grace-s", type=float, default=None,
                   help="the brokers' --segment-grace-s (default 5 on file and azure; on "
                        "s3 and gcs 2 x --fault-delay-s + 4, so a write the fault proxy "
                        "held still lands inside the grace period)")
    g.add_argument("--sweep-s", type=float, default=1.0,
                   help="the brokers' --sweep-s: how often they sweep (default 1)")
    g = p.add_argument_group("wide queues: big claims, failures, deaths, redrives")
    g.add_argument("--big-claimers", type=int, default=0,
                   help="threads claiming --big-claim-min..--big-claim-max jobs at a time, "
                        "heartbeating them while they hold them (default 0)")
    g.add_argument("--big-claim-min", type=int, default=500,
                   help="jobs a big claim asks for, at least (default 500)")
    g.add_argument("--big-claim-max", type=int, default=2000,
                   help="jobs a big claim asks for, at most; also the size of the claims "
                        "of --claim-kills (default 2000)")
    g.add_argument("--big-hold-min-s", type=float, default=0.5,
                   help="a big claim is held U(min, max) s before it is settled "
                        "(default 0.5)")
    g.add_argument("--big-hold-max-s", type=float, default=3.0, help="(default 3)")
    g.add_argument("--heartbeat-s", type=float, default=1.0,
                   help="a held big claim is heartbeated every this many s (default 1)")
    g.add_argument("--big-fail-prob", type=float, default=0.1,
                   help="fraction of a big claim's jobs failed (retried) (default 0.1)")
    g.add_argument("--retry-max-s", type=float, default=2.0,
                   help="an injected failure retries at once half the time, else after "
                        "U(0.1, this) s; 0: always at once (default 2)")
    g.add_argument("--doom-every", type=int, default=0,
                   help="jobs whose payload n is a multiple of this fail on every attempt "
                        "in the chaos phase, until they die (--max-attempts); the drain "
                        "redrives them; 0: none (default 0)")
    g.add_argument("--redrives", type=int, default=0,
                   help="nemesis events: a redrive of the dead (all and by id in turn), "
                        "with the owner killed or paused past its lease while it runs "
                        "(default 0)")
    g.add_argument("--claim-kills", type=int, default=0,
                   help="nemesis events: a claim of --big-claim-max jobs with the owner "
                        "killed before its answer and, in turn, after it (default 0)")
    g = p.add_argument_group("job groups: per-group limits and fifo order")
    g.add_argument("--groups", type=int, default=0,
                   help="give every pushed job (single and bulk pushes; publishes stay "
                        "ungrouped) one of N groups g00000.., skewed (see --group-skew); "
                        "0: no groups (default 0)")
    g.add_argument("--group-skew", type=float, default=2.0,
                   help="group index = int(N * u ** skew) for a uniform u: 1 is uniform, "
                        "2 (the default) makes g00000 about 1/sqrt(N) of the jobs")
    g.add_argument("--group-limit", type=int, default=None,
                   help="queue setting group_limit, set at start if the broker accepts it "
                        "(else the run says so and the limit check is not applicable)")
    g.add_argument("--group-order", choices=["fair", "fifo"], default=None,
                   help="queue setting group_order, set at start if the broker accepts it; "
                        "fifo: the checks want at most one job of a group held and its "
                        "jobs settled in push order")
    g.add_argument("--grouped-segments", action="store_true", default=False,
                   help="run the brokers with --grouped-segments: bulk pushes of grouped jobs "
                        "(at least --segment-push-jobs) go into grouped segment objects "
                        "rather than the head (default off: the runner passes "
                        "--no-grouped-segments, whatever the brokers' default)")
    g.add_argument("--group-sample-s", type=float, default=None,
                   help="read the head this often for the claimed jobs of each group, s "
                        "(default 0.1 on file, 0.5 elsewhere)")
    g = p.add_argument_group("nemesis")
    g.add_argument("--kills", type=int, default=3, help="kill -9 of the owner (default 3)")
    g.add_argument("--pauses", type=int, default=1,
                   help="SIGSTOP of the owner past the broker lease (default 1)")
    g.add_argument("--competitors", type=int, default=1,
                   help="extra brokers started on the store for a while (default 1)")
    g.add_argument("--restart-min-s", type=float, default=0.5,
                   help="a killed broker restarts after U(min, max) s (default 0.5)")
    g.add_argument("--restart-max-s", type=float, default=3.0, help="(default 3)")
    g.add_argument("--pause-extra-min-s", type=float, default=1.0,
                   help="a pause lasts lease + U(min, max) s (default 1)")
    g.add_argument("--pause-extra-max-s", type=float, default=3.0, help="(default 3)")
    g = p.add_argument_group("storage faults (--store s3 or gcs)")
    g.add_argument("--fault-rate", type=float, default=0.02,
                   help="fraction of storage requests faulted during the chaos phase "
                        "(default 0.02)")
    g.add_argument("--fault-weights", default="",
                   help="relative weights of the kinds, e.g. drop=2,error500=1,error503=1,"
                        "delay=0.1 (the default)")
    g.add_argument("--fault-delay-s", type=float, default=11.0,
                   help="how long a delayed request is held, s; the broker's S3 read "
                        "timeout is 10 s (default 11)")
    g.add_argument("--fault-delay-then", choices=["forward", "drop", "mixed"], default="mixed",
                   help="after the delay, forward the request or drop it unsent")
    g = p.add_argument_group("drain and bar")
    g.add_argument("--drain-timeout-s", type=float, default=180.0,
                   help="give up draining after this long, s (default 180)")
    g.add_argument("--min-acked-share", type=float, default=0.05,
                   help="every run fails unless it acknowledged at least this share of the "
                        "jobs the producers were asked to push ((--push-rate + --bulk-rate) "
                        "x --seconds) and one operation of each kind of producer it has "
                        "(default 0.05)")
    g.add_argument("--require-bar", action="store_true",
                   help="exit 4 if the acceptance figures miss the bar below")
    g.add_argument("--bar-acked", type=int, default=20_000,
                   help="acknowledged jobs wanted (default 20000)")
    g.add_argument("--bar-bulk-jobs", type=int, default=5_000,
                   help="jobs acknowledged by bulk pushes and publishes wanted (default 5000)")
    g.add_argument("--bar-kills", type=int, default=15,
                   help="kills of the owner wanted (default 15)")
    g.add_argument("--bar-pauses", type=int, default=5,
                   help="pauses of the owner past its lease wanted (default 5)")
    g.add_argument("--bar-competitors", type=int, default=1,
                   help="competing brokers wanted (default 1)")
    g.add_argument("--bar-fault-pct", type=float, default=1.0,
                   help="S3: %% of storage requests faulted wanted, with at least one "
                        "dropped answer of a landed PUT (default 1)")
    g.add_argument("--bar-outage-extra-s", type=float, default=5.0,
                   help="the bar for the outage after a kill is lease + this, s (default 5)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Refuse inconsistent options: SystemExit naming every problem."""
    problems = []
    if args.brokers < 1:
        problems.append("--brokers must be >= 1")
    if args.producers < 1 or args.consumers < 1:
        problems.append("--producers and --consumers must be >= 1")
    if args.seconds <= 0 or args.lease_s <= 0:
        problems.append("--seconds and --lease-s must be > 0")
    if min(args.kills, args.pauses, args.competitors) < 0:
        problems.append("--kills, --pauses, --competitors must be >= 0")
    if not 0 <= args.fault_rate <= 1:
        problems.append("--fault-rate must be within [0, 1]")
    if not 0 <= args.fail_prob + args.lapse_prob <= 1:
        problems.append("--fail-prob + --lapse-prob must be within [0, 1]")
    if not 1 <= args.producers < 100 or not 0 <= args.bulk_producers < 100 or \
            not 0 <= args.publishers < 100:
        problems.append("--producers must be within 1..99, --bulk-producers and "
                        "--publishers within 0..99")
    if args.bulk_rate < 0 or not 1 <= args.bulk_min <= args.bulk_max <= 100_000:
        problems.append("--bulk-rate must be >= 0 and 1 <= --bulk-min <= --bulk-max "
                        "<= 100000")
    if args.segment_push_jobs < 0 or (args.segment_grace_s is not None
                                      and args.segment_grace_s <= 0) or args.sweep_s <= 0:
        problems.append("--segment-push-jobs must be >= 0, --segment-grace-s and --sweep-s "
                        "> 0")
    if not 0 <= args.min_acked_share <= 1:
        problems.append("--min-acked-share must be within [0, 1]")
    if args.claim_max < 1 or args.max_attempts < 1:
        problems.append("--claim-max and --max-attempts must be >= 1")
    if args.big_claimers < 0 or not 1 <= args.big_claim_min <= args.big_claim_max <= 10_000:
        problems.append("--big-claimers must be >= 0 and 1 <= --big-claim-min <= "
                        "--big-claim-max <= 10000")
    if min(args.redrives, args.claim_kills, args.doom_every) < 0 or \
            not 0 <= args.big_fail_prob <= 1 or args.heartbeat_s <= 0 or \
            args.retry_max_s < 0 or args.big_hold_min_s > args.big_hold_max_s:
        problems.append("--redrives, --claim-kills, --doom-every, --retry-max-s must be >= 0, "
                        "--big-fail-prob within [0, 1], --heartbeat-s > 0, "
                        "--big-hold-min-s <= --big-hold-max-s")
    if args.groups < 0 or args.group_skew <= 0 or (args.group_limit is not None and not
                                                    0 <= args.group_limit <= 1_000_000) or \
            (args.group_sample_s is not None and args.group_sample_s <= 0):
        problems.append("--groups must be >= 0, --group-skew and --group-sample-s > 0, "
                        "--group-limit within 0..1000000")
    if args.groups == 0 and (args.group_limit is not None or args.group_order is not None):
        problems.append("--group-limit and --group-order need --groups")
    if args.restart_min_s > args.restart_max_s or \
            args.pause_extra_min_s > args.pause_extra_max_s:
        problems.append("min delays must not exceed max delays")
    if problems:  # exit status 2, as argparse gives (1 is "the check failed")
        print("chaos: " + "; ".join(problems), file=sys.stderr)
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a ``--preset`` supplies defaults that options override."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.preset:
        parser.set_defaults(**PRESETS[args.preset])
        args = parser.parse_args(argv)
    if args.segment_grace_s is None:
        # on a faulted store a commit's PUT may be held fault_delay_s and land that
        # long after its push was answered (when the sweep's grace period starts
        # again); a push's segment writes must also fit in half of it
        args.segment_grace_s = (2 * args.fault_delay_s + 4.0 if args.store in ("s3", "gcs")
                                else 5.0)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run once; the exit status (see the module docstring). A watchdog kills every
    child and exits 3 after ``--max-runtime-s`` s."""
    args = parse_args(argv)
    check_args(args)
    # the machine's load at the start, for the result (imported here: tests never
    # import the benchmarks' helpers)
    import bench._common  # noqa: F401
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(name, value)  # moto's; the runner reads the store directly
    max_runtime = args.max_runtime_s or (args.seconds + args.drain_timeout_s + 300
                                         + 4 * args.broker_start_timeout_s)

    def watchdog() -> None:
        print(f"chaos: the run exceeded --max-runtime-s ({max_runtime:.0f}s); killing "
              "everything", file=sys.stderr, flush=True)
        CHILDREN.kill_all()
        os._exit(3)

    timer = threading.Timer(max_runtime, watchdog)
    timer.daemon = True
    timer.start()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # only in the main thread
        signal.signal(signal.SIGTERM, on_term)
    run = Run(args)
    code = 2
    try:
        code = run.execute()
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr, flush=True)
        code = 130
    except Exception:
        print(f"chaos: the run failed: {traceback.format_exc()}", file=sys.stderr, flush=True)
        code = 2
    finally:
        timer.cancel()
        if args.out and run.result:
            write_result(Path(args.out), run.result)
        run.cleanup(passed=code == 0)
    return code

