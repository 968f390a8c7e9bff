"""Operations applied straight to the queue object, one CAS write each, no broker.

This is the seeds' step 1 ("every client does its own CAS"): correct under any
number of concurrent clients, but every operation pays a read and a write and
contention turns into retries. The broker exists to avoid that; this module is
kept for tools, tests and the ablation benchmark, and for admin actions on a
queue whose broker is gone.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker import archive, keys, timefmt, transitions
from broker import state as S
from broker.errors import Conflict, NotFound
from broker.storage import ObjectStore


class DirectQueue:
    """A queue operated with one read-modify-CAS per operation."""

    def __init__(self, store: ObjectStore, queue: str, writer: str | None = None,
                 max_retries: int = 10_000) -> None:
        self.store = store
        self.queue = keys.check_queue_name(queue)
        self.writer = writer or f"direct-{uuid.uuid4().hex[:8]}"
        self.max_retries = max_retries
        self.conflicts = 0

    def load(self) -> tuple[S.QueueState, str | None]:
        """The current state and its etag (None, with an empty state, if absent)."""
        try:
            got = self.store.read(keys.state_key(self.queue))
        except NotFound:
            return transitions.new_state(timefmt.now_ms()), None
        return S.decode(got.data, where=f"{self.store.url}/{keys.state_key(self.queue)}"), got.etag

    def apply(self, op: transitions.Op, now_ms: int | None = None) -> transitions.Result:
        """Apply ``op`` and write it; on a lost race, re-read and try again."""
        key = keys.state_key(self.queue)
        for _ in range(self.max_retries):
            state, etag = self.load()
            now = timefmt.now_ms() if now_ms is None else now_ms
            transitions.apply(state, transitions.Reclaim(), now)
            result = transitions.apply(state, op, now)
            if not result.changed and etag is not None:
                return result
            S.stamp(state, self.writer, now)
            archived_key = None
            if result.archived:
                archived_key = archive.write(self.store, self.queue, result.archived, now,
                                             state.seq, self.writer)
            data = S.encode(state)
            try:
                if etag is None:
                    self.store.create_if_absent(key, data)
                else:
                    self.store.write_if_match(key, data, etag)
                return result
            except Conflict:
                self.conflicts += 1
                if archived_key is not None:
                    self.store.delete(archived_key)
        raise Conflict(f"gave up after {self.max_retries} lost races on {key}")

    def stats(self) -> dict[str, Any]:
        state, _ = self.load()
        return transitions.stats(state, timefmt.now_ms())
