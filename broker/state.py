"""The queue object: its in-memory model and its bytes on storage.

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

Encoding is incremental: each job keeps its encoded bytes until it changes,
so a commit after changing 1k of 100k jobs re-encodes only those 1k plus a
join (see ``bench/state_encode_bench.py``).

The derived indexes (ready heap, delayed heap, lease heap) are rebuilt on
load and kept by :mod:`broker.transitions`; they are never stored.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, overload

import orjson

from broker import timefmt
from broker.limits import (  # noqa: F401 (re-exported for older imports)
    MAX_DELAY_MS,
    MAX_PRIORITY,
    SETTING_LIMITS,
    check_setting,
)
from broker.receipts import Receipts

FORMAT = "osqueue"
VERSION = 3  # 3: completed jobs, commit identities, receipts, publish keys apart, lease_s

PENDING = "pending"
CLAIMED = "claimed"
DEAD = "dead"
COMPLETED = "completed"  # awaiting its archive object, then dropped
STATUSES = (PENDING, CLAIMED, DEAD, COMPLETED)

#: Commit identities kept in the object (``lineage``), newest last.
LINEAGE = 32

# ids, statuses and timestamps never need JSON escaping, so they can be spliced
# in. A job's id is its seq, formatted as job_id_for() does (seq goes in twice).
_PLAIN_JOB = (b',\n{"id":"j%010d","seq":%d,"status":"%s","priority":%d,"run_at":"%s",'
              b'"attempts":%d,"max_attempts":%d,"created_at":"%s","payload":%s}')

# A claimed job without key or error: the other common shape. Everything in the
# lease after its token is the same for all the jobs of one claim, so that tail
# is formatted once (see _lease_tail); the worker name, the one field that may
# need escaping, goes in JSON-encoded.
_LEASED_HEAD = _PLAIN_JOB.removesuffix(b"}") + b',"lease":{"token":"%s'
_LEASE_TAIL = b'","worker":%s,"lease_s":%s,"expires_at":"%s","heartbeat_at":"%s"}}'
# A completed job awaiting its archive object: the leased line, then the completion.
_COMPLETION = b',"completed_at":"%s","commit_seq":%d,"commit":"%s","result":%s}'
_lease_tails: dict[tuple[str, int, int, int], bytes] = {}

# The same line for a new pending job with default options, split so a bulk push
# fills in only seq and payload (the rest is one bytes object per push).
_NEW_JOB_HEAD = b',\n{"id":"j%010d","seq":%d'
_NEW_JOB_TAIL = (b',"status":"pending","priority":0,"run_at":"%s","attempts":0,'
                 b'"max_attempts":%d,"created_at":"%s","payload":')

# A completed job's line in an archive object: the job's fields without lease and
# key, then who completed it (worker and token), in which commit, when, and its
# result (see broker.archive).
_ARCHIVED_JOB = (b'{"id":"j%010d","seq":%d,"status":"completed","priority":%d,"run_at":"%s",'
                 b'"attempts":%d,"max_attempts":%d,"created_at":"%s","payload":%s%s,'
                 b'"worker":%s,"token":"%s","commit_seq":%d,"commit":"%s","completed_at":"%s",'
                 b'"result":%s}\n')

# The derived heaps hold one int per entry, not a tuple: a heap of ints pops
# about three times faster. Low bits: the job's seq; above them a time in ms;
# above that (ready heap only) the priority, turned so that higher pops first.
SEQ_BITS = 48  # 2.8e14 jobs
TIME_BITS = 48  # ms since the epoch: beyond the year 9999
SEQ_MASK = (1 << SEQ_BITS) - 1
_TIME_MASK = (1 << TIME_BITS) - 1
_PRIORITY_SHIFT = SEQ_BITS + TIME_BITS


def ready_key(priority: int, run_at_ms: int, seq: int) -> int:
    """Ready-heap entry: smaller means claimed first (priority desc, run-at, seq)."""
    return ((MAX_PRIORITY - priority) << _PRIORITY_SHIFT) | (run_at_ms << SEQ_BITS) | seq


def timed_key(at_ms: int, seq: int) -> int:
    """Delayed- or lease-heap entry: (time, seq) in one int."""
    return (at_ms << SEQ_BITS) | seq


def key_seq(key: int) -> int:
    """The job seq of a heap entry."""
    return key & SEQ_MASK


def key_time(key: int) -> int:
    """The time (ms) of a heap entry."""
    return (key >> SEQ_BITS) & _TIME_MASK


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


class JobIds(Sequence[str]):
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

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"JobIds({self._seqs.start}, {len(self._seqs)})"


def token_seq(token: str) -> int | None:
    """The seq of the job a fencing token (``<job id>.<fence>``) names, or None."""
    return seq_of(token.rpartition(".")[0])


#: Rough bytes a job costs in the object besides its payload (for size limits).
JOB_OVERHEAD_BYTES = 220


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


@dataclass(slots=True)
class Lease:
    token: str
    worker: str
    lease_ms: int
    expires_ms: int
    heartbeat_ms: int

    @property
    def fence(self) -> int:
        """The lease's number (the part of the token after the last dot)."""
        return int(self.token.rpartition(".")[2])


def _lease_tail(lease: Lease) -> bytes:
    """The encoded lease after its token, shared by the leases of one claim."""
    key = (lease.worker, lease.lease_ms, lease.expires_ms, lease.heartbeat_ms)
    tail = _lease_tails.get(key)
    if tail is None:
        if len(_lease_tails) >= 4096:  # a few claims' worth is all that is ever reused
            _lease_tails.clear()
        tail = _lease_tails[key] = _LEASE_TAIL % (
            orjson.dumps(lease.worker), orjson.dumps(lease.lease_ms / 1000),
            timefmt.fmt_bytes(lease.expires_ms), timefmt.fmt_bytes(lease.heartbeat_ms))
    return tail


def _plain_token(token: str) -> bool:
    """True if ``token`` needs no JSON escaping (the broker makes them so)."""
    return token.isascii() and token.isprintable() and '"' not in token and "\\" not in token


class Job:
    """One job. ``payload`` holds the payload's JSON bytes, encoded once at push."""

    __slots__ = (
        "_enc",
        "attempts",
        "created_ms",
        "done_commit",
        "done_ms",
        "done_seq",
        "key",
        "last_error",
        "lease",
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
        self.lease = lease
        # completed jobs only: when, in which commit (its seq and id), the result's JSON
        self.done_ms: int | None = None
        self.done_seq: int | None = None
        self.done_commit: str | None = None
        self.result: bytes | None = None
        self._enc: bytes | None = None

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
        if self.lease is not None:
            lease = self.lease
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

    def encode(self) -> bytes:
        """The job's JSON, preceded by the ``,\n`` that separates it from the one before.

        The common shapes (pending, or claimed, with no key or error) are
        filled into byte templates; everything else goes through
        :meth:`to_dict`. Both give the same bytes (the tests compare them).
        """
        enc = self._enc
        if enc is None:
            lease = self.lease
            if self.key is None and self.last_error is None and (
                    self.done_ms is None or self.done_commit is not None):
                fields = (self.seq, self.seq, self.status.encode(), self.priority,
                          timefmt.fmt_bytes(self.run_at_ms), self.attempts,
                          self.max_attempts, timefmt.fmt_bytes(self.created_ms), self.payload)
                if lease is None:
                    enc = _PLAIN_JOB % fields
                else:
                    enc = _LEASED_HEAD % (*fields, lease.token.encode()) + _lease_tail(lease)
                    if self.done_ms is not None:  # completed: the commit's id is plain
                        enc = enc[:-1] + _COMPLETION % (
                            timefmt.fmt_bytes(self.done_ms), self.done_seq,
                            (self.done_commit or "").encode(),
                            b"null" if self.result is None else self.result)
            else:
                enc = b",\n" + orjson.dumps(self.to_dict())
            self._enc = enc
        return enc

    def archive_line(self) -> bytes:
        """This completed job's line in its archive object (see :mod:`broker.archive`).

        Made from the job's stored fields alone, so every broker that writes
        the archive object of a commit writes the same bytes. Ids and tokens
        never need escaping (see :func:`decode`), so the line is filled into a
        byte template. Raises ``ValueError`` for a job that is not completed.
        """
        lease = self.lease
        if self.status != COMPLETED or lease is None or self.done_ms is None \
                or self.done_commit is None:
            raise ValueError(f"job {self.id} is not a committed completion")
        error = b"" if self.last_error is None else (
            b',"last_error":' + orjson.dumps(self.last_error))
        return _ARCHIVED_JOB % (
            self.seq, self.seq, self.priority, timefmt.fmt_bytes(self.run_at_ms),
            self.attempts, self.max_attempts, timefmt.fmt_bytes(self.created_ms),
            self.payload, error, orjson.dumps(lease.worker), lease.token.encode(),
            self.done_seq, self.done_commit.encode(), timefmt.fmt_bytes(self.done_ms),
            b"null" if self.result is None else self.result)

    def size_estimate(self) -> int:
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
    lease_ms: int = 30_000


@dataclass(slots=True)
class Counters:
    enqueued: int = 0
    fence: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    reclaimed: int = 0


@dataclass(slots=True)
class QueueState:
    """The whole queue. Mutated only by :func:`broker.transitions.apply`."""

    seq: int = 0
    writer: str | None = None
    commit: str | None = None  # identity of the write attempt that made this version
    lineage: list[str] = field(default_factory=list)  # the last LINEAGE commits, newest last
    updated_ms: int = 0
    broker: BrokerRecord | None = None
    paused: bool = False
    settings: Settings = field(default_factory=Settings)
    counters: Counters = field(default_factory=Counters)
    jobs: dict[int, Job] = field(default_factory=dict)  # by seq (see Job.id)
    keys: dict[str, KeyEntry] = field(default_factory=dict)
    once: dict[str, KeyEntry] = field(default_factory=dict)  # publish keys (Spark writes)
    receipts: Receipts = field(default_factory=Receipts)
    # Derived, never stored, kept by broker.transitions: heaps of ready_key
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
    # each segment's jobs in seq order (removed ones are filtered out lazily),
    # the joined bytes of each clean segment, and the segments to rebuild.
    # Kept by touch/added/removed.
    seg_jobs: dict[int, list[Job]] = field(default_factory=dict)
    segments: dict[int, bytes] = field(default_factory=dict)
    dirty: set[int] = field(default_factory=set)
    shrunk: set[int] = field(default_factory=set)  # dirty segments that lost jobs

    def job(self, job_id: str) -> Job | None:
        """The job with this id, or None."""
        seq = seq_of(job_id)
        return None if seq is None else self.jobs.get(seq)

    def count_by_status(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for job in self.jobs.values():
            counts[job.status] += 1
        return counts

    def size_estimate(self) -> int:
        """Rough bytes of the object: jobs, key windows and receipts."""
        return self.approx_bytes + self.key_bytes + self.receipts.size_estimate()


# -- change tracking (called by broker.transitions on every job change) ---------

SEGMENT_SHIFT = 10  # 1,024 sequence numbers a segment


def touch(state: QueueState, job: Job) -> None:
    """Record that ``job`` changed: its bytes and its segment's bytes are stale."""
    job._enc = None
    state.dirty.add(job.seq >> SEGMENT_SHIFT)


def added(state: QueueState, job: Job) -> None:
    """Record a new job (always the highest seq so far, so appending keeps order)."""
    seg = job.seq >> SEGMENT_SHIFT
    state.dirty.add(seg)
    lst = state.seg_jobs.get(seg)
    if lst is None:
        state.seg_jobs[seg] = [job]
    else:
        lst.append(job)


def removed(state: QueueState, job: Job) -> None:
    """Record a removed job; its segment drops it at the next encode."""
    seg = job.seq >> SEGMENT_SHIFT
    state.dirty.add(seg)
    state.shrunk.add(seg)


def new_pending_jobs(first_seq: int, payloads: Sequence[bytes], now_ms: int,
                     max_attempts: int) -> list[Job]:
    """Pending jobs with default options, seq ``first_seq`` onwards, bytes encoded now.

    The bulk-push path: the part of each line that every job of the push
    shares is formatted once, so a job costs its seq and its payload.
    """
    stamp = timefmt.fmt_bytes(now_ms)
    line = _NEW_JOB_HEAD + (_NEW_JOB_TAIL % (stamp, max_attempts, stamp)).replace(b"%", b"%%") \
        + b"%b}"
    out: list[Job] = []
    append = out.append
    # %-formatting: a third faster than f-strings here, and this runs a million times
    for seq, payload in enumerate(payloads, first_seq):
        job = Job(seq, payload, PENDING, 0, now_ms, 0, max_attempts, now_ms)
        job._enc = line % (seq, seq, payload)
        append(job)
    return out


def added_many(state: QueueState, jobs: list[Job]) -> None:
    """:func:`added` for jobs with consecutive seqs above any seq so far."""
    if not jobs:
        return
    seg_jobs, dirty = state.seg_jobs, state.dirty
    first = jobs[0].seq
    start = 0
    while start < len(jobs):
        seg = (first + start) >> SEGMENT_SHIFT
        end = ((seg + 1) << SEGMENT_SHIFT) - first  # the next segment's first index
        seg_jobs.setdefault(seg, []).extend(jobs[start:end])
        dirty.add(seg)
        start = end


# -- encoding ----------------------------------------------------------------


def _header(state: QueueState) -> dict[str, Any]:
    broker = state.broker
    return {
        "format": FORMAT,
        "version": VERSION,
        "seq": state.seq,
        "writer": state.writer,
        "commit": state.commit,
        "lineage": state.lineage,
        "updated_at": timefmt.fmt(state.updated_ms),
        "broker": None
        if broker is None
        else {"id": broker.id, "url": broker.url, "lease_s": broker.lease_ms / 1000,
              "lease_expires_at": timefmt.fmt(broker.expires_ms)},
        "paused": state.paused,
        "settings": asdict(state.settings),
        "counters": asdict(state.counters),
    }


def _key_bytes(key: str, entry: KeyEntry) -> bytes:
    enc = entry.enc
    if enc is None:
        enc = entry.enc = b",\n" + orjson.dumps([key, entry.job_id, timefmt.fmt(entry.at_ms)])
    return enc


def _refresh_segments(state: QueueState) -> None:
    """Rebuild the bytes of every dirty segment, dropping jobs no longer in the state."""
    dirty = state.dirty
    if not dirty:
        return
    jobs, segments, lists, shrunk = state.jobs, state.segments, state.seg_jobs, state.shrunk
    get = jobs.get
    for seg in dirty:
        lst = lists.get(seg)
        if lst is None:
            live = []
        elif seg in shrunk:
            live = [j for j in lst if get(j.seq) is j]
        else:
            live = lst
        if not live:
            lists.pop(seg, None)
            segments.pop(seg, None)
            continue
        if len(live) != len(lst or ()):
            lists[seg] = live
        segments[seg] = b"".join([j._enc or j.encode() for j in live])
    dirty.clear()
    shrunk.clear()


def encode(state: QueueState) -> bytes:
    """The object's bytes (see :func:`encode_parts`)."""
    return b"".join(encode_parts(state))


def encode_parts(state: QueueState) -> list[bytes]:
    """The object's bytes as chunks to write in order, re-encoding only what changed.

    Jobs keep their own bytes and segments of 1,024 jobs keep their joined
    bytes, so a commit costs the changed jobs, the changed segments and one
    list of the segments (no copy of the whole object). Each job's bytes start with their ``,\n``
    separator; the first one is cut off.
    """
    _refresh_segments(state)
    head = orjson.dumps(_header(state))
    parts: list[bytes] = [head[:-1], b',\n"jobs":[\n']
    segments = state.segments
    jobs = [segments[seg] for seg in sorted(state.seg_jobs)]
    if jobs:
        jobs[0] = jobs[0][2:]
    parts += jobs
    parts.append(b'\n],\n"keys":[\n')
    keys = [e.enc or _key_bytes(k, e) for k, e in state.keys.items()]
    if keys:
        keys[0] = keys[0][2:]
    parts += keys
    parts.append(b'\n],\n"once":')
    parts.append(orjson.dumps([[k, timefmt.fmt(e.at_ms)] for k, e in state.once.items()]))
    parts.append(b',\n"receipts":')
    parts += state.receipts.encode()
    parts.append(b"}\n")
    return parts


def encode_full(state: QueueState) -> bytes:
    """Encode without any cached bytes (the baseline the benchmark compares with)."""
    out = dict(_header(state))
    out["jobs"] = [job.to_dict() for job in state.jobs.values()]
    out["keys"] = [[k, e.job_id, timefmt.fmt(e.at_ms)] for k, e in state.keys.items()]
    out["once"] = [[k, timefmt.fmt(e.at_ms)] for k, e in state.once.items()]
    out["receipts"] = state.receipts.to_plain()
    return orjson.dumps(out)


def decode(data: bytes, *, where: str = "queue object") -> QueueState:
    """Parse an object's bytes into a state, checking every invariant (see
    :func:`broker.decode.decode_state`, which says what it raises)."""
    from broker.decode import decode_state  # (decode builds on this module)

    return decode_state(data, where=where)


def key_entry_bytes(key: str) -> int:
    """Rough bytes one idempotency-key entry costs in the object."""
    return len(key) + 48


def rebuild_indexes(state: QueueState) -> None:
    """Recompute every derived index from the jobs."""
    ready: list[int] = []
    delayed: list[int] = []
    leases: list[int] = []
    seg_jobs: dict[int, list[Job]] = {}
    completed: dict[int, list[int]] = {}
    approx = 0
    for job in state.jobs.values():
        approx += job.size_estimate()
        seg_jobs.setdefault(job.seq >> SEGMENT_SHIFT, []).append(job)
        if job.status == PENDING:
            ready.append(ready_key(job.priority, job.run_at_ms, job.seq))
        elif job.status == CLAIMED and job.lease is not None:
            leases.append(timed_key(job.lease.expires_ms, job.seq))
        elif job.status == COMPLETED and job.done_seq is not None:
            completed.setdefault(job.done_seq, []).append(job.seq)
    heapq.heapify(ready)
    heapq.heapify(leases)
    state.ready, state.delayed, state.leases = ready, delayed, leases
    state.completed = completed
    state.approx_bytes = approx
    state.key_bytes = sum(map(key_entry_bytes, state.keys)) + sum(
        map(key_entry_bytes, state.once))
    state.seg_jobs = seg_jobs
    state.segments = {}
    state.dirty = set(seg_jobs)
    state.shrunk = set()


def stamp(state: QueueState, writer: str, now_ms: int, commit: str | None = None) -> None:
    """Mark the state as the next commit (``seq`` + 1) by ``writer``, made by the
    write attempt ``commit`` (a fresh unique id per attempt; see :mod:`broker.commit`)."""
    state.seq += 1
    state.writer = writer
    state.updated_ms = now_ms
    state.commit = commit
    if commit is not None:
        state.lineage = [*state.lineage[-(LINEAGE - 1):], commit]
    for seq in state.completed.get(state.seq, ()):  # completed by this very commit
        job = state.jobs[seq]
        job.done_commit = commit
        touch(state, job)
    state.receipts.unwritten_since = None  # this write carries them
