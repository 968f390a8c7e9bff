"""The queue object: its in-memory model and its bytes on storage.

On storage the state is one JSON object (``jq``-readable, one job a line)::

    {"format": "osqueue", "version": 1, "seq": 42, "writer": "b-1a2b",
     "updated_at": "2026-11-22T03:43:47.123Z",
     "broker": {"id": "b-1a2b", "url": "http://10.0.0.4:8765",
                "lease_expires_at": "..."} | null,
     "paused": false, "settings": {...}, "counters": {...},
     "jobs": [
       {"id": "j0000000001", "seq": 1, "status": "pending", "priority": 0, ...},
       ...],
     "keys": [["idempotency-key", "j0000000001", "2026-11-22T03:43:47.123Z"], ...]}

``seq`` grows by one on every write, so no two writes carry the same bytes
(S3 etags are content hashes; an A-B-A write must not pass a CAS).

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
from broker.errors import CorruptState, ForeignState, NewerState

FORMAT = "osqueue"
VERSION = 1

PENDING = "pending"
CLAIMED = "claimed"
DEAD = "dead"
STATUSES = (PENDING, CLAIMED, DEAD)

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
_lease_tails: dict[tuple[str, int, int, int], bytes] = {}

# The same line for a new pending job with default options, split so a bulk push
# fills in only seq and payload (the rest is one bytes object per push).
_NEW_JOB_HEAD = b',\n{"id":"j%010d","seq":%d'
_NEW_JOB_TAIL = (b',"status":"pending","priority":0,"run_at":"%s","attempts":0,'
                 b'"max_attempts":%d,"created_at":"%s","payload":')

# A completed job's line in an archive object: the job's fields without lease and
# key, then who completed it, when, and its result (see broker.archive).
_ARCHIVED_JOB = (b'{"id":"j%010d","seq":%d,"status":"completed","priority":%d,"run_at":"%s",'
                 b'"attempts":%d,"max_attempts":%d,"created_at":"%s","payload":%s%s,'
                 b'"worker":%s,"completed_at":"%s","result":%s}\n')

MAX_PRIORITY = 1_000_000

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
    if job_id[:1] != "j" or not digits.isascii() or not digits.isdigit():
        return None
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

    Units are in the names. ``max_state_bytes`` bounds the whole object:
    pushes beyond it are refused with ``queue_full``.
    """

    max_attempts: int = 3
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0
    dedup_keys: int = 200_000
    dedup_ttl_s: float = 86_400.0
    max_payload_bytes: int = 256 * 1024
    max_state_bytes: int = 512 * 1024 * 1024
    staged_ttl_s: float = 3_600.0  # staging objects of a vanished Spark writer expire

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class Lease:
    token: str
    worker: str
    lease_ms: int
    expires_ms: int
    heartbeat_ms: int


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
        "key",
        "last_error",
        "lease",
        "max_attempts",
        "payload",
        "priority",
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
            if self.key is None and self.last_error is None:  # ids and tokens are plain
                fields = (self.seq, self.seq, self.status.encode(), self.priority,
                          timefmt.fmt_bytes(self.run_at_ms), self.attempts,
                          self.max_attempts, timefmt.fmt_bytes(self.created_ms), self.payload)
                enc = _PLAIN_JOB % fields if lease is None else (
                    _LEASED_HEAD % (*fields, lease.token.encode()) + _lease_tail(lease))
            else:
                enc = b",\n" + orjson.dumps(self.to_dict())
            self._enc = enc
        return enc

    def archive_line(self, worker_json: bytes, completed_at: bytes,
                     result: bytes | None) -> bytes:
        """This job's line in an archive object, completed by a worker at a time.

        ``worker_json`` is the worker name already JSON-encoded (callers that
        complete many jobs of one worker encode it once), ``completed_at`` the
        time as :func:`broker.timefmt.fmt_bytes` gives it, ``result`` the
        result's JSON bytes or None. Job ids never need escaping (see
        :func:`decode`), so the line is filled into a byte template.
        """
        error = b"" if self.last_error is None else (
            b',"last_error":' + orjson.dumps(self.last_error))
        return _ARCHIVED_JOB % (
            self.seq, self.seq, self.priority, timefmt.fmt_bytes(self.run_at_ms),
            self.attempts, self.max_attempts, timefmt.fmt_bytes(self.created_ms),
            self.payload, error, worker_json, completed_at,
            b"null" if result is None else result)

    def size_estimate(self) -> int:
        return len(self.payload) + JOB_OVERHEAD_BYTES

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Job):
            return NotImplemented
        return self.to_plain() == other.to_plain()

    __hash__ = None  # type: ignore[assignment]

    def to_plain(self) -> dict[str, Any]:
        """Like :meth:`to_dict` with the payload decoded (for comparisons and APIs)."""
        out = self.to_dict()
        out["payload"] = orjson.loads(self.payload)
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
    id: str
    url: str
    expires_ms: int


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
    updated_ms: int = 0
    broker: BrokerRecord | None = None
    paused: bool = False
    settings: Settings = field(default_factory=Settings)
    counters: Counters = field(default_factory=Counters)
    jobs: dict[int, Job] = field(default_factory=dict)  # by seq (see Job.id)
    keys: dict[str, KeyEntry] = field(default_factory=dict)
    # Derived, never stored, kept by broker.transitions: heaps of ready_key
    # (pending and runnable), timed_key(run_at) (pending, later) and
    # timed_key(lease expiry) (claimed). Entries go stale instead of being
    # removed; readers check them against the job.
    ready: list[int] = field(default_factory=list)
    delayed: list[int] = field(default_factory=list)
    leases: list[int] = field(default_factory=list)
    approx_bytes: int = 0
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
        "updated_at": timefmt.fmt(state.updated_ms),
        "broker": None
        if broker is None
        else {"id": broker.id, "url": broker.url,
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
    parts.append(b"\n]}\n")
    return parts


def encode_full(state: QueueState) -> bytes:
    """Encode without any cached bytes (the baseline the benchmark compares with)."""
    out = dict(_header(state))
    out["jobs"] = [job.to_dict() for job in state.jobs.values()]
    out["keys"] = [[k, e.job_id, timefmt.fmt(e.at_ms)] for k, e in state.keys.items()]
    return orjson.dumps(out)


# -- decoding ----------------------------------------------------------------


def _lease_from(raw: dict[str, Any]) -> Lease:
    if not isinstance(raw["token"], str) or not _plain_token(raw["token"]):
        raise ValueError(f"lease token {raw['token']!r} is not one this broker makes")
    return Lease(
        token=str(raw["token"]),
        worker=str(raw["worker"]),
        lease_ms=round(float(raw["lease_s"]) * 1000),
        expires_ms=timefmt.parse(raw["expires_at"]),
        heartbeat_ms=timefmt.parse(raw["heartbeat_at"]),
    )


def _job_from(raw: dict[str, Any]) -> Job:
    status = raw["status"]
    if status not in STATUSES:
        raise ValueError(f"job {raw.get('id')!r} has unknown status {status!r}")
    lease = raw.get("lease")
    seq, job_id = int(raw["seq"]), raw["id"]
    # The byte templates and the heap keys rely on these; the broker never
    # writes anything else.
    if not 0 < seq <= SEQ_MASK or job_id != job_id_for(seq):
        raise ValueError(f"job {job_id!r} has seq {seq}; its id must be {job_id_for(seq)!r}")
    job = Job(
        seq=seq,
        payload=orjson.dumps(raw["payload"]),
        status=status,
        priority=int(raw["priority"]),
        run_at_ms=timefmt.parse(raw["run_at"]),
        attempts=int(raw["attempts"]),
        max_attempts=int(raw["max_attempts"]),
        created_ms=timefmt.parse(raw["created_at"]),
        key=raw.get("key"),
        last_error=raw.get("last_error"),
        lease=_lease_from(lease) if lease else None,
    )
    if not -MAX_PRIORITY <= job.priority <= MAX_PRIORITY:
        raise ValueError(f"job {job.id!r} has priority {job.priority} beyond +-{MAX_PRIORITY}")
    times = [job.run_at_ms] + ([job.lease.expires_ms] if job.lease is not None else [])
    if not all(0 <= t <= _TIME_MASK for t in times):
        raise ValueError(f"job {job.id!r} has a time before 1970 or after 9999")
    return job


def decode(data: bytes, *, where: str = "queue object") -> QueueState:
    """Parse an object's bytes into a state with its indexes rebuilt.

    Raises ``CorruptState`` if it is not a well-formed queue object,
    ``ForeignState`` if it carries another format tag and ``NewerState`` if
    its version is newer than this code understands. Never returns a partial
    state.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptState(f"{where} is not valid JSON ({exc}); refusing to touch it") from None
    if not isinstance(raw, dict):
        raise CorruptState(f"{where} is JSON but not an object; refusing to touch it")
    if raw.get("format") != FORMAT:
        raise ForeignState(
            f"{where} has format tag {raw.get('format')!r}, not {FORMAT!r}: it belongs to "
            "something else, so it will not be overwritten"
        )
    version = raw.get("version")
    if not isinstance(version, int):
        raise CorruptState(f"{where} has no integer version; refusing to touch it")
    if version > VERSION:
        raise NewerState(
            f"{where} is format version {version}; this osqueue understands up to {VERSION}. "
            "Upgrade osqueue before running it on this queue"
        )
    try:
        broker = raw.get("broker")
        state = QueueState(
            seq=int(raw["seq"]),
            writer=raw.get("writer"),
            updated_ms=timefmt.parse(raw["updated_at"]),
            broker=None
            if not broker
            else BrokerRecord(
                id=str(broker["id"]),
                url=str(broker["url"]),
                expires_ms=timefmt.parse(broker["lease_expires_at"]),
            ),
            paused=bool(raw.get("paused", False)),
            settings=Settings.from_dict(raw.get("settings") or {}),
            counters=Counters(**(raw.get("counters") or {})),
        )
        for item in raw["jobs"]:
            job = _job_from(item)
            if job.seq in state.jobs:
                raise ValueError(f"job id {job.id!r} appears twice")
            state.jobs[job.seq] = job
        for key, job_id, at in raw.get("keys") or []:
            state.keys[str(key)] = KeyEntry(str(job_id), timefmt.parse(at))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptState(f"{where} is malformed ({type(exc).__name__}: {exc}); "
                           "refusing to touch it") from None
    rebuild_indexes(state)
    return state


def rebuild_indexes(state: QueueState) -> None:
    """Recompute every derived index from the jobs."""
    ready: list[int] = []
    delayed: list[int] = []
    leases: list[int] = []
    seg_jobs: dict[int, list[Job]] = {}
    approx = 0
    for job in state.jobs.values():
        approx += job.size_estimate()
        seg_jobs.setdefault(job.seq >> SEGMENT_SHIFT, []).append(job)
        if job.status == PENDING:
            ready.append(ready_key(job.priority, job.run_at_ms, job.seq))
        elif job.status == CLAIMED and job.lease is not None:
            leases.append(timed_key(job.lease.expires_ms, job.seq))
    heapq.heapify(ready)
    heapq.heapify(leases)
    state.ready, state.delayed, state.leases = ready, delayed, leases
    state.approx_bytes = approx
    state.seg_jobs = seg_jobs
    state.segments = {}
    state.dirty = set(seg_jobs)
    state.shrunk = set()


def stamp(state: QueueState, writer: str, now_ms: int) -> None:
    """Mark the state as the next commit by ``writer`` (``seq`` + 1)."""
    state.seq += 1
    state.writer = writer
    state.updated_ms = now_ms
