"""The load and the checks of job groups (per-group limits, fifo order): which group
a pushed job gets, the log of every claim, heartbeat and settlement the clients made,
the head samples, and the two checks over them: no group ever held more than its
limit, and (``group_order`` ``fifo``) every group's jobs settled in push order, never
two held at once.

The log (:class:`ClaimLog`) holds, per claim answer, for each job: its token, id,
group, worker, when the claim was sent and when its answer arrived (seconds since the
run started, the runner's monotonic clock, shared by every client thread), the lease
asked for (s) and the expiry the broker answered; per heartbeat answered ``ok``: the
token, when it was sent and the lease; per settlement (complete or fail): the token,
the outcome, when it was first sent and answered, and the answer (``ok``, the status;
None if the call raised).

**Held intervals** (:func:`held_intervals`). A job is held by one token from the
claim answer's arrival until the earlier of the first settlement's send and its
lease's end ``L``, where ``L`` is the latest ``sent + lease_s`` over the claim and the
heartbeats of that token answered ``ok``. The interval lies INSIDE the time the broker
counts the job against its group: the claim landed before its answer arrived; the
position stays held until the settlement lands (after it was sent) or the owner
reclaims it, after the expiry it set on receipt of the request, itself after
``sent + lease_s`` on the same host's clock (a takeover keeps the records' expiries,
it never shortens them); the lease's end is also never taken past the expiry the
claim answered (so the millisecond rounding of that expiry cannot stretch a hold).
So more than ``limit`` intervals of one group overlapping is a real violation,
whatever the network did. The other direction (a claim whose answer was lost, so
the worker never logged it) the log cannot see; the head samples
(:func:`head_claimed_by_group`) cover it: each counts the claimed lines of the head,
what the broker itself counts, at the moment of the sample. The answered expiries
give ``lease_margin_s``: the answered expiry minus (send time + lease), min and max
over the log, which shows the clocks agree (within the expiry's 1 ms rounding).

**Order** (:func:`check_group_order`): per group, the jobs completed ``ok``, taken in
the order their completing call was first sent, must come in seq (push) order, and so
must the jobs' first logged claims; jobs that died (answered ``dead``, or seen dead in
a head sample) are left out (``group_dead: "skip"``: they leave the order; the drain
redrives and completes them later). A completion's send is a sound order: in a fifo
group the next job can be claimed only after the previous one's completion landed,
after it was sent.

Times are seconds since the run started.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from broker import timefmt
from broker.model.job import seq_of

#: violations (and their samples) kept per check
SAMPLES = 20


def group_of(rng: random.Random, groups: int, skew: float) -> str:
    """A group name for one pushed job: ``g00000``..``g{groups-1}``, drawn so that
    low-numbered groups are busier: index ``int(groups * u ** skew)`` for a uniform
    ``u`` (``skew`` 1: uniform; 2: group 0 gets about ``sqrt(1/groups)`` of the jobs)."""
    return f"g{min(groups - 1, int(groups * rng.random() ** skew)):05d}"


class ClaimLog:
    """The clients' log of claims, heartbeats and settlements (see the module
    docstring), thread-safe. ``wall_at_zero``: the wall-clock time (s since the epoch)
    at the run's time 0, to compare answered expiries with send times."""

    def __init__(self, wall_at_zero: float) -> None:
        self.wall_at_zero = wall_at_zero
        self.lock = threading.Lock()
        self.claims: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.settlements: list[dict[str, Any]] = []

    def claimed(self, jobs: Iterable[Any], worker: str, sent: float, answered: float,
                lease_s: float) -> None:
        """A claim answer: ``jobs`` (ClaimedJob: id, token, group, lease_expires_at)."""
        rows = [{"token": j.token, "job": j.id, "group": j.group, "worker": worker,
                 "sent": sent, "answered": answered, "lease_s": lease_s,
                 "expires_at": j.lease_expires_at} for j in jobs]
        with self.lock:
            self.claims.extend(rows)

    def heartbeat(self, tokens: Sequence[str], oks: Sequence[bool], sent: float,
                  lease_s: float) -> None:
        """A heartbeat's answer: the tokens answered ``ok`` extend their leases."""
        rows = [{"token": t, "sent": sent, "lease_s": lease_s}
                for t, ok in zip(tokens, oks, strict=True) if ok]
        with self.lock:
            self.heartbeats.extend(rows)

    def settled(self, outcome: str, tokens: Sequence[str], sent: float,
                answered: float | None, answers: Sequence[Any] | None) -> None:
        """A complete or fail (``outcome``) of ``tokens``, first sent at ``sent``;
        ``answers`` (ItemResult: ok, status) or None if the call raised (its outcome
        unknown: the job may be settled)."""
        rows = [{"token": t, "outcome": outcome, "sent": sent, "answered": answered,
                 "ok": None if answers is None else bool(answers[i].ok),
                 "status": None if answers is None else getattr(answers[i], "status", None)}
                for i, t in enumerate(tokens)]
        with self.lock:
            self.settlements.extend(rows)

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        with self.lock:
            return {"claims": list(self.claims), "heartbeats": list(self.heartbeats),
                    "settlements": list(self.settlements)}


@dataclass(frozen=True)
class Hold:
    """One job held by one token, ``start``..``end`` (s); ``ended_by``: ``settled``
    (the first settlement's send) or ``lease`` (no settlement sent before the lease's
    end)."""

    group: str
    job: str
    token: str
    start: float
    end: float
    ended_by: str


def _answered_end(claim: dict[str, Any], wall_at_zero: float | None) -> float | None:
    """The expiry a claim answered, in seconds since the run started (None without
    ``wall_at_zero`` or a readable expiry)."""
    if wall_at_zero is None:
        return None
    try:
        return timefmt.parse(str(claim["expires_at"])) / 1000.0 - wall_at_zero
    except ValueError:
        return None


def held_intervals(log: dict[str, list[dict[str, Any]]],
                   wall_at_zero: float | None = None) -> list[Hold]:
    """The intervals during which each grouped job was surely held (module
    docstring), one per claim of a job (a reclaim after expiry is another). Claims of
    jobs without a group are left out; a token claimed twice keeps its first claim.
    With ``wall_at_zero`` (the wall clock at the run's time 0, s), a claim's lease
    ends at the earlier of ``sent + lease_s`` and the expiry it answered (the
    broker's own word, written to the millisecond), so that neither the rounding of
    that expiry nor the clock's conversion can stretch a hold."""
    lease_end: dict[str, float] = {}
    first: dict[str, dict[str, Any]] = {}
    for c in log["claims"]:
        if c["group"] is None or c["token"] in first:
            continue
        first[c["token"]] = c
        answered = _answered_end(c, wall_at_zero)
        lease_end[c["token"]] = c["sent"] + c["lease_s"] if answered is None else min(
            c["sent"] + c["lease_s"], answered)
    for h in log["heartbeats"]:
        if h["token"] in lease_end:
            lease_end[h["token"]] = max(lease_end[h["token"]], h["sent"] + h["lease_s"])
    settle: dict[str, float] = {}
    for s in log["settlements"]:
        if s["token"] in first:
            settle[s["token"]] = min(settle.get(s["token"], s["sent"]), s["sent"])
    out = []
    for token, c in first.items():
        end, by = lease_end[token], "lease"
        if token in settle and settle[token] <= end:
            end, by = settle[token], "settled"
        out.append(Hold(str(c["group"]), str(c["job"]), token, float(c["answered"]),
                        float(end), by))
    return out


def _limit_for(group: str, limit: int | None, limits: dict[str, int | None]) -> int | None:
    return limits.get(group, limit)


def check_group_limits(holds: Sequence[Hold], limit: int | None,
                       limits: dict[str, int | None] | None = None) -> dict[str, Any]:
    """Sweep each group's intervals (an end at the same instant as a start comes
    first: touching is not overlapping): ``max_held`` (the most held at once, per
    group, the busiest 10 and over all groups), ``violations`` (how many moments a
    group went above its limit, ``limit`` or its entry in ``limits``; None:
    unlimited) and up to :data:`SAMPLES` of them (group, moment, limit, the jobs
    held), ``holds``, ``ended_by_lease``."""
    limits = limits or {}
    by_group: dict[str, list[Hold]] = collections.defaultdict(list)
    for h in holds:
        if h.end > h.start:
            by_group[h.group].append(h)
    max_held: dict[str, int] = {}
    violations = 0
    samples: list[dict[str, Any]] = []
    for group, hs in by_group.items():
        cap = _limit_for(group, limit, limits)
        events = sorted([(h.start, 1, i) for i, h in enumerate(hs)]
                        + [(h.end, 0, i) for i, h in enumerate(hs)])
        held: set[int] = set()
        top = 0
        for t, kind, i in events:
            if kind == 0:
                held.discard(i)
                continue
            held.add(i)
            top = max(top, len(held))
            if cap is not None and len(held) > cap:
                violations += 1
                if len(samples) < SAMPLES:
                    samples.append({"group": group, "t": round(t, 3), "limit": cap,
                                    "held": sorted(f"{hs[k].job}@{hs[k].token[-8:]}"
                                                   for k in held)})
        max_held[group] = top
    busiest = sorted(max_held.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return {"holds": len(holds), "groups": len(by_group),
            "ended_by_lease": sum(1 for h in holds if h.ended_by == "lease"),
            "max_held": max(max_held.values(), default=0), "busiest": dict(busiest),
            "violations": violations, "samples": samples}


def lease_margins(log: dict[str, list[dict[str, Any]]], wall_at_zero: float
                  ) -> dict[str, float | None]:
    """The answered expiry minus (send time + lease) of every logged claim, in s:
    min and max (None without claims). A broker sets the expiry on receipt, after the
    send, so on one host's clock the minimum is >= 0 (give or take the clock's
    millisecond rounding)."""
    margins = []
    for c in log["claims"]:
        try:
            expires = timefmt.parse(str(c["expires_at"])) / 1000.0
        except ValueError:
            continue
        margins.append(expires - (wall_at_zero + c["sent"] + c["lease_s"]))
    if not margins:
        return {"min": None, "max": None}
    return {"min": round(min(margins), 3), "max": round(max(margins), 3)}


def check_group_order(log: dict[str, list[dict[str, Any]]], died: set[str]) -> dict[str, Any]:
    """Per group, the jobs completed ``ok`` in the order their completing call was
    first sent, and the jobs in the order of their first logged claim's answer, must
    each come in seq order (the module docstring); jobs in ``died`` are left out.
    ``completed`` and ``claimed``: the jobs each order covers; ``completion_violations``
    and ``claim_violations``: jobs that came after one of a higher seq, with up to
    :data:`SAMPLES` samples (group, job, the higher job before it)."""
    group_of_token = {c["token"]: c for c in log["claims"] if c["group"] is not None}
    done_at: dict[str, float] = {}  # job -> when its ok completion was first sent
    job_group: dict[str, str] = {}
    for s in log["settlements"]:
        c = group_of_token.get(s["token"])
        if c is None or s["outcome"] != "complete" or s["ok"] is not True:
            continue
        job = str(c["job"])
        done_at[job] = min(done_at.get(job, s["sent"]), s["sent"])
        job_group[job] = str(c["group"])
    claimed_at: dict[str, float] = {}
    for c in group_of_token.values():
        job = str(c["job"])
        claimed_at[job] = min(claimed_at.get(job, c["answered"]), c["answered"])
        job_group[job] = str(c["group"])

    def inversions(at: dict[str, float]) -> tuple[int, int, list[dict[str, Any]]]:
        per: dict[str, list[tuple[float, int, str]]] = collections.defaultdict(list)
        for job, t in at.items():
            seq = seq_of(job)
            if job not in died and seq is not None:
                per[job_group[job]].append((t, seq, job))
        bad, n = 0, 0
        samples: list[dict[str, Any]] = []
        for group, rows in sorted(per.items()):
            rows.sort()
            n += len(rows)
            top: tuple[int, str] | None = None
            for _, seq, job in rows:
                if top is not None and seq < top[0]:
                    bad += 1
                    if len(samples) < SAMPLES:
                        samples.append({"group": group, "job": job, "after": top[1]})
                elif top is None or seq > top[0]:
                    top = (seq, job)
        return n, bad, samples

    completed, c_bad, c_samples = inversions(done_at)
    claimed, k_bad, k_samples = inversions(claimed_at)
    return {"completed": completed, "completion_violations": c_bad,
            "completion_samples": c_samples, "claimed": claimed, "claim_violations": k_bad,
            "claim_samples": k_samples, "died_left_out": len(died)}


def head_claimed_by_group(raw: dict[str, Any]) -> tuple[dict[str, list[str]], set[str], int]:
    """From a head read as plain JSON: the claimed jobs of each group (its ``"jobs"``
    lines with status ``claimed`` and a ``"group"``: what the owner counts against
    the group's limit until each is settled or reclaimed), the ids of dead jobs, and
    how many positions the claim records hold beyond the head's claimed lines
    (positions claimed from objects, whose group the head does not say: not
    attributed to a group, reported)."""
    claimed: dict[str, list[str]] = collections.defaultdict(list)
    dead: set[str] = set()
    inline = 0
    for j in raw.get("jobs") or []:
        status = j.get("status")
        if status == "claimed":
            inline += 1
            if isinstance(j.get("group"), str):
                claimed[j["group"]].append(str(j.get("id")))
        elif status == "dead":
            dead.add(str(j.get("id")))
    held = 0
    for rec in raw.get("claims") or []:
        if isinstance(rec, dict) and isinstance(rec.get("n"), int):
            settled = rec.get("settled") or []
            held += rec["n"] - sum(settled[1::2]) if isinstance(settled, list) else rec["n"]
    return dict(claimed), dead, max(0, held - inline)


class HeadSamples:
    """What the head samples showed (fed by :meth:`add`): per group the most claimed
    jobs seen in one sample, the samples where a group was above its limit, the dead
    ids seen, and the unattributed positions (see :func:`head_claimed_by_group`)."""

    def __init__(self, limit: int | None, limits: dict[str, int | None] | None = None) -> None:
        self.limit = limit
        self.limits = limits or {}
        self.samples = 0
        self.errors = 0
        self.max_claimed: dict[str, int] = {}
        self.violations = 0
        self.violation_samples: list[dict[str, Any]] = []
        self.dead: set[str] = set()
        self.unattributed_max = 0

    def add(self, raw: dict[str, Any] | None, t: float) -> None:
        """One sample of the head (``None``: not created yet) read at ``t``."""
        if raw is None:
            return
        claimed, dead, unattributed = head_claimed_by_group(raw)
        self.samples += 1
        self.dead |= dead
        self.unattributed_max = max(self.unattributed_max, unattributed)
        for group, jobs in claimed.items():
            self.max_claimed[group] = max(self.max_claimed.get(group, 0), len(jobs))
            cap = _limit_for(group, self.limit, self.limits)
            if cap is not None and len(jobs) > cap:
                self.violations += 1
                if len(self.violation_samples) < SAMPLES:
                    self.violation_samples.append({"group": group, "t": round(t, 3),
                                                   "limit": cap, "held": sorted(jobs)})

    def summary(self) -> dict[str, Any]:
        busiest = sorted(self.max_claimed.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        return {"samples": self.samples, "read_errors": self.errors,
                "max_claimed": max(self.max_claimed.values(), default=0),
                "busiest": dict(busiest), "violations": self.violations,
                "violation_samples": self.violation_samples, "dead_seen": len(self.dead),
                "unattributed_positions_max": self.unattributed_max}


class HeadSampler:
    """A thread reading the head (``read``: the plain JSON head or None) every
    ``every_s`` s into ``samples`` until :meth:`stop`; read errors are counted."""

    def __init__(self, read: Callable[[], dict[str, Any] | None], samples: HeadSamples,
                 clock: Callable[[], float], every_s: float) -> None:
        self.read, self.samples, self.clock, self.every_s = read, samples, clock, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30.0)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            t = self.clock()
            try:
                raw = self.read()
            except Exception:  # a read the store failed, or a head caught mid-write
                self.samples.errors += 1
                continue
            self.samples.add(raw, t)


def effective_limit(limit: int | None, order: str | None) -> int | None:
    """The most jobs of one group held at once that the checks allow: a fifo group
    holds at most one, else ``limit`` (None: unlimited)."""
    if order == "fifo":
        return 1 if limit is None else min(limit, 1)
    return limit


def group_checks(log: dict[str, list[dict[str, Any]]], wall_at_zero: float,
                 heads: HeadSamples | None, *, limit: int | None, order: str | None,
                 applied: bool, died: set[str]) -> dict[str, Any]:
    """Every check of groups over one run's log and head samples. ``limit`` and
    ``order``: the settings the run asked for; ``applied``: whether the broker
    accepted them. Without them (or refused) the checks still run and report what
    they saw (the most held at once per group), but their violations fail nothing:
    ``limit_check`` / ``order_check`` say ``"not applicable"``. ``failures``: what
    fails the run (``group_limit_exceeded``: moments from the log plus head samples
    above the limit; ``group_order_violations``)."""
    cap = effective_limit(limit, order)
    limit_on = applied and cap is not None
    order_on = applied and order == "fifo"
    held = check_group_limits(held_intervals(log, wall_at_zero), cap)
    heads_summary = heads.summary() if heads is not None else None
    dead = died | (heads.dead if heads is not None else set())
    ordered = check_group_order(log, dead)
    failures = {
        "group_limit_exceeded": (held["violations"] + (heads_summary or {}).get("violations", 0)
                                 if limit_on else 0),
        "group_order_violations": (ordered["completion_violations"]
                                   + ordered["claim_violations"] if order_on else 0)}
    return {"limit": cap, "order": order or "fair", "applied": applied,
            "limit_check": "applied" if limit_on else "not applicable",
            "order_check": "applied" if order_on else "not applicable",
            "grouped_claims_logged": sum(1 for c in log["claims"] if c["group"] is not None),
            "claims_logged": len(log["claims"]),
            "settlements_logged": len(log["settlements"]),
            "heartbeats_logged": len(log["heartbeats"]),
            "lease_margin_s": lease_margins(log, wall_at_zero),
            "log": held, "heads": heads_summary, "order_by_log": ordered,
            "failures": failures}
