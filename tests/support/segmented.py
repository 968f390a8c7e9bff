"""A deep queue in a store, written as a broker writes one: a queue
object of format version 4 that references segment objects of pending jobs.
(Made here, not by a broker, so a test gets exactly this shape: the head is
encoded with the model's codec and the segments with
:func:`broker.model.format.segment_format.encode_segment`.)

The queue :func:`write_segmented` leaves, seq by seq:

* 1-5: segment A (priority 0, due at :data:`NOW`, max_attempts 3), taken 2: seqs 1
  and 2 moved into the head, claimed by worker ``w``; 3-5 are pending in A;
* 6-7: pushed inline, pending in the head;
* 8-10: segment B (priority 5, due a minute after :data:`NOW`, max_attempts 4),
  nothing taken;
* 11-12: segment C, fully taken, its jobs done and gone, its object deleted
  (as the broker deletes it once the commit that drops it lands; a head may
  still hold the reference until then).

Segment jobs were made at :data:`SEG_CREATED`, the head's at :data:`NOW`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker import paths
from broker.model import transitions as T
from broker.model.format import codec, segment_format
from broker.model.format.decode import decode_state
from broker.model.job import PENDING
from broker.model.ops import Claim, Purge, PushPayloads
from broker.model.state import QueueState, SegmentRef
from broker.storage import ObjectStore
from tests.support.states import new_queue

#: When the queue's jobs were made (ms): 2026-01-01T00:00:00Z.
NOW = 1_767_225_600_000
B_DUE = NOW + 60_000
#: When the segments' jobs were made (ms): before the head's own jobs.
SEG_CREATED = NOW - 5_000


def payload(seq: int) -> bytes:
    """The payload of job ``seq`` (the same bytes wherever the job is)."""
    return b'{"n":%d,"doc":"d%d"}' % (seq, seq)


@dataclass
class Segmented:
    """What :func:`write_segmented` wrote: the head's etag, its state, and the
    references A, B and C (``refs``, in the head's order)."""

    etag: str
    state: QueueState
    refs: list[SegmentRef]
    max_attempts: dict[str, int]  # per segment key

    def expected(self) -> dict[str, dict[str, Any]]:
        """Every job a read of this version shows: id -> its row's fields
        (times in ms, payload as text)."""
        rows: dict[str, dict[str, Any]] = {}
        for job in self.state.jobs.values():
            rows[job.id] = {"seq": job.seq, "status": job.status, "priority": job.priority,
                            "payload": job.payload.decode(), "attempts": job.attempts,
                            "max_attempts": job.max_attempts, "created_ms": job.created_ms,
                            "run_ms": job.run_at_ms,
                            "worker": job.lease.worker if job.lease else None}
        for ref in self.refs:
            for seq in range(ref.next_seq, ref.first_seq + ref.count):
                rows[f"j{seq:010d}"] = {
                    "seq": seq, "status": "pending", "priority": ref.priority,
                    "payload": payload(seq).decode(), "attempts": 0,
                    "max_attempts": self.max_attempts[ref.key], "created_ms": SEG_CREATED,
                    "run_ms": ref.run_at_ms, "worker": None}
        return rows


def write_segment(store: ObjectStore, queue: str, first_seq: int, count: int, *,
                  priority: int = 0, run_at_ms: int = NOW, max_attempts: int = 3,
                  taken: int = 0) -> SegmentRef:
    """Write a segment object of jobs ``first_seq`` onwards (:func:`payload`);
    return its reference with cursor ``taken``."""
    key = paths.segment_key(queue, paths.segment_name(first_seq, f"{first_seq:08x}"))
    data = segment_format.encode_segment(
        queue, first_seq, priority, run_at_ms,
        [payload(seq) for seq in range(first_seq, first_seq + count)],
        max_attempts=max_attempts, created_ms=SEG_CREATED)
    etag = store.create_if_absent(key, data)
    return SegmentRef(key, etag, first_seq, count, priority, run_at_ms, taken)


def put_head(store: ObjectStore, queue: str, state: QueueState, etag: str | None = None) -> str:
    """Write ``state`` as the queue's object (created, or replacing ``etag``)."""
    key = paths.state_key(queue)
    data = codec.encode(state)
    return store.create_if_absent(key, data) if etag is None else store.write_if_match(
        key, data, etag)


def write_segmented(store: ObjectStore, queue: str = "q") -> Segmented:
    """Write the queue described in this module's docstring; return it."""
    state = new_queue(NOW, queue=queue)
    T.apply(state, PushPayloads(tuple(payload(seq) for seq in range(1, 6))), NOW)
    T.apply(state, Claim("w", max_jobs=2, lease_ms=600_000), NOW)  # seqs 1 and 2
    T.apply(state, Purge((PENDING,)), NOW)  # 3-5: they live in segment A
    T.apply(state, PushPayloads((payload(6), payload(7))), NOW)
    a = write_segment(store, queue, 1, 5, taken=2)
    b = write_segment(store, queue, 8, 3, priority=5, run_at_ms=B_DUE, max_attempts=4)
    c = write_segment(store, queue, 11, 2, taken=2)
    store.delete(c.key)
    state.counters.enqueued = 12
    state.segment_refs = [a, b, c]
    etag = put_head(store, queue, state)
    written = decode_state(store.read(paths.state_key(queue)).data)
    return Segmented(etag, written, [a, b, c], {a.key: 3, b.key: 4, c.key: 3})
