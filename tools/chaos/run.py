"""One chaos run end to end: setup (store, broker slots, the queue), the chaos phase
(clients and the nemesis), the heal, the drain, the store check and the report, then
the clean-up of every child process and, after a passing run, of a temporary run
directory."""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.errors import OsqueueError
from broker.storage import ObjectStore
from osqueue_spark import QueueClient
from tools.chaos.brokers import BrokerSlot, pick_ports
from tools.chaos.checker import check_store
from tools.chaos.children import CHILDREN
from tools.chaos.clients import Recorder, Workers, queue_client
from tools.chaos.groups import HeadSampler, HeadSamples, effective_limit, group_checks
from tools.chaos.nemesis import Nemesis, availability
from tools.chaos.report import bar_met, build_result, print_summary, write_records
from tools.chaos.schedule import make_schedule
from tools.chaos.segments import (
    SegmentWatch,
    broker_log_counts,
    s3_segment_requests,
    wait_for_sweep,
)
from tools.chaos.store import (
    StoreSetup,
    dump_store,
    open_store,
    read_state_raw,
    status_counts,
)
from tools.chaos.wide import Wide


def drain(workers: Workers, direct: ObjectStore, timeout_s: float, clock: Callable[[], float],
          say: Callable[[str], None], redrive: Callable[[], None] | None = None
          ) -> dict[str, Any]:
    """Let consumers run until no job is pending, claimed or dead and the queue
    object holds no claim record; the outcome and timing. Dead jobs are redriven
    (``redrive``, at most once a second) once nothing else is left, so that every
    job ends completed.

    Gives up after ``timeout_s`` s; ``seconds`` in the outcome is how long it took.
    """
    workers.draining.set()
    t0 = clock()
    deadline = time.monotonic() + timeout_s
    last: dict[str, int] | None = None
    last_say = 0.0
    redrives = 0
    while time.monotonic() < deadline:
        try:
            last = status_counts(direct)
        except OsqueueError as exc:
            say(f"drain: cannot read the queue object: {exc}")
            last = None
        busy = last is None or bool(last.get("pending") or last.get("claimed")
                                    or last.get("staged") or last.get("claim_records")
                                    or last.get("spill_refs"))
        if not busy and last is not None and last.get("dead") and redrive is not None:
            say(f"drain: redriving {last['dead']} dead job(s)")
            redrive()
            redrives += 1
            time.sleep(1.0)
            continue
        if not busy and last is not None and (redrive is None or not last.get("dead")):
            return {"finished": True, "seconds": round(clock() - t0, 3), "left": last,
                    "redrives": redrives}
        if time.monotonic() - last_say > 10:
            say(f"drain: {last}")
            last_say = time.monotonic()
        time.sleep(1.0)
    return {"finished": False, "seconds": round(clock() - t0, 3), "left": last,
            "redrives": redrives}


class Run:
    """One run of the given options; :meth:`execute` returns the exit status, the
    result (see :func:`tools.chaos.report.build_result`) stays in ``result``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.run_dir = Path(args.run_dir or tempfile.mkdtemp(
            prefix=f"osq-chaos-{args.store}-{args.seed}-")).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        CHILDREN.pid_file = self.run_dir / "children.txt"
        self._say_lock = threading.Lock()
        self.slots: list[BrokerSlot] = []
        self.competitor: BrokerSlot | None = None
        self.store = StoreSetup(args, self.run_dir)
        self.result: dict[str, Any] = {}
        self.groups_refused: str | None = None  # the broker's answer to group settings

    def clock(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        """Print one line, stamped with the seconds since the run started."""
        with self._say_lock:
            print(f"[{self.clock():8.2f}s] {text}", flush=True)

    def execute(self) -> int:
        """Run it; the exit status: 0 passed, 1 the check or the drain failed, 4 the bar
        was missed under ``--require-bar`` (a setup failure raises)."""
        args = self.args
        schedule = make_schedule(args)
        self.say(f"run directory {self.run_dir}")
        self.say("schedule (seconds into the chaos phase): " + "; ".join(
            f"{e.at_s:.1f} {e.kind} {e.params}" for e in schedule))
        slot_need = max((args.lease_s + args.pause_extra_max_s + 2) if args.pauses else 0,
                        args.restart_max_s + 3 if args.kills else 0)
        if schedule and args.seconds / len(schedule) < slot_need:
            self.say(f"warning: {len(schedule)} events in {args.seconds:.0f}s leave "
                     f"{args.seconds / len(schedule):.1f}s each; they may overlap (want "
                     f">= {slot_need:.1f}s)")

        # -- setup ------------------------------------------------------------------------
        self.store.start()
        direct = open_store(self.store.direct_url)
        ports = pick_ports(args.brokers + 1)
        segment_flags = ["--segment-push-jobs", str(args.segment_push_jobs),
                         "--segment-grace-s", str(args.segment_grace_s),
                         "--sweep-s", str(args.sweep_s)]
        # (explicit either way: the brokers' default is on)
        segment_flags.append("--grouped-segments" if args.grouped_segments
                             else "--no-grouped-segments")
        self.slots = [BrokerSlot(f"b{i}", ports[i], self.store.broker_url, args.lease_s,
                                 args.broker_log_level, self.run_dir, self.clock, self.say,
                                 segment_flags)
                      for i in range(args.brokers)]
        self.competitor = BrokerSlot("c", ports[-1], self.store.broker_url, args.lease_s,
                                     args.broker_log_level, self.run_dir, self.clock, self.say,
                                     segment_flags)
        starters = [threading.Thread(target=s.start, args=(args.broker_start_timeout_s,),
                                     daemon=True) for s in self.slots]
        for t in starters:
            t.start()
        for t in starters:
            t.join(args.broker_start_timeout_s * 7)
        down = [s.name for s in self.slots if not s.alive()]
        if down:
            raise RuntimeError(f"brokers {down} did not start; see {self.run_dir}")
        urls = [s.url for s in self.slots]
        self.say(f"brokers ready: {urls} on {self.store.broker_url}")
        admin = queue_client(urls, store=self.store.direct_url,
                             timeout_s=args.client_timeout_s, retry_s=30.0)
        groups_applied = self.create_queue(admin)
        admin.close()

        rec = Recorder(self.clock)
        workers = Workers(args, urls, self.store.direct_url, rec, uuid.uuid4().hex[:8])
        wide = Wide(workers)
        nemesis = Nemesis(args, self.slots, self.competitor, direct, self.clock, self.say)
        nemesis.wide = wide
        watch = SegmentWatch(direct, self.clock, 0.05 if self.store.kind == "file" else 0.5)
        heads: HeadSamples | None = None
        sampler: HeadSampler | None = None
        if args.groups > 0:
            heads = HeadSamples(effective_limit(args.group_limit, args.group_order))
            sampler = HeadSampler(lambda: read_state_raw(direct), heads, self.clock,
                                  args.group_sample_s or (
                                      0.1 if self.store.kind == "file" else 0.5))
            sampler.start()

        # -- chaos ---------------------------------------------------------------------------
        chaos_start = self.clock()
        watch.start()
        workers.start([("consumer-big", wide.big_claim, args.big_claimers)])
        if self.store.kind != "file":
            self.store.faults(True)
            nemesis.note("faults_on", rate=args.fault_rate)
        nemesis.start(schedule, chaos_start)
        next_report = chaos_start + 10
        while self.clock() < chaos_start + args.seconds:
            time.sleep(0.2)
            if self.clock() >= next_report:
                next_report += 10
                self.say(f"acked {rec.acked_count()}, completed {rec.finished}, "
                         f"errors {sum(rec.errors.values())}, segment objects seen "
                         f"{len(watch.seen)}")
        chaos_end = self.clock()

        # -- heal ----------------------------------------------------------------------------
        workers.stop_producing.set()
        nemesis.stop()
        if self.store.kind != "file":
            self.store.faults(False)
            nemesis.note("faults_off")
        for s in self.slots:
            if s.paused:
                s.signal(signal.SIGCONT)
                nemesis.note("resume", slot=s.name, why="heal")
        if self.competitor.alive():
            code = self.competitor.terminate(30.0)
            nemesis.note("compete_stop", slot="c", signal="SIGTERM", exit=code, why="heal")
        for s in self.slots:
            if not s.alive():
                ok = s.start(args.broker_start_timeout_s)
                nemesis.note("restarted" if ok else "restart_failed", slot=s.name, why="heal")
        heal_t = self.clock()
        producers_left = workers.join_producers(
            20 * (args.client_timeout_s + args.client_retry_s + 0.3) + 10)
        if producers_left:
            self.say(f"warning: producers still pushing after the heal: {producers_left}")

        # -- drain ---------------------------------------------------------------------------
        drained = drain(workers, direct, args.drain_timeout_s, self.clock, self.say,
                        lambda: wide.redrive_now("all"))
        self.say(f"drain: {drained}")
        workers.stop_consuming.set()
        stuck = workers.join(args.client_timeout_s * 4 + args.client_retry_s * 3 + 30)
        if sampler is not None:
            sampler.stop()
        watch.stop()
        # the owner deletes exhausted segments and sweeps unreferenced ones past the
        # grace period: wait for that while the brokers still run
        segs = wait_for_sweep(watch, args.segment_grace_s + 3 * args.sweep_s + 15, self.say)
        segs["objects_seen"] = len(watch.seen)
        segs["watch_listings"] = watch.listings
        segs["watch_errors"] = watch.errors
        self.say(f"segments: {segs}")
        for s in [*self.slots, self.competitor]:
            s.terminate(30.0)
        stopped_t = self.clock()

        # -- check ---------------------------------------------------------------------------
        self.say("checking the store ...")
        for attempt in range(3):
            try:
                check = check_store(direct, rec)
                break
            except OsqueueError as exc:  # the runner's own reads see no injected faults
                if attempt == 2:
                    raise
                self.say(f"check: reading the store failed ({exc}); again")
                time.sleep(2)
        fault_stats = self.store.fault_stats()
        avail = availability(rec.successes, chaos_start, chaos_end, nemesis.kills,
                             nemesis.pauses)
        groups = None
        if args.groups > 0:
            groups = group_checks(rec.log.as_json(), rec.log.wall_at_zero, heads,
                                  limit=args.group_limit, order=args.group_order,
                                  applied=groups_applied, died=set(rec.died))
            groups["settings_refused"] = self.groups_refused
        # -- figures -------------------------------------------------------------------------
        timeline_s = {"chaos_start": round(chaos_start, 3), "chaos_end": round(chaos_end, 3),
                      "healed": round(heal_t, 3), "stopped": round(stopped_t, 3),
                      "total": round(self.clock(), 3)}
        self.result = build_result(
            args, store=self.store, slots=self.slots, competitor=self.competitor,
            schedule=schedule, nemesis=nemesis, rec=rec, check=check, drained=drained,
            fault_stats=fault_stats, avail=avail, timeline_s=timeline_s, stuck=stuck,
            segments={**segs, **broker_log_counts(self.run_dir),
                      **(s3_segment_requests(self.run_dir) or {})},
            client_crashes=workers.crashes, run_dir=self.run_dir, groups=groups)
        ok = bool(self.result["ok"])
        write_records(self.run_dir, rec)
        if self.store.kind != "file" and (args.dump_store == "always"
                                        or (args.dump_store == "fail" and not ok)):
            n = dump_store(direct, self.run_dir / "store-dump")
            self.say(f"copied {n} objects of the {self.store.kind} store to "
                     f"{self.run_dir / 'store-dump'}")
        print_summary(self.result)
        if not ok:
            return 1
        if args.require_bar and not bar_met(self.result["bar"]):
            return 4
        return 0

    def create_queue(self, admin: QueueClient) -> bool:
        """Create the queue with ``--max-attempts``, short retry backoffs and, if
        given, ``--group-limit`` and ``--group-order``; whether the group settings
        were accepted. A broker that refuses them (one before group settings) is
        said plainly, its answer kept in ``groups_refused``, and the queue created
        without them: the run goes on, and its checks of limits and order are then
        not applicable."""
        args = self.args
        base: dict[str, Any] = {"max_attempts": args.max_attempts, "backoff_base_s": 0.2,
                                "backoff_max_s": 2.0}
        wanted: dict[str, Any] = {}
        if args.group_limit is not None:
            wanted["group_limit"] = args.group_limit
        if args.group_order is not None:
            wanted["group_order"] = args.group_order
        if wanted:
            try:
                admin.create(**base, **wanted)
                self.say(f"group settings set: {wanted}")
                return True
            except OsqueueError as exc:
                if exc.retryable:
                    raise
                self.groups_refused = f"{exc.code}: {exc}"[:500]
                self.say(f"THE BROKER REFUSED THE GROUP SETTINGS {wanted} "
                         f"({self.groups_refused}); running the load without them: the "
                         "limit and order checks are NOT APPLICABLE in this run")
        admin.create(**base)
        return False

    def cleanup(self, passed: bool) -> None:
        """Stop every child; delete a temporary run directory after a passing run."""
        for s in [*self.slots, *([self.competitor] if self.competitor else [])]:
            if s.alive():
                s.terminate(10.0)
        self.store.stop()
        CHILDREN.kill_all()
        if passed and not self.args.keep_run_dir and not self.args.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:
            print(f"run directory kept: {self.run_dir}", flush=True)
