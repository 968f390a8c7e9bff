"""Operations applied straight to the queue object, one CAS write each, no broker.

This is the seeds' step 1 ("every client does its own CAS"): correct under any
number of concurrent clients, but every operation pays a read and a write and
contention turns into retries. The broker exists to avoid that; this module is
kept for tools, tests and the ablation benchmark, and for admin actions on a
queue whose broker is gone.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from broker import paths, timefmt
from broker.commit.verdict import new_commit_id
from broker.errors import Conflict, NotFound
from broker.model import state as S
from broker.model import tokens, transitions
from broker.model.format import codec
from broker.model.format.decode import decode_state
from broker.model.ops import DropArchived, Op, Result
from broker.model.views import stats
from broker.service.archiver import write_commit
from broker.storage import ObjectStore


class DirectQueue:
    """A queue operated with one read-modify-CAS per operation."""

    def __init__(self, store: ObjectStore, queue: str, writer: str | None = None,
                 max_retries: int = 10_000) -> None:
        self.store = store
        self.queue = paths.check_queue_name(queue)
        self.writer = writer or f"direct-{uuid.uuid4().hex[:8]}"
        self.max_retries = max_retries
        self.conflicts = 0

    def load(self) -> tuple[S.QueueState, str | None]:
        """The current state and its etag (None, with an empty state, if absent)."""
        try:
            got = self.store.read(paths.state_key(self.queue))
        except NotFound:
            state, etag = transitions.new_state(timefmt.now_ms()), None
        else:
            where = f"{self.store.url}/{paths.state_key(self.queue)}"
            state, etag = decode_state(got.data, where=where), got.etag
        # as a broker binds it: tokens cross between this and a broker both ways
        tokens.bind(state, self.queue, secrets.token_bytes)
        return state, etag

    def apply(self, op: Op, now_ms: int | None = None) -> Result:
        """Apply ``op`` and write it; on a lost race, re-read and try again.

        Completed jobs are archived after the write that completed them (see
        :mod:`broker.model.format.archive`), and the write after that drops them. Expired
        leases are never reclaimed here: leases are judged on a broker's
        clock only.
        """
        key = paths.state_key(self.queue)
        for _ in range(self.max_retries):
            state, etag = self.load()
            now = timefmt.now_ms() if now_ms is None else now_ms
            archived = self._archive(state)  # committed completions: safe to archive
            if archived:
                transitions.apply(state, DropArchived(archived), now)
            result = transitions.apply(state, op, now)
            if not result.changed and not archived and etag is not None:
                return result
            codec.stamp(state, self.writer, now, new_commit_id())
            data = codec.encode(state)
            try:
                if etag is None:
                    self.store.create_if_absent(key, data)
                else:
                    self.store.write_if_match(key, data, etag)
            except Conflict:
                self.conflicts += 1
                continue
            self._archive(state)
            if result.error is not None:
                raise result.error
            return result
        raise Conflict(f"gave up after {self.max_retries} lost races on {key}")

    def _archive(self, state: S.QueueState) -> tuple[int, ...]:
        """Write the archive objects of a committed state's completions; their commits."""
        for job_seqs in state.completed.values():
            write_commit(self.store, self.queue, [state.jobs[s] for s in job_seqs])
        return tuple(state.completed)

    def stats(self) -> dict[str, Any]:
        state, _ = self.load()
        return stats(state, timefmt.now_ms())
