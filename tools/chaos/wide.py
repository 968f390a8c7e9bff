"""The load of wide queues: big claims held while their worker heartbeats them, failures
that retry (at once and later) and jobs that fail until they die, redrives of the
dead (all, and by id), and claims of thousands with the owner killed around them.

* :func:`tools.chaos.clients.doomed`: a job whose payload's ``n`` is a multiple of ``--doom-every``
  fails on every attempt during the chaos phase (a bad row), so it dies after
  ``--max-attempts``; every consumer obeys it. Once the run drains, doomed
  jobs complete like the rest (the drain redrives the dead, see
  :meth:`Wide.redrive_now`).
* :meth:`Wide.big_claim`: ``--big-claimers`` threads claim ``--big-claim-min``..
  ``--big-claim-max`` jobs at a time (from a queue deep with bulk pushes that
  went to segment objects), hold them ``--big-hold-min-s``..``--big-hold-max-s``
  while heartbeating every ``--heartbeat-s``, then fail ``--big-fail-prob`` of
  them (half with ``retry_in_s`` 0, half with up to ``--retry-max-s``) and
  complete the rest.
* :meth:`Wide.redrive_now`: a redrive of every dead job, or of some dead jobs
  by id (listed first); the nemesis runs it as its ``redrive`` event, just
  before it kills or pauses the owner.
* :meth:`Wide.claim_for_kill`: a claim of ``--big-claim-max`` jobs with the
  owner killed while it is outstanding (``before``: a moment after the request
  went out, usually before its answer) or once it was answered (``after``:
  the claim is then heartbeated and settled across the takeover).

Every answer is recorded in the run's :class:`tools.chaos.clients.Recorder`
(counts, jobs that died, ids redriven). Times in seconds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tools.chaos.clients import doomed, fail_jobs, queue_client, retry_delay

if TYPE_CHECKING:
    from osqueue_spark import QueueClient
    from tools.chaos.clients import Workers

#: how many dead jobs a redrive by id lists at most (one page)
DEAD_PAGE = 1000
#: the payloads' "p" of the jobs :meth:`Wide._wait_for_depth` pushes (past the
#: producers' 0..99, the bulk producers' 100.. and the publishers' 200..)
TOPUP_P = 300
#: how long (s) a claim around an owner kill waits for the producers to fill the
#: queue before it pushes the rest itself
DEPTH_WAIT_S = 2.0


class Wide:
    """The wide load of one run, on the run's :class:`tools.chaos.clients.Workers` (their options,
    record and stop events)."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.args = workers.args
        self.rec = workers.rec
        self._seq = 0
        self._topped = 0  # jobs pushed by _top_up so far
        self._lock = threading.Lock()
        self._one_claim_kill = threading.Lock()  # events that overlap take turns

    def _client(self) -> QueueClient:
        """A client that retries long enough to outlast a takeover (2 x the broker
        lease + 10 s)."""
        with self._lock:
            self._seq += 1
            start = self._seq
        return queue_client(self.workers.urls, store=self.workers.store_url,
                            timeout_s=self.args.client_timeout_s,
                            retry_s=2 * self.args.lease_s + 10.0, start=start)

    # -- big claims ------------------------------------------------------------------------
    def hold(self, client: QueueClient, worker: str, jobs: list[Any],
             rng: random.Random) -> None:
        """Hold ``jobs`` (a claim) for a while, heartbeating them, then settle them:
        doomed jobs and ``--big-fail-prob`` of the rest fail, the others complete.
        While the run drains: no hold, no failure."""
        args, rec = self.args, self.rec
        draining = self.workers.draining.is_set()
        hold_s = 0.0 if draining else rng.uniform(args.big_hold_min_s, args.big_hold_max_s)
        until = time.monotonic() + hold_s
        tokens = [j.token for j in jobs]
        while not self.workers.stop_consuming.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            if self.workers.stop_consuming.wait(min(left, args.heartbeat_s)):
                break
            if time.monotonic() >= until:
                break
            sent = rec.clock()
            try:
                answers = client.heartbeat(tokens, lease_s=args.job_lease_s)
            except Exception as exc:
                rec.error("heartbeat", exc)
                continue
            rec.log.heartbeat(tokens, [a.ok for a in answers], sent, args.job_lease_s)
            with rec.lock:
                rec.counts["heartbeats"] += 1
                rec.counts["heartbeat_jobs_ok"] += sum(1 for a in answers if a.ok)
                rec.counts["heartbeat_jobs_stale"] += sum(1 for a in answers if not a.ok)
        fails: list[tuple[Any, float]] = []
        completes = []
        for j in jobs:
            if not draining and (doomed(j.payload, args.doom_every)
                                 or rng.random() < args.big_fail_prob):
                fails.append((j, 0.0 if doomed(j.payload, args.doom_every)
                              else retry_delay(rng, args.retry_max_s)))
            else:
                completes.append(j)
        fail_jobs(client, rec, fails, "chaos: injected failure of a big claim")
        for at in range(0, len(completes), 1000):
            self.workers.complete(client, worker, completes[at:at + 1000], rng)

    def big_claim(self, i: int) -> None:
        """Big claimer ``i``: claim big batches, hold and settle them, until the
        consumers stop."""
        args, rec = self.args, self.rec
        rng = random.Random(f"{args.seed}-big-{i}")
        worker = f"big{i}"
        client = self.workers.client(1000 + i)
        try:
            while not self.workers.stop_consuming.is_set():
                if self.workers.hold_claims.is_set():
                    self.workers.stop_consuming.wait(0.05)
                    continue
                started = rec.clock()
                try:
                    jobs = client.claim(worker, max_jobs=rng.randint(args.big_claim_min,
                                                                     args.big_claim_max),
                                        lease_s=args.job_lease_s, wait_s=args.claim_wait_s,
                                        wait_for_queue=True)
                except Exception as exc:
                    rec.error("big_claim", exc)
                    self.workers.stop_consuming.wait(rng.uniform(0.05, 0.3))
                    continue
                if not jobs:
                    continue
                self._claimed(jobs, worker, started)
                self.hold(client, worker, jobs, rng)
        finally:
            client.close()

    def _claimed(self, jobs: list[Any], worker: str, started: float) -> None:
        self.rec.claimed(jobs, worker, started, self.args.job_lease_s)
        with self.rec.lock:
            self.rec.counts["big_claims"] += 1
            self.rec.counts["big_claim_jobs"] += len(jobs)
            self.rec.counts["big_claim_largest"] = max(self.rec.counts["big_claim_largest"],
                                                       len(jobs))
            if len(jobs) >= 1000:
                self.rec.counts["claims_of_1000_or_more"] += 1

    # -- nemesis hooks -------------------------------------------------------------------
    def redrive_now(self, mode: str) -> None:
        """Redrive the dead: ``"all"`` of them, or (``"ids"``) half of those one page
        lists (at least one), by id. Recorded: the call and how many it redrove."""
        rec = self.rec
        client = self._client()
        try:
            if mode == "all":
                n = client.redrive(None)
                ids: list[str] = []
            else:
                # (a short run may have none dead yet at this moment: wait a little for
                # the doomed jobs' last attempts, so the event tests what it names)
                deadline = time.monotonic() + 10.0
                dead = [j["id"] for j in client.jobs("dead", DEAD_PAGE)]
                while not dead and time.monotonic() < deadline \
                        and not self.workers.stop_producing.wait(0.2):
                    dead = [j["id"] for j in client.jobs("dead", DEAD_PAGE)]
                if not dead:
                    with rec.lock:
                        rec.counts["redrive_ids_none_dead"] += 1
                    return
                rng = random.Random(f"{self.args.seed}-redrive-{len(dead)}")
                ids = rng.sample(dead, max(1, len(dead) // 2))
                n = client.redrive(ids)
        except Exception as exc:
            rec.error(f"redrive_{mode}", exc)
            return
        finally:
            client.close()
        with rec.lock:
            rec.counts[f"redrive_{mode}_ok"] += 1
            rec.counts["jobs_redriven"] += n
            rec.redriven.update(ids)

    def _wait_for_depth(self, client: QueueClient, jobs: int) -> None:
        """Wait (at most DEPTH_WAIT_S) until the queue holds ``jobs`` pending jobs,
        so that the claim the owner dies around is a big one (the other consumers
        claim nothing while ``hold_claims`` is set); then push what is missing
        here, in one acknowledged bulk push of payloads ``{"p": TOPUP_P, "n": N}``.
        (Waiting for the producers instead took up to 16 s on a busy machine, so
        the kill could fall after the chaos phase, when nothing restarts it.)"""
        deadline = time.monotonic() + DEPTH_WAIT_S
        pending = 0
        while not self.workers.stop_producing.is_set():
            try:
                pending = int(client.stats()["counts"].get("pending", 0))
            except Exception as exc:
                self.rec.error("stats", exc)
            if pending >= jobs:
                return
            if time.monotonic() >= deadline:
                break
            self.workers.stop_producing.wait(0.1)
        self._top_up(client, jobs - pending)

    def _top_up(self, client: QueueClient, n: int) -> None:
        """Push ``n`` more jobs (payloads ``{"p": TOPUP_P, "n": N}``, unique per run),
        recorded as any acknowledged push is."""
        if n <= 0:
            return
        with self._lock:
            first, self._topped = self._topped, self._topped + n
        keys = [f"{TOPUP_P}:{first + j}" for j in range(n)]
        started = self.rec.clock()
        try:
            ids = client.push_many([{"p": TOPUP_P, "n": first + j} for j in range(n)],
                                   batch_size=n)
        except Exception as exc:
            self.rec.error("claim_kill_top_up", exc)
            self.rec.push_failed(keys, exc)
            return
        self.rec.pushed(keys, list(ids), started)
        with self.rec.lock:
            self.rec.counts["claim_kill_topped_up_jobs"] += n

    def claim_for_kill(self, when: str, kill: Callable[[], None], delay_s: float) -> None:
        """Claim ``--big-claim-max`` jobs (once the queue holds that many, or after a
        while) and kill the owner (``kill``) around it:
        ``"before"``: ``delay_s`` s after the request went out, whether or not it
        was answered by then (recorded); ``"after"``: once it was answered. The
        claim is then held (heartbeats through the takeover) and settled."""
        rng = random.Random(f"{self.args.seed}-claim-kill-{when}-{delay_s}")
        with self._one_claim_kill:
            self._claim_for_kill(self._client(), when, kill, delay_s, rng, f"ck-{when}",
                                 self.workers.hold_claims)

    def _claim_for_kill(self, client: QueueClient, when: str, kill: Callable[[], None],
                        delay_s: float, rng: random.Random, worker: str,
                        hold: threading.Event) -> None:
        """:meth:`claim_for_kill` with its client (closed at the end), worker name
        and the consumers' ``hold`` (set while it waits for depth and its answer)."""
        args, rec = self.args, self.rec
        got: dict[str, Any] = {}
        answered = threading.Event()

        def claim() -> None:
            started = rec.clock()
            try:
                got["jobs"] = client.claim(worker, max_jobs=args.big_claim_max,
                                           lease_s=args.job_lease_s)
                got["started"] = started
            except Exception as exc:
                got["error"] = exc
            answered.set()

        try:
            hold.set()
            self._wait_for_depth(client, args.big_claim_max)
            th = threading.Thread(target=claim, name=f"claim-kill-{when}", daemon=True)
            if when == "before":
                th.start()
                answered.wait(delay_s)
                early = answered.is_set()
                kill()
            else:
                th.start()
                th.join()
                early = True
                kill()
            # the others wait for the answer too: a claim retried on the next owner
            # finds the queue as deep as the first
            th.join(2 * args.lease_s + 10.0 + 4 * args.client_timeout_s)
            hold.clear()
            with rec.lock:
                rec.counts[f"claim_kill_{when}"] += 1
                rec.counts[f"claim_kill_{when}_answered_before_kill"] += int(early)
            if "error" in got:
                rec.error("claim_kill", got["error"])
                return
            jobs = got.get("jobs") or []
            with rec.lock:
                rec.counts["claim_kill_jobs"] += len(jobs)
                rec.counts[f"claim_kill_{when}_jobs"] += len(jobs)
            if jobs:
                self._claimed(jobs, worker, got["started"])
                self.hold(client, worker, jobs, rng)
        finally:
            hold.clear()
            client.close()
