"""How a queue object plugs into the generic commit loop (:mod:`broker.commit`).

Business rules that run on every commit live here, not in the loop: reclaim
expired leases, take the queue over on first touch (which re-leases every
claimed job on this broker's clock), renew the broker lease once a third of
it has passed, and write completed jobs to the archive before the commit
that removes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from broker import archive, keys, timefmt, transitions
from broker import state as S
from broker.errors import NotTheBroker, OsqueueError
from broker.storage import Data, ObjectStore


class QueueModel:
    def __init__(self, store: ObjectStore, queue: str, broker_id: str, url: str,
                 lease_ms: int, settings: S.Settings | None = None) -> None:
        self.store = store
        self.queue = queue
        self.broker_id = broker_id
        self.url = url
        self.lease_ms = lease_ms
        self.settings = settings
        self.where = f"{store.url}/{queue}/queue.json"
        self.retiring = False  # set while shutting down: never take the queue (back) over

    def decode(self, data: bytes) -> S.QueueState:
        return S.decode(data, where=self.where)

    def empty(self, now_ms: int) -> S.QueueState:
        settings = S.Settings.from_dict({}) if self.settings is None else self.settings
        return transitions.new_state(now_ms, settings)

    def apply(self, state: S.QueueState, op: Any, now_ms: int) -> tuple[Any, bool]:
        result = transitions.apply(state, op, now_ms)
        return result, result.changed

    def housekeeping(self, state: S.QueueState, now_ms: int, exists: bool) -> list[Any]:
        ops: list[Any] = [transitions.Reclaim()]
        if self.retiring:
            return ops
        record = state.broker
        if record is None or record.id != self.broker_id or record.url != self.url:
            ops.append(transitions.TakeOver(self.broker_id, self.url, self.lease_ms))
        elif record.expires_ms - now_ms <= self.lease_ms * 2 // 3:
            ops.append(transitions.RenewBroker(self.broker_id, self.url, self.lease_ms))
        return ops

    def encode(self, state: S.QueueState, writer: str, now_ms: int) -> Data:
        S.stamp(state, writer, now_ms)
        return S.encode_parts(state)

    def version(self, state: S.QueueState) -> tuple[int, str | None]:
        return state.seq, state.writer

    def owner(self, state: S.QueueState) -> str | None:
        return state.broker.id if state.broker is not None else None

    def not_owner(self, state: S.QueueState) -> OsqueueError:
        url = state.broker.url if state.broker is not None else None
        return NotTheBroker(
            f"this broker no longer serves queue {self.queue!r}"
            + (f"; it is served by {url}" if url else ""),
            url=url,
            queue=self.queue,
        )

    def side_effect(self, state: S.QueueState, results: Sequence[Any],
                    now_ms: int) -> Callable[[], None] | None:
        records = [
            line
            for r in results
            if isinstance(r, transitions.Result)
            for line in r.archived
        ]
        if not records:
            return None
        key = archive.write(self.store, self.queue, records, now_ms, state.seq, self.broker_id)
        return lambda: self.store.delete(key)

    def contended(self, state: S.QueueState, lost: int) -> None:
        request = {"id": self.broker_id, "url": self.url, "at_ms": timefmt.now_ms(),
                   "lost_races": lost}
        self.store.put(keys.takeover_key(self.queue), orjson.dumps(request))

    def owned(self) -> None:
        self.store.delete(keys.takeover_key(self.queue))

    def next_timer_ms(self, state: S.QueueState, now_ms: int) -> int | None:
        times = []
        wake = transitions.next_wakeup_ms(state)
        if wake is not None:
            times.append(wake)
        record = state.broker
        if record is not None and record.id == self.broker_id:
            times.append(record.expires_ms - self.lease_ms * 2 // 3)
        return min(times) if times else None
