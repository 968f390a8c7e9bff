"""The job objects of a run (segment objects of deep queues' pending jobs, and the
spill objects of failed and dead jobs once the head's format has them): which the
brokers wrote, and whether any is left behind once the queue is drained.

* :class:`SegmentWatch` lists the queue's segments prefix every ``interval_s``
  during the run (the runner's own reads, no faults): every key it saw and when
  it first saw it. A segment written and deleted between two listings is
  missed, so its count is a lower bound of the segments written; so is the
  brokers' own count in their logs (:func:`broker_log_counts`); on S3 the
  fault proxy's request log gives the exact count (:func:`s3_segment_requests`).
* :func:`wait_for_sweep`, with the queue drained and the brokers still up:
  waits until every segment object is one the queue object references (the
  owner deletes an exhausted segment after the commit that dropped it and
  sweeps an unreferenced one once it listed it for ``--segment-grace-s``),
  then reports what is left. Any object left unreferenced past the wait is a
  segment left behind, a check failure.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker import paths
from broker.errors import OsqueueError
from broker.storage import ObjectStore
from tools.chaos.store import QUEUE, read_state_raw


def segment_keys(store: ObjectStore) -> list[str]:
    """Every object under the queue's segments and spills prefixes (the job objects)."""
    return [*store.list(paths.segments_prefix(QUEUE)), *store.list(paths.spills_prefix(QUEUE))]


def head_refs(store: ObjectStore) -> set[str] | None:
    """The keys of the job objects (segments, spill objects) the queue object
    references (None: no queue object)."""
    raw = read_state_raw(store)
    if raw is None:
        return None
    return {str(ref.get("key")) for name in ("segments", "spills")
            for ref in raw.get(name) or [] if isinstance(ref, dict)}


class SegmentWatch:
    """Lists the segments prefix every ``interval_s`` s in a thread until :meth:`stop`;
    ``seen``: key -> the run's clock when first listed."""

    def __init__(self, store: ObjectStore, clock: Callable[[], float],
                 interval_s: float) -> None:
        self.store = store
        self.clock = clock
        self.interval_s = interval_s
        self.seen: dict[str, float] = {}
        self.listings = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="segment-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def poll(self) -> list[str]:
        """List once; the keys listed (recorded in ``seen``)."""
        keys = segment_keys(self.store)
        now = self.clock()
        for key in keys:
            self.seen.setdefault(key, now)
        self.listings += 1
        return keys

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except (OsqueueError, OSError):
                self.errors += 1
            self._stop.wait(self.interval_s)


def wait_for_sweep(watch: SegmentWatch, timeout_s: float, say: Callable[[str], None]
                   ) -> dict[str, Any]:
    """Wait (at most ``timeout_s`` s) until no job object is left (the queue is
    drained: the owner deletes exhausted ones and sweeps unreferenced ones); the
    outcome: objects listed, referenced, left behind (with samples
    and how long ago the watch first saw each), seconds waited."""
    t0 = time.monotonic()
    last_say = t0
    while True:
        try:
            listed = watch.poll()
            refs = head_refs(watch.store) or set()
        except (OsqueueError, OSError) as exc:
            say(f"segments: cannot list them or read the queue object ({exc}); again")
            listed, refs = None, set()
        if listed is not None:
            left = sorted(set(listed) - refs)
            # drained: every object goes (exhausted ones deleted, the rest swept)
            if not listed or time.monotonic() - t0 >= timeout_s:
                now = watch.clock()
                return {"objects": len(listed), "referenced": len(refs),
                        "referenced_missing": len(refs - set(listed)),
                        "left_behind": len(left),
                        "left_behind_samples": [
                            {"key": k, "first_seen_s_ago": round(now - watch.seen[k], 3)}
                            for k in left[:20]],
                        "waited_s": round(time.monotonic() - t0, 3)}
            if time.monotonic() - last_say > 5:
                say(f"segments: {len(listed)} job object(s) left ({len(left)} not "
                    "referenced); waiting for their delete or a sweep")
                last_say = time.monotonic()
        elif time.monotonic() - t0 >= timeout_s:
            return {"error": "could not list the segment objects", "left_behind": -1,
                    "waited_s": round(time.monotonic() - t0, 3)}
        time.sleep(0.5)


_WRITTEN = re.compile(r"push of \d+ jobs to \S+ by reference: (\d+) segment object")
_SWEPT = re.compile(r"swept (\d+) segment (?:or spill )?object")


def broker_log_counts(run_dir: Path) -> dict[str, int]:
    """From the brokers' logs (at log level info): the pushes by reference that
    reached their commit and the segment objects they wrote, and the segment
    objects the sweeps deleted (objects no commit referenced). A broker killed
    between a write and its log line is not counted."""
    out = {"pushes_by_reference_logged": 0, "segments_written_logged": 0,
           "segments_swept_logged": 0}
    for path in sorted(run_dir.glob("broker-*.log")):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if (m := _WRITTEN.search(line)) is not None:
                    out["pushes_by_reference_logged"] += 1
                    out["segments_written_logged"] += int(m.group(1))
                elif (m := _SWEPT.search(line)) is not None:
                    out["segments_swept_logged"] += int(m.group(1))
    return out


def s3_segment_requests(run_dir: Path) -> dict[str, int] | None:
    """From the fault proxy's request log of an S3 run: the segment objects whose
    PUT landed (distinct keys) and those deleted; None without the log."""
    log = run_dir / "s3-requests.jsonl"
    if not log.exists():
        return None
    put: set[str] = set()
    deleted: set[str] = set()
    with open(log, encoding="utf-8") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            path = str(entry.get("path", "")).split("?", 1)[0]
            if "/segments/" not in path:
                continue
            if entry.get("m") == "PUT" and entry.get("status") == 200:
                put.add(path)
            elif entry.get("m") == "DELETE" and entry.get("status") in (200, 204):
                deleted.add(path)
    return {"segment_puts_landed": len(put), "segment_deletes": len(deleted)}
