"""The queue's in-memory model: jobs, leases, settings, counters, job ids.

This module holds the queue's data and nothing else. :mod:`broker.codec`
turns a state into the object's bytes and back (byte templates, the per-job
cached encoding, segments), :mod:`broker.indexes` keeps the derived heaps, and
:mod:`broker.lifecycle` is the one place where a job changes status, keeping
the model, the heaps and the encoding in step. :mod:`broker.transitions` holds
the rules; it moves jobs only through :mod:`broker.lifecycle` and knows
nothing of the bytes or the heaps' layout.

On storage the state is one JSON object (``jq``-readable, one job a line)::

    {"format": "osqueue", "version": 3, "seq": 42, "writer": "b-1a2b",
     "commit": "c-5d0e...", "lineage": ["c-91aa...", ..., "c-5d0e..."],
     "updated_at": "2026-11-22T03:43:47.123Z",
     "broker": {"id": "b-1a2b", "url": "http://10.0.0.4:8765", "lease_s": 30.0,
                "lease_expires_at": "..."} | null,
     "paused": false, "settings": {...}, "counters": {...},
     "jobs": [
       {"id": "j0000000001", "seq": 1, "status": "pending", "priority": 0, ...},
       ...],
     "keys": [["idempotency-key", "j0000000001", "2026-11-22T03:43:47.123Z"], ...],
     "once": [["write:w-5d0e...", "2026-11-22T03:43:47.123Z"], ...],
     "receipts": {"requests": [["r-3f9a0c2b1d4e-17", "...", "push", 1001, 100], ...],
                  "settled": [["...", {"completed": [5001, 120]}], ...]}}

``seq`` grows by one on every write, so no two writes carry the same bytes
(S3 etags are content hashes; an A-B-A write must not pass a CAS). ``commit``
is the identity of the write attempt that made this version, and
``lineage`` the identities of the last :data:`LINEAGE` versions, newest last:
a broker that does not know whether its write landed re-reads the object and
finds its attempt there, or under a later write, or learns for sure that it
did not land (see :mod:`broker.commit`).

A job's status is pending, claimed, dead or completed. A completed job stays
in the object, with its result, until its archive object is written (after
the commit that completed it) and a later commit drops it (see
:mod:`broker.archive`). ``receipts`` are what recent commits answered, for
retried calls (see :mod:`broker.receipts`).

Payloads and results are kept as the bytes they arrived as: a job's line is
re-read verbatim (big integers, number spellings and escapes survive a
restart); only an object edited by hand into another layout falls back to
re-encoding the parsed values.

A bulk push's jobs (default options, the Spark write's) are kept as their
encoded line until something first touches them (see :mod:`broker.jobtable`):
``QueueState.jobs`` reads as seq -> :class:`Job` all the same.

Encoding is incremental: each job keeps its encoded bytes until it changes,
so a commit after changing 1k of 100k jobs re-encodes only those 1k plus a
join (see :mod:`broker.codec` and ``bench/state_encode_bench.py``).

The derived indexes (ready heap, delayed heap, lease heap) are rebuilt on
load (:mod:`broker.indexes`) and kept by :mod:`broker.lifecycle`; they are
never stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import orjson

from broker import timefmt
from broker.columns import LazySequence
from broker.limits import check_setting
from broker.receipts import Receipts

if TYPE_CHECKING:
    from broker.jobtable import JobTable

FORMAT = "osqueue"
VERSION = 3  # 3: completed jobs, commit identities, receipts, publish keys apart, lease_s

PENDING = "pending"
CLAIMED = "claimed"
DEAD = "dead"
COMPLETED = "completed"  # awaiting its archive object, then dropped
STATUSES = (PENDING, CLAIMED, DEAD, COMPLETED)

#: Commit identities kept in the object (``lineage``), newest last.
LINEAGE = 32

#: Rough bytes a job costs in the object besides its payload (for size limits).
JOB_OVERHEAD_BYTES = 220

def job_id_for(seq: int) -> str:
    """Job ids are the enqueue sequence number, zero-padded so they sort."""
    return "j%010d" % seq  # noqa: UP031 (%-formatting is the quickest here)


def seq_of(job_id: str) -> int | None:
    """The seq of a job id (the inverse of :func:`job_id_for`), or None if
    ``job_id`` is not one. Cheap: tokens are looked up this way per job."""
    digits = job_id[1:]
    if job_id[:1] != "j" or not digits.isascii() or not digits.isdigit() or len(digits) > 15:
        return None  # (seqs fit 48 bits: 15 digits)
    if len(digits) != 10 and (len(digits) < 10 or digits[0] == "0"):
        return None  # not the one spelling job_id_for gives
    return int(digits)


class JobIds(LazySequence[str]):
    """The ids of jobs with consecutive seqs, spelled out only when read: a
    bulk push of a million jobs is answered by its count more often than by
    its ids."""

    __slots__ = ("_seqs",)

    def __init__(self, first_seq: int, count: int) -> None:
        self._seqs = range(first_seq, first_seq + count)

    def __len__(self) -> int:
        return len(self._seqs)

    @property
    def first(self) -> int:
        """The seq of the first id."""
        return self._seqs.start

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return list(map(job_id_for, self._seqs[index]))
        return job_id_for(self._seqs[index])

    def __iter__(self) -> Iterator[str]:
        return map(job_id_for, self._seqs)

    def __repr__(self) -> str:
        return f"JobIds({self._seqs.start}, {len(self._seqs)})"


def token_seq(token: str) -> int | None:
    """The seq of the job a fencing token (``<job id>.<fence>``) names, or None."""
    return seq_of(token.rpartition(".")[0])


@dataclass(slots=True)
class Settings:
    """Per-queue settings, stored in the queue object.

    Units are in the names; :data:`SETTING_LIMITS` gives each one's range.
    ``max_state_bytes`` bounds the whole object: pushes beyond it are
    refused with ``queue_full``. ``dedup_*`` bound the window of idempotency
    keys (and of Spark's publish keys); ``retry_*`` bound the receipts that
    make retried calls safe (see :mod:`broker.receipts`).
    """

    max_attempts: int = 3
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0
    dedup_keys: int = 200_000
    dedup_ttl_s: float = 86_400.0
    max_payload_bytes: int = 256 * 1024
    max_state_bytes: int = 512 * 1024 * 1024
    staged_ttl_s: float = 3_600.0  # staging objects of a vanished Spark writer expire
    retry_ttl_s: float = 600.0
    retry_keys: int = 100_000

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        """Settings from a dict; unknown names are ignored (an older broker's
        object), bad values raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        checked: dict[str, Any] = {k: check_setting(k, v) for k, v in data.items() if k in known}
        return cls(**checked)


class Lease(NamedTuple):
    """A claimed (or completed) job's lease, as a value: :attr:`Job.lease` makes
    one when asked; the job itself keeps the fields (see :class:`Job`)."""

    token: str
    worker: str
    lease_ms: int
    expires_ms: int
    heartbeat_ms: int

    @property
    def fence(self) -> int:
        """The lease's number (the part of the token after the last dot)."""
        return int(self.token.rpartition(".")[2])


class Job:
    """One job. ``payload`` holds the payload's JSON bytes, encoded once at push.

    The lease of a claimed or completed job is kept in the job's own fields
    (``lease_token`` ... ``lease_heartbeat_ms``; all None otherwise), not in an
    object of its own: a queue of 100k claimed jobs then holds 100k objects
    for the garbage collector instead of 200k, and a claim of 10k jobs leaves
    no 10k new objects behind for it (an embedded broker shares the Spark
    driver's collector, whose full passes cost in proportion to both;
    ``bench/spark_bench.py``). :attr:`lease` reads and writes them as one
    :class:`Lease` value.
    """

    __slots__ = (
        "_enc",
        "attempts",
        "created_ms",
        "done_commit",
        "done_ms",
        "done_seq",
        "key",
        "last_error",
        "lease_expires_ms",
        "lease_heartbeat_ms",
        "lease_ms",
        "lease_token",
        "lease_worker",
        "max_attempts",
        "payload",
        "priority",
        "result",
        "run_at_ms",
        "seq",
        "status",
    )

    def __init__(
        self,
        seq: int,
        payload: bytes,
        status: str = PENDING,
        priority: int = 0,
        run_at_ms: int = 0,
        attempts: int = 0,
        max_attempts: int = 3,
        created_ms: int = 0,
        key: str | None = None,
        last_error: str | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.seq = seq
        self.payload = payload
        self.status = status
        self.priority = priority
        self.run_at_ms = run_at_ms
        self.attempts = attempts
        self.max_attempts = max_attempts
        self.created_ms = created_ms
        self.key = key
        self.last_error = last_error
        # the lease (see the class docstring); the numbers mean nothing while the token is None
        self.lease_token: str | None = None
        self.lease_worker = ""
        self.lease_ms = self.lease_expires_ms = self.lease_heartbeat_ms = 0
        if lease is not None:
            self.lease = lease
        # completed jobs only: when, in which commit (its seq and id), the result's JSON
        self.done_ms: int | None = None
        self.done_seq: int | None = None
        self.done_commit: str | None = None
        self.result: bytes | None = None
        self._enc: bytes | None = None  # the line's bytes, cached (kept by broker.codec)

    @property
    def lease(self) -> Lease | None:
        """The job's lease as one value, or None (made when asked: hot paths
        read the ``lease_*`` fields)."""
        token = self.lease_token
        if token is None:
            return None
        return Lease(token, self.lease_worker, self.lease_ms, self.lease_expires_ms,
                     self.lease_heartbeat_ms)

    @lease.setter
    def lease(self, lease: Lease | None) -> None:
        if lease is None:
            self.lease_token = None
            self.lease_worker = ""
            self.lease_ms = self.lease_expires_ms = self.lease_heartbeat_ms = 0
        else:
            (self.lease_token, self.lease_worker, self.lease_ms, self.lease_expires_ms,
             self.lease_heartbeat_ms) = lease

    @property
    def id(self) -> str:
        """``j`` and the seq, zero-padded (made when asked: a million pending
        jobs need no million id strings)."""
        return job_id_for(self.seq)

    def to_dict(self) -> dict[str, Any]:
        """The job as it appears in the object (payload as an orjson fragment)."""
        out: dict[str, Any] = {
            "id": self.id,
            "seq": self.seq,
            "status": self.status,
            "priority": self.priority,
            "run_at": timefmt.fmt(self.run_at_ms),
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "created_at": timefmt.fmt(self.created_ms),
            "payload": orjson.Fragment(self.payload),
        }
        if self.key is not None:
            out["key"] = self.key
        if self.last_error is not None:
            out["last_error"] = self.last_error
        lease = self.lease
        if lease is not None:
            out["lease"] = {
                "token": lease.token,
                "worker": lease.worker,
                "lease_s": lease.lease_ms / 1000,
                "expires_at": timefmt.fmt(lease.expires_ms),
                "heartbeat_at": timefmt.fmt(lease.heartbeat_ms),
            }
        if self.done_ms is not None:
            out["completed_at"] = timefmt.fmt(self.done_ms)
            out["commit_seq"] = self.done_seq
            out["commit"] = self.done_commit
            out["result"] = orjson.Fragment(b"null" if self.result is None else self.result)
        return out

    def size_estimate(self) -> int:
        """Rough bytes of the job's line (payload, result and :data:`JOB_OVERHEAD_BYTES`)."""
        return len(self.payload) + JOB_OVERHEAD_BYTES + len(self.result or b"")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Job):
            return NotImplemented
        return self.to_plain() == other.to_plain()

    __hash__ = None  # type: ignore[assignment]

    def to_plain(self) -> dict[str, Any]:
        """Like :meth:`to_dict` with the payload decoded (for comparisons and APIs)."""
        out = self.to_dict()
        out["payload"] = orjson.loads(self.payload)
        if "result" in out:
            out["result"] = orjson.loads(self.result or b"null")
        return out

    def __repr__(self) -> str:
        return f"Job({self.id}, {self.status}, attempts={self.attempts})"


@dataclass(slots=True)
class KeyEntry:
    job_id: str
    at_ms: int
    enc: bytes | None = None


@dataclass(slots=True)
class BrokerRecord:
    """The queue's broker: who, where, and its lease. ``lease_ms`` is how long
    the broker may go without writing before others may take the queue over
    (judged on their own clocks, see :mod:`broker.ownership`); ``expires_ms``
    is that deadline on the owner's clock, for people reading the object."""

    id: str
    url: str
    expires_ms: int
    lease_ms: int


@dataclass(slots=True)
class Counters:
    enqueued: int = 0
    fence: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    reclaimed: int = 0


def _job_table() -> JobTable:
    from broker.jobtable import JobTable  # (the table builds on this module)

    return JobTable()


@dataclass(slots=True)
class QueueState:
    """The whole queue. Mutated only by :func:`broker.transitions.apply` (through
    :mod:`broker.lifecycle`) and :func:`broker.codec.stamp`."""

    seq: int = 0
    writer: str | None = None
    commit: str | None = None  # identity of the write attempt that made this version
    lineage: list[str] = field(default_factory=list)  # the last LINEAGE commits, newest last
    updated_ms: int = 0
    broker: BrokerRecord | None = None
    paused: bool = False
    settings: Settings = field(default_factory=Settings)
    counters: Counters = field(default_factory=Counters)
    jobs: JobTable = field(default_factory=_job_table)  # by seq, see broker.jobtable
    keys: dict[str, KeyEntry] = field(default_factory=dict)
    once: dict[str, KeyEntry] = field(default_factory=dict)  # publish keys (Spark writes)
    receipts: Receipts = field(default_factory=Receipts)
    # Derived, never stored, kept by broker.lifecycle: heaps of ready_key
    # (pending and runnable), timed_key(run_at) (pending, later) and
    # timed_key(lease expiry) (claimed). Entries go stale instead of being
    # removed; readers check them against the job.
    ready: list[int] = field(default_factory=list)
    delayed: list[int] = field(default_factory=list)
    leases: list[int] = field(default_factory=list)
    approx_bytes: int = 0  # jobs only; see size_estimate()
    key_bytes: int = 0  # the idempotency-key and publish-key windows
    # Completed jobs awaiting their archive object: commit seq -> job seqs.
    completed: dict[int, list[int]] = field(default_factory=dict)
    # Encoding cache by segment (jobs whose seq >> SEGMENT_SHIFT is equal):
    # each segment's job seqs in order (removed ones are filtered out lazily),
    # the joined bytes of each clean segment, and the segments to rebuild.
    # Kept by broker.codec (touch/added/removed), never read elsewhere.
    seg_jobs: dict[int, list[int]] = field(default_factory=dict)
    segments: dict[int, bytes] = field(default_factory=dict)
    dirty: set[int] = field(default_factory=set)
    shrunk: set[int] = field(default_factory=set)  # dirty segments that lost jobs
    # The lines of jobs completed since the last stamp, as they were while
    # claimed: the completed line is that line with its status and the
    # completion spliced in (broker.codec.stamp), not a fresh encode.
    claimed_lines: dict[int, bytes] = field(default_factory=dict, compare=False, repr=False)

    def job(self, job_id: str) -> Job | None:
        """The job with this id, or None."""
        seq = seq_of(job_id)
        return None if seq is None else self.jobs.get(seq)

    def count_by_status(self) -> dict[str, int]:
        return self.jobs.count_by_status()

    def size_estimate(self) -> int:
        """Rough bytes of the object: jobs, key windows and receipts."""
        return self.approx_bytes + self.key_bytes + self.receipts.size_estimate()


def key_entry_bytes(key: str) -> int:
    """Rough bytes one idempotency-key entry costs in the object."""
    return len(key) + 48
