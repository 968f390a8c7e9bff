"""Carrying out the nemesis schedule against the broker that owns the queue (kill -9 and
restart, SIGSTOP past the lease, a competing broker for a while), and measuring the
outages that followed from what the clients saw."""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from broker.errors import OsqueueError
from broker.storage import ObjectStore
from tools.chaos.brokers import BrokerSlot
from tools.chaos.schedule import Event
from tools.chaos.store import read_state_raw
from tools.chaos.wide import Wide


class Nemesis:
    """Runs the schedule in a thread; restarts run in their own threads so the
    schedule keeps time. Every action is logged with its time (s since start)."""

    def __init__(self, args: argparse.Namespace, slots: list[BrokerSlot],
                 competitor: BrokerSlot, direct: ObjectStore, clock: Callable[[], float],
                 say: Callable[[str], None]) -> None:
        self.args = args
        self.slots = slots
        self.competitor = competitor
        self.direct = direct
        self.clock = clock
        self.say = say
        self.log: list[dict[str, Any]] = []
        self.kills: list[dict[str, Any]] = []
        self.pauses: list[dict[str, Any]] = []
        self.competes: list[dict[str, Any]] = []
        self._heap: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._helpers: list[threading.Thread] = []
        self._thread: threading.Thread | None = None
        self.crashes: list[str] = []
        self.wide: Wide | None = None  # the wide load's hooks (redrive, claim_for_kill)

    def note(self, action: str, **fields: Any) -> dict[str, Any]:
        """Log and print one action; the log entry."""
        entry = {"t": round(self.clock(), 3),
                 "at": time.strftime("%H:%M:%S", time.localtime()), "action": action, **fields}
        with self._lock:
            self.log.append(entry)
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        self.say(f"nemesis {action} {extra}")
        return entry

    def at(self, t: float, name: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` at ``t`` (seconds since the run started)."""
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (t, self._seq, name, fn))

    def owner(self) -> tuple[BrokerSlot | None, str | None]:
        """The slot whose URL the queue object names as its broker (and that URL)."""
        try:
            raw = read_state_raw(self.direct)
        except OsqueueError as exc:
            self.say(f"nemesis: cannot read the owner: {exc}")
            return None, None
        url = ((raw or {}).get("broker") or {}).get("url")
        for slot in [*self.slots, self.competitor]:
            if url and slot.url == url.rstrip("/"):
                return slot, url
        return None, url

    def start(self, schedule: list[Event], chaos_start: float) -> None:
        """Queue the schedule's events (times relative to ``chaos_start``, s since the
        run started) and start the thread that runs them."""
        for ev in schedule:
            self.at(chaos_start + ev.at_s, ev.kind, self._action(ev))
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def _action(self, ev: Event) -> Callable[[], None]:
        if ev.kind == "kill":
            return lambda: self._kill(ev)
        if ev.kind == "pause":
            return lambda: self._pause(ev)
        if ev.kind == "redrive":
            return lambda: self._redrive(ev)
        if ev.kind == "claim_kill":
            return lambda: self._claim_kill(ev)
        return lambda: self._compete(ev)

    def _helper(self, name: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` in a thread of its own (joined by :meth:`stop`); a crash is
        recorded as the nemesis's."""
        def go() -> None:
            try:
                fn()
            except Exception:
                self.crashes.append(traceback.format_exc()[-2000:])

        t = threading.Thread(target=go, name=name, daemon=True)
        self._helpers.append(t)
        t.start()

    def _redrive(self, ev: Event) -> None:
        """A redrive of the dead (all, or by id) and, ``after_s`` s into it, a kill
        or a pause of the owner."""
        if self.wide is None:
            self.note("redrive_skipped", reason="no wide load")
            return
        mode, wide = ev.params["mode"], self.wide
        self.note("redrive", mode=mode, then=ev.params["then"])
        self._helper(f"redrive-{mode}", lambda: wide.redrive_now(mode))
        self._stop.wait(ev.params["after_s"])
        (self._kill if ev.params["then"] == "kill" else self._pause)(ev)

    def _claim_kill(self, ev: Event) -> None:
        """A big claim with the owner killed before its answer or after it."""
        if self.wide is None:
            self.note("claim_kill_skipped", reason="no wide load")
            return
        when, wide = ev.params["when"], self.wide
        self.note("claim_kill", when=when)
        self._helper(f"claim-kill-{when}",
                     lambda: wide.claim_for_kill(when, lambda: self._kill(ev),
                                                 float(ev.params["delay_s"])))

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                item = self._heap[0] if self._heap else None
            if item is None:
                self._stop.wait(0.2)
                continue
            delay = item[0] - self.clock()
            if delay > 0:
                self._stop.wait(min(delay, 0.2))
                continue
            with self._lock:
                heapq.heappop(self._heap)
            try:
                item[3]()
            except Exception:
                self.crashes.append(traceback.format_exc()[-2000:])
                self.say(f"nemesis action {item[2]} crashed: {traceback.format_exc()[-500:]}")

    def stop(self) -> None:
        """Stop running actions (the heal puts everything right afterwards)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for t in self._helpers:
            t.join(self.args.broker_start_timeout_s * 2)
        with self._lock:
            left = [name for _, _, name, _ in self._heap]
            self._heap.clear()
        if left:
            self.note("cancelled", pending=left)

    def _restart_later(self, slot: BrokerSlot, after_s: float, why: str) -> None:
        def go() -> None:
            if self._stop.wait(after_s):
                return
            ok = slot.start(self.args.broker_start_timeout_s)
            self.note("restarted" if ok else "restart_failed", slot=slot.name, why=why,
                      pid=slot.pid)

        t = threading.Thread(target=go, name=f"restart-{slot.name}", daemon=True)
        self._helpers.append(t)
        t.start()

    def _target(self, what: str) -> tuple[BrokerSlot | None, bool, str | None]:
        """The owner's slot (True) or, with no live owner to hit, a live main broker."""
        slot, url = self.owner()
        if slot is not None and slot.alive() and not slot.paused:
            return slot, True, url
        live = [s for s in self.slots if s.alive() and not s.paused]
        if not live:
            return None, False, url
        rng = random.Random(f"{self.args.seed}-{what}-{len(self.log)}")
        return rng.choice(live), False, url

    def _kill(self, ev: Event) -> None:
        if self._stop.is_set():  # (a helper's kill after the chaos phase: nothing would restart it)
            self.note("kill_skipped", reason="the chaos phase is over")
            return
        slot, is_owner, url = self._target("kill")
        if slot is None:
            self.note("kill_skipped", reason="no live broker", owner_url=url)
            return
        pid = slot.pid
        t = self.clock()
        if not slot.kill():
            self.note("kill_skipped", slot=slot.name, reason="not running")
            return
        entry = self.note("kill", slot=slot.name, pid=pid, owner=is_owner, owner_url=url,
                          restart_after_s=ev.params["restart_after_s"])
        self.kills.append({"t": t, "slot": slot.name, "owner": is_owner, "log": entry})
        if slot is self.competitor:
            return  # a competitor is not restarted
        self._restart_later(slot, ev.params["restart_after_s"], "after kill")

    def _pause(self, ev: Event) -> None:
        if self._stop.is_set():  # (its resume would never run: the heal resumes, later)
            self.note("pause_skipped", reason="the chaos phase is over")
            return
        slot, is_owner, url = self._target("pause")
        if slot is None:
            self.note("pause_skipped", reason="no live broker", owner_url=url)
            return
        t = self.clock()
        if not slot.signal(signal.SIGSTOP):
            self.note("pause_skipped", slot=slot.name, reason="not running")
            return
        gen = slot.generation
        hold = float(ev.params["hold_s"])
        entry = self.note("pause", slot=slot.name, pid=slot.pid, owner=is_owner, owner_url=url,
                          hold_s=hold)
        self.pauses.append({"t": t, "slot": slot.name, "owner": is_owner, "hold_s": hold,
                            "log": entry})

        def resume() -> None:
            if slot.generation == gen and slot.signal(signal.SIGCONT):
                self.note("resume", slot=slot.name, pid=slot.pid)

        self.at(t + hold, "resume", resume)

    def _compete(self, ev: Event) -> None:
        slot = self.competitor
        if slot.alive():
            self.note("compete_skipped", reason="a competitor is still running")
            return
        entry = self.note("compete_start", slot=slot.name, for_s=ev.params["for_s"])
        t = self.clock()
        record = {"t": t, "for_s": ev.params["for_s"], "log": entry, "started": False}
        self.competes.append(record)

        def run() -> None:
            ok = slot.start(self.args.broker_start_timeout_s, attempts=2)
            record["started"] = ok
            self.note("compete_ready" if ok else "compete_failed", slot=slot.name,
                      pid=slot.pid)
            if ok:
                self.at(t + float(ev.params["for_s"]), "compete_stop",
                        lambda: self._compete_stop(ev))

        th = threading.Thread(target=run, name="competitor", daemon=True)
        self._helpers.append(th)
        th.start()

    def _compete_stop(self, ev: Event) -> None:
        slot = self.competitor
        if not slot.alive():
            self.note("compete_stop_skipped", reason="not running")
            return
        how = ev.params["stop_with"]
        pid = slot.pid
        code: int | None
        if how == "SIGKILL":
            slot.kill()
            code = -9
        else:
            code = slot.terminate(30.0)
        self.note("compete_stop", slot=slot.name, pid=pid, signal=how, exit=code)


def availability(successes: list[tuple[float, float]], start: float, end: float,
                 kills: list[dict[str, Any]], pauses: list[dict[str, Any]]) -> dict[str, Any]:
    """Longest window without progress in [start, end] and the outage after each kill
    and pause, all in seconds.

    ``successes`` are (call started, answered) of the calls that made progress. The
    outage after an event at t runs to the first answer of a call that STARTED at
    or after t (an answer already on its way at t proves nothing about recovery);
    ``first_answer_s`` is the time to any answer after t, for comparison.
    """
    ends = sorted(e for _, e in successes)
    inside = [t for t in ends if start <= t <= end]
    points = [start, *inside, end]
    longest, at = 0.0, start
    for a, b in itertools.pairwise(points):
        if b - a > longest:
            longest, at = b - a, a
    by_start = sorted(successes)
    starts = [s for s, _ in by_start]
    suffix_min = [0.0] * len(by_start)
    best = float("inf")
    for i in range(len(by_start) - 1, -1, -1):
        best = min(best, by_start[i][1])
        suffix_min[i] = best

    def outage(t: float) -> float | None:
        i = bisect.bisect_left(starts, t)
        return None if i >= len(starts) else round(suffix_min[i] - t, 3)

    def first_answer(t: float) -> float | None:
        i = bisect.bisect_right(ends, t)
        return None if i >= len(ends) else round(ends[i] - t, 3)

    kill_outages = [{"t": round(k["t"], 3), "slot": k["slot"], "owner": k["owner"],
                     "outage_s": outage(k["t"]), "first_answer_s": first_answer(k["t"])}
                    for k in kills]
    pause_outages = [{"t": round(p["t"], 3), "slot": p["slot"], "hold_s": p["hold_s"],
                      "outage_s": outage(p["t"]), "first_answer_s": first_answer(p["t"])}
                     for p in pauses]
    kill_values = [k["outage_s"] for k in kill_outages if k["owner"]]
    return {
        "progress_events": len(inside),
        "longest_gap_s": round(longest, 3),
        "longest_gap_at_s": round(at, 3),
        "max_outage_after_owner_kill_s": None if not kill_values else
        (None if any(v is None for v in kill_values) else max(kill_values)),
        "kill_outages": kill_outages,
        "pause_outages": pause_outages,
    }
