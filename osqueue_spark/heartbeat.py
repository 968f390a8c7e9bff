"""A background thread that keeps the leases of held jobs alive.

It heartbeats every ``lease_s / 3`` seconds for all tokens it holds, in one
request per ``MAX_ITEMS`` tokens, each extending the lease to ``lease_s``
seconds from the broker's now.
A token the broker reports lost (the job was reclaimed) is dropped and
recorded in ``lost``: the holder must not complete it. A token whose job was
cancelled (answered with status ``cancelled``) is dropped and recorded in
``cancelled`` instead: the holder should stop working on it, and settles
nothing (the broker has ended the job as cancelled). Transient broker
errors are logged and retried at the next beat; they never stop the thread,
and neither does any other exception of a beat (an answer that does not
parse, a bug): a dead thread would let every held lease lapse mid-batch.
A holder that settles tokens (complete, fail) while the thread runs does so
inside :meth:`Heartbeater.paused` and removes them there, so no beat in
flight reports a just-completed job as lost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from broker.errors import OsqueueError
from broker.limits import MAX_ITEMS
from broker.wire import CANCELLED

log = logging.getLogger("osqueue.heartbeat")


class Heartbeater:
    def __init__(self, client: Any, lease_s: float) -> None:
        self.client = client
        self.lease_s = lease_s
        self.interval_s = max(0.05, lease_s / 3)
        self.lost: set[str] = set()
        self.cancelled: set[str] = set()
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self._beating = threading.Lock()  # held while a heartbeat request is in flight
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="osqueue-heartbeat", daemon=True)
        self._thread.start()

    def add(self, tokens: Iterable[str]) -> None:
        with self._lock:
            self._tokens.update(tokens)

    def remove(self, tokens: Iterable[str]) -> None:
        with self._lock:
            self._tokens.difference_update(tokens)

    def take_lost(self) -> set[str]:
        """The tokens found lost since the last call (and clear them from ``lost``)."""
        return self._take(self.lost)

    def take_cancelled(self) -> set[str]:
        """The tokens whose jobs were found cancelled since the last call (and
        clear them from ``cancelled``)."""
        return self._take(self.cancelled)

    def _take(self, found: set[str]) -> set[str]:
        with self._lock:
            out = set(found)
            found.clear()
        return out

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No heartbeat request is in flight while the block runs (it waits for
        one that is). Settle tokens and :meth:`remove` them inside it."""
        with self._beating:
            yield

    def beat(self) -> None:
        """Send one heartbeat for every held token now."""
        with self._beating:
            with self._lock:
                tokens = sorted(self._tokens)
            if not tokens:
                return
            results: list[Any] = []
            for i in range(0, len(tokens), MAX_ITEMS):  # the broker's bound per request
                try:
                    results.extend(self.client.heartbeat(tokens[i:i + MAX_ITEMS], self.lease_s))
                except OsqueueError as exc:
                    log.warning("heartbeat failed (%s); retrying in %.1fs", exc,
                                self.interval_s)
                except Exception:  # not the broker's answer: still beat again
                    log.exception("heartbeat failed unexpectedly; retrying in %.1fs",
                                  self.interval_s)
            with self._lock:  # a token released meanwhile (completed) was not lost
                gone = [r for r in results if not r.ok and r.token in self._tokens]
                self._tokens.difference_update(r.token for r in gone)
                cancelled = [r.token for r in gone if r.status == CANCELLED]
                lost = [r.token for r in gone if r.status != CANCELLED]
                self.cancelled.update(cancelled)
                self.lost.update(lost)
        if lost:
            log.warning("lost %d lease(s): %s", len(lost), lost[:5])
        if cancelled:
            log.info("%d held job(s) were cancelled: %s", len(cancelled), cancelled[:5])

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # the thread must outlive any one beat
                log.exception("heartbeat failed unexpectedly; retrying in %.1fs",
                              self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)

    def __enter__(self) -> Heartbeater:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
