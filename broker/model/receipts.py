"""Receipts: what recent calls were answered, kept in the queue object so that a
retried call gets the answer its first attempt got, on this broker or another.

A call whose answer was lost (a dropped connection, a timeout, an "outcome
unknown" error) is repeated by the client. For the repeat to be harmless the
queue object remembers, for a while:

* for a push sent with a request key (``QueueClient`` gives every push one),
  the ids it answered, so the repeat answers the same ids and creates nothing;
* for a claim sent with a request key, the fences of the leases it granted,
  so the repeat hands back the same jobs instead of stranding them;
* for a purge or redrive sent with a request key, how many jobs it removed or
  returned, so the repeat changes nothing more;
* every settled token (completed, failed and retrying, failed and dead, or
  cancelled), so a repeated complete or fail answers as the first one did,
  never "stale" (and every call of a cancelled job's token answers
  "cancelled").

In the object (``receipts``)::

    {"requests": [["r-3f9a0c2b1d4e-17", "2026-11-22T03:43:47.123Z", "push", 1001, 100,
                   "9f2c41d07a6be385"],
                  ["r-3f9a0c2b1d4e-18", "2026-11-22T03:43:47.140Z", "claim", 5120, 16]],
     "settled": [["2026-11-22T03:43:40.000Z", {"completed": [5001, 120], "failed": [4990, 1]}]],
     "floors": [["r-3f9a0c2b1d4e", 17, "2026-11-22T03:43:47.123Z"]]}

A push entry is its key, time, then runs of job seqs (first, count, ...) and,
last, the digest of the jobs it pushed (:func:`push_digest`; a receipt written
before digests has none); a claim entry its key, time, first fence and count.
Settled tokens are runs of fences (a fence numbers one lease, so it stands for
the token ``<job id>.<fence>``), merged within buckets of time: tokens settled
in the order they were claimed collapse into a few runs.

**Keeping it small.** Every commit writes the object whole, so the window must
not grow with the traffic. A client's request keys are ``r-{client}-{n}``
with ``n`` counting up (``r-{client}-{n}.{i}``: part ``i`` of call ``n``, see
:mod:`broker.model.calls`), and each keyed call may carry the client's *floor*:
every call of that client numbered below it has been answered. The receipts
of those calls are dropped at once, so a live client costs only the calls it
has in flight. The floor itself is kept (one small entry a client, for
``retry_ttl_s``): a late attempt of a call below it (one the client gave up
on, delivered after its answer was had) is refused, never applied as new.
Receipts older than ``retry_ttl_s`` are dropped (those of a client that went
away; the parts of one call together, once its youngest is: a push of many
batches may run longer than that, and its repeat needs them all), and at
most ``retry_keys`` request receipts, ``retry_keys`` settled runs and
``retry_keys`` floors are kept, oldest dropped first (settled tokens roll
into a new bucket every ``retry_keys / 20`` runs, so the bucket receiving
settlements is never the one dropped). A retry that comes later than that is
answered as if it were new (a push creates its jobs again, a complete says
"stale").

**A key reused for other jobs.** A push's receipt keeps a digest of the jobs
it pushed (their payloads and options, as the broker parsed them), so a
repeat is told from another push under the same key (a caller's key reused
for the next day's jobs): a repeat with another digest is refused
(``request_key_reused``) and changes nothing, where answering the first
push's ids would leave its jobs unpushed without a word. A receipt without a
digest (written before them), or a push that brings none, answers as before.
Claims, purges and redrives keep none: their keys are the client's own, never
a caller's, and a repeat answered for another call of theirs creates or loses
no job (a claim hands out nothing new; its jobs' leases run out as usual).
"""

from __future__ import annotations

import bisect
import hashlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import orjson

from broker import timefmt
from broker.errors import RequestKeyReused, shown
from broker.model.calls import CallIndex, client_of

#: Outcomes of a settled token, as the receipts name them.
COMPLETED = "completed"
FAILED = "failed"  # failed, will be retried (the job is pending again)
DEAD = "dead"
# the job was cancelled while claimed: its token's later calls answer so (a broker
# from before cancel refuses an object holding this outcome)
CANCELLED = "cancelled"
OUTCOMES = (COMPLETED, FAILED, DEAD, CANCELLED)

PUSH = "push"
CLAIM = "claim"
PURGE = "purge"
REDRIVE = "redrive"
KINDS = (PUSH, CLAIM, PURGE, REDRIVE)

#: Rough bytes one remembered item costs in the object (for the size limit; a
#: push's receipt with its digest).
ITEM_BYTES = 64
RUN_BYTES = 16
#: Settled tokens are merged into buckets of this share of ``retry_ttl_s``.
BUCKETS_PER_TTL = 20
#: How long a floor moved by an empty poll (or a remembered refusal) may stay
#: unwritten on an idle queue (ms): at most one write a second for them, however
#: often workers poll. Until written it holds in the owner's memory only.
LAZY_WRITE_MS = 1_000


def runs_of(values: Iterator[int] | Sequence[int]) -> list[int]:
    """``[5, 6, 7, 9]`` -> ``[5, 3, 9, 1]``: runs of consecutive ints, in order."""
    out: list[int] = []
    for v in values:
        if out and out[-2] + out[-1] == v:
            out[-1] += 1
        else:
            out += (v, 1)
    return out


def expand(runs: Sequence[int]) -> Iterator[int]:
    """The ints a list of runs stands for, in order."""
    for i in range(0, len(runs), 2):
        yield from range(runs[i], runs[i] + runs[i + 1])


def fence_of(token: str) -> int | None:
    """The fence number of a token (``<job id>.<fence>``), or None if malformed."""
    _, dot, tail = token.rpartition(".")
    if not dot or not tail.isascii() or not tail.isdigit() or len(tail) > 18:
        return None
    return int(tail)


#: Bytes of a push digest (written as twice as many hex digits): 64 bits, so two
#: different pushes under one key pass for each other once in 2**64.
DIGEST_BYTES = 8
#: A NewJob's options at their defaults (priority, delay_ms, max_attempts, key),
#: without its group: a job's group counts only when it has one, so the digests of
#: ungrouped pushes are those brokers from before groups kept.
_DEFAULTS = (0, 0, None, None)
_DEFAULTS_GROUPLESS = (*_DEFAULTS, None)
# (a NewJob's payload, options and group, by position)
_PAYLOAD, _OPTIONS, _GROUP = itemgetter(0), itemgetter(slice(1, None)), itemgetter(5)


def push_digest(jobs: Sequence[Any]) -> str:
    """The digest a push's receipt keeps of its jobs, given as the broker parsed
    them: each a payload's JSON bytes (a job with default options) or a
    :class:`~broker.model.ops.NewJob`, in order. Hex, the first
    :data:`DIGEST_BYTES` bytes of SHA-256 over the payloads' lengths (so no two
    lists of payloads run together alike), the payloads, and the options of the
    jobs when any has some (a job with every option at its default counts as a
    bare payload). Bare payloads are hashed without a Python step a job. SHA-256,
    not BLAKE2b: the CPUs a broker runs on compute it in hardware (x86 SHA
    extensions, ARMv8 crypto), about 2.5x BLAKE2b's speed there (1.4 against
    0.6 GB/s: ``bench/receipts_bench.py``); every byte of a push passes here."""
    try:
        joined = b"".join(jobs)  # every job a bare payload
        options = b""
    except TypeError:
        if bytes not in set(map(type, jobs)) and None not in map(_GROUP, jobs):
            # (every job a NewJob with a group, as a grouped push's are: the same
            # bytes as below, read in C loops, not a Python step a job)
            payloads = list(map(_PAYLOAD, jobs))
            options = orjson.dumps(list(map(_OPTIONS, jobs)))
        else:
            payloads = [job if type(job) is bytes else job[0] for job in jobs]
            listed = [None if type(job) is bytes or job[1:] == _DEFAULTS_GROUPLESS else
                      job[1:5] if job[5] is None else job[1:] for job in jobs]
            options = orjson.dumps(listed) if any(listed) else b""
        joined = b"".join(payloads)
        jobs = payloads
    h = hashlib.sha256(array("Q", map(len, jobs)).tobytes())
    h.update(joined)
    h.update(options)
    return h.hexdigest()[:2 * DIGEST_BYTES]


def _digest(value: Any, key: str) -> str:
    if not isinstance(value, str) or len(value) != 2 * DIGEST_BYTES \
            or value.strip("0123456789abcdef"):
        raise ValueError(f"push receipt {key!r} holds digest {value!r}, not "
                         f"{2 * DIGEST_BYTES} hex digits")
    return value


def _bucket_span(ttl_ms: int) -> int:
    return max(1_000, ttl_ms // BUCKETS_PER_TTL)


@dataclass(slots=True)
class Request:
    """The receipt of one keyed push or claim."""

    key: str
    at_ms: int
    kind: str  # one of KINDS
    data: list[int]  # push: runs of job seqs; claim: [first fence, count]; else: [count]
    enc: bytes | None = None
    replayed: bool = False  # a claim's jobs were handed out again (in memory only)
    digest: str | None = None  # a push's: see push_digest (None: written before digests)

    def plain(self) -> list[Any]:
        """The receipt's entry in the object."""
        entry: list[Any] = [self.key, timefmt.fmt(self.at_ms), self.kind, *self.data]
        if self.digest is not None:
            entry.append(self.digest)
        return entry

    def encode(self) -> bytes:
        if self.enc is None:
            self.enc = b",\n" + orjson.dumps(self.plain())
        return self.enc


@dataclass(slots=True)
class Bucket:
    """Tokens settled from ``at_ms`` on (for a while), as merged runs of fences."""

    at_ms: int
    runs: dict[str, list[int]] = field(default_factory=dict)  # outcome -> sorted runs
    enc: bytes | None = None

    def count(self) -> int:
        return sum(len(r) // 2 for r in self.runs.values())

    def add_run(self, outcome: str, first: int, count: int) -> int:
        """Add fences ``first`` .. ``first + count - 1``, as :meth:`add` of each
        would; return how the number of runs changed. One step for a run past
        every run held (the usual case), else fence by fence."""
        runs = self.runs.get(outcome)
        if not runs or runs[-2] + runs[-1] < first:
            self.enc = None
            self.runs.setdefault(outcome, []).extend((first, count))
            return 1
        if runs[-2] + runs[-1] == first:
            self.enc = None
            runs[-1] += count
            return 0
        return sum(self.add(outcome, fence) for fence in range(first, first + count))

    def add(self, outcome: str, fence: int) -> int:
        """Add one fence; return how the number of runs changed (-1, 0 or 1)."""
        self.enc = None
        runs = self.runs.setdefault(outcome, [])
        if runs and runs[-2] + runs[-1] == fence:  # the usual case: the next one
            runs[-1] += 1
            return 0
        firsts = runs[0::2]
        at = bisect.bisect_right(firsts, fence) - 1  # the run starting at or before it
        if at >= 0 and runs[2 * at] + runs[2 * at + 1] > fence:
            return 0  # already there
        joins_left = at >= 0 and runs[2 * at] + runs[2 * at + 1] == fence
        joins_right = at + 1 < len(firsts) and firsts[at + 1] == fence + 1
        if joins_left and joins_right:
            runs[2 * at + 1] += 1 + runs[2 * at + 3]
            del runs[2 * at + 2:2 * at + 4]
            return -1
        if joins_left:
            runs[2 * at + 1] += 1
            return 0
        if joins_right:
            runs[2 * at + 2] = fence
            runs[2 * at + 3] += 1
            return 0
        runs[2 * at + 2:2 * at + 2] = [fence, 1]
        return 1

    def encode(self) -> bytes:
        if self.enc is None:
            self.enc = b",\n" + orjson.dumps(
                [timefmt.fmt(self.at_ms), {o: r for o, r in self.runs.items() if r}])
        return self.enc


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _runs(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or len(value) % 2:
        raise ValueError(f"{what} must be a list of (first, count) pairs")
    return [_int(v, what) for v in value]


class Receipts:
    """Request receipts (oldest first) and settled-token buckets, with lookups."""

    __slots__ = ("_by_client", "_fence_index", "buckets", "floors", "requests", "settled_runs",
                 "unwritten_since")

    def __init__(self) -> None:
        self.requests: dict[str, Request] = {}  # in time order
        self.buckets: list[Bucket] = []  # oldest first
        self.settled_runs = 0
        self.floors: dict[str, tuple[int, int]] = {}  # client -> (floor, at ms), in time order
        self._by_client = CallIndex()  # the keys of each client's calls, and their ages
        self._fence_index: list[tuple[int, int, str]] | None = None  # (first, end, outcome)
        #: When a change that needs no write of its own (a floor moved by an empty
        #: claim, a refusal remembered) was first left unwritten; None: none is.
        self.unwritten_since: int | None = None

    def later(self, now_ms: int) -> None:
        """Mark a change to be written with the next write, or soon (see
        :data:`LAZY_WRITE_MS`), instead of a write of its own."""
        if self.unwritten_since is None:
            self.unwritten_since = now_ms

    def carry_unwritten(self, dropped: Receipts, now_ms: int) -> None:
        """Take from ``dropped`` (the receipts of a state the broker dropped to
        re-read the object) what may never have been written: client floors
        higher than these (a floor is the client's own word that it has every
        answer below it, whatever became of the batch that brought it). They
        are marked to be written (see :meth:`later`). Receipts are not carried:
        one in a dropped state belongs to a batch that may never have landed."""
        carried = False
        for client, (floor, at) in dropped.floors.items():
            mine = self.floors.get(client)
            if mine is None or mine[0] < floor:
                self.floors.pop(client, None)
                self.floors[client] = (floor, at)
                for key in self._by_client.pop_below(client, floor):
                    self.requests.pop(key, None)
                carried = True
        if carried:
            self.later(now_ms)

    @property
    def items(self) -> int:
        """Remembered items: request receipts, runs of settled tokens, floors."""
        return len(self.requests) + self.settled_runs + len(self.floors)

    # -- recording (by transitions) ------------------------------------------------
    def _remember(self, r: Request) -> None:
        self.requests.pop(r.key, None)  # (re-inserted at the young end)
        self.requests[r.key] = r
        self._by_client.add(r.key, r.at_ms)

    def record(self, key: str, kind: str, data: list[int], now_ms: int,
               digest: str | None = None) -> None:
        """Remember what the call ``key`` of ``kind`` answered: for a push the job
        seqs as runs (see :func:`runs_of`), for a claim [first fence, count],
        for a purge or redrive [count]; ``digest``: a push's (:func:`push_digest`)."""
        self._remember(Request(key, now_ms, kind, data, digest=digest))

    def answered(self, key: str, kind: str) -> list[int] | None:
        """What the call ``key`` of ``kind`` answered, if remembered."""
        r = self.requests.get(key)
        return None if r is None or r.kind != kind else r.data

    def check_same_push(self, key: str, digest: str | None) -> None:
        """Raise ``RequestKeyReused`` if a push under ``key`` is remembered with
        another digest than ``digest`` (it pushed other jobs); nothing if either
        has none (a receipt written before digests, a caller that brings none)."""
        r = self.requests.get(key)
        if r is None or digest is None or r.digest is None or r.digest == digest \
                or r.kind != PUSH:
            return
        raise RequestKeyReused(
            f"request key {shown(key)} was used for other jobs: the push under it at "
            f"{timefmt.fmt(r.at_ms)} {'pushed' if r.data else 'was refused for'} other jobs "
            "than these, and its receipt is kept for the queue's retry_ttl_s; nothing was "
            "pushed: push new jobs under a new request key")

    def answered_below(self, key: str, floor: int, now_ms: int) -> bool:
        """``key``'s client has the answers of its calls numbered below ``floor``:
        forget their receipts and remember the floor; True if anything changed."""
        who = client_of(key)
        if who is None:
            return False
        client = who[0]
        seen = self.floors.get(client)
        changed = seen is None or seen[0] < floor
        if changed:
            self.floors.pop(client, None)  # re-insert at the young end
            self.floors[client] = (max(floor, seen[0] if seen else 0), now_ms)
        done = self._by_client.pop_below(client, floor)
        for done_key in done:
            self.requests.pop(done_key, None)
        return changed or bool(done)

    def below_floor(self, key: str) -> bool:
        """True if ``key`` is a call its client already had the answer of (numbered
        below the client's floor): a late attempt that must not be applied."""
        who = client_of(key)
        seen = self.floors.get(who[0]) if who is not None else None
        return seen is not None and who is not None and who[1] < seen[0]

    def record_settled(self, outcome: str, fences: Sequence[int], now_ms: int,
                       ttl_ms: int, max_items: int) -> None:
        if not fences:
            return
        span = _bucket_span(ttl_ms)
        if not self.buckets or self.buckets[-1].at_ms + span <= now_ms \
                or self.buckets[-1].count() >= max(1, max_items // BUCKETS_PER_TTL):
            self.buckets.append(Bucket(now_ms))
        bucket = self.buckets[-1]
        ordered = sorted(fences)
        start, end = 0, len(ordered)
        while start < end:  # runs of consecutive fences (a claim's are), added whole
            stop = start + 1
            while stop < end and ordered[stop] == ordered[stop - 1] + 1:
                stop += 1
            self.settled_runs += bucket.add_run(outcome, ordered[start], stop - start)
            start = stop
        self._fence_index = None

    # -- lookups ------------------------------------------------------------------
    def push_ids(self, key: str) -> list[int] | None:
        runs = self.answered(key, PUSH)
        return None if runs is None else list(expand(runs))

    def outcome(self, fence: int) -> str | None:
        """How the token numbered ``fence`` was settled, if it is remembered."""
        index = self._fence_index
        if index is None:
            index = self._fence_index = sorted(
                (runs[i], runs[i] + runs[i + 1], outcome)
                for b in self.buckets for outcome, runs in b.runs.items()
                for i in range(0, len(runs), 2))
        at = bisect.bisect_right(index, (fence, 1 << 62, "")) - 1
        if at >= 0 and index[at][0] <= fence < index[at][1]:
            return index[at][2]
        return None

    # -- bounds ---------------------------------------------------------------------
    def trim(self, now_ms: int, ttl_ms: int, max_items: int) -> None:
        """Drop receipts and buckets older than ``ttl_ms``, then the oldest beyond
        ``max_items`` request receipts and ``max_items`` settled runs."""
        oldest_ok = now_ms - ttl_ms
        requests = self.requests
        while requests:
            first = next(iter(requests.values()))
            if len(requests) <= max_items:
                if first.at_ms >= oldest_ok:
                    break
                youngest = self._by_client.youngest(first.key)
                if youngest is not None and youngest >= oldest_ok:
                    # a part of a call with a younger part: kept as long as that one
                    del requests[first.key]
                    first.at_ms, first.enc = youngest, None
                    requests[first.key] = first
                    continue
            self._forget(first.key)
        buckets = self.buckets
        while buckets and (buckets[0].at_ms + _bucket_span(ttl_ms) <= oldest_ok
                           or (self.settled_runs > max_items and len(buckets) > 1)):
            self.settled_runs -= buckets.pop(0).count()  # (never the bucket receiving now)
            self._fence_index = None
        floors = self.floors
        while floors:
            client, (_, at) = next(iter(floors.items()))
            if at >= oldest_ok and len(floors) <= max_items:
                break
            del floors[client]

    def _forget(self, key: str) -> None:
        self.requests.pop(key, None)
        self._by_client.remove(key)

    def rebase(self, now_ms: int) -> None:
        """Re-time every receipt to ``now_ms`` (after a takeover: their times were
        written on another broker's clock)."""
        for r in self.requests.values():
            r.at_ms, r.enc = now_ms, None
        self._by_client.rebase(now_ms)
        for b in self.buckets:
            b.at_ms, b.enc = now_ms, None
        self.floors = {c: (f, now_ms) for c, (f, _) in self.floors.items()}

    def size_estimate(self) -> int:
        return (len(self.requests) + len(self.floors)) * ITEM_BYTES \
            + self.settled_runs * RUN_BYTES

    def max_fence(self) -> int:
        top = 0
        for r in self.requests.values():
            if r.kind == CLAIM:
                top = max(top, r.data[0] + r.data[1] - 1)
        for b in self.buckets:
            for runs in b.runs.values():
                if runs:
                    top = max(top, runs[-2] + runs[-1] - 1)
        return top

    def max_seq(self) -> int:
        return max((max(expand(r.data), default=0) for r in self.requests.values()
                    if r.kind == PUSH), default=0)

    # -- the object ---------------------------------------------------------------
    def encode(self) -> list[bytes]:
        """The ``receipts`` value as chunks to write in order."""
        parts = [b'{"requests":[\n']
        lines = [r.enc or r.encode() for r in self.requests.values()]
        if lines:
            lines[0] = lines[0][2:]
        parts += lines
        parts.append(b'\n],\n"settled":[\n')
        lines = [b.enc or b.encode() for b in self.buckets]
        if lines:
            lines[0] = lines[0][2:]
        parts += lines
        parts.append(b'\n],\n"floors":')
        parts.append(orjson.dumps([[c, f, timefmt.fmt(at)] for c, (f, at) in self.floors.items()]))
        parts.append(b"}")
        return parts

    def to_plain(self) -> dict[str, Any]:
        return {"requests": [r.plain() for r in self.requests.values()],
                "settled": [[timefmt.fmt(b.at_ms), {o: r for o, r in b.runs.items() if r}]
                            for b in self.buckets],
                "floors": [[c, f, timefmt.fmt(at)] for c, (f, at) in self.floors.items()]}

    @classmethod
    def decode(cls, raw: Any) -> Receipts:
        """Receipts from the object's ``receipts`` value; raises ``ValueError``
        naming what is malformed."""
        out = cls()
        if raw is None:
            return out
        if isinstance(raw, list):  # the per-commit layout of an earlier development version
            return cls._from_commit_list(raw)
        if not isinstance(raw, dict) or set(raw) - {"requests", "settled", "floors"}:
            raise ValueError("receipts must be an object of requests, settled and floors")
        for entry in raw.get("requests") or []:
            if not isinstance(entry, list) or len(entry) < 3 or not isinstance(entry[0], str) \
                    or not isinstance(entry[1], str) or entry[2] not in KINDS:
                raise ValueError(f"receipt {entry!r} is not [key, time, kind, ...]")
            kind = entry[2]
            tail = entry[3:]
            digest = _digest(tail.pop(), entry[0]) if kind == PUSH and tail \
                and isinstance(tail[-1], str) else None
            data = [_int(v, f"receipt {entry[0]!r}") for v in tail]
            if (kind == PUSH and len(data) % 2) or (kind == CLAIM and len(data) != 2) \
                    or (kind in (PURGE, REDRIVE) and len(data) != 1):
                raise ValueError(f"{kind} receipt {entry[0]!r} holds {data!r}")
            out._remember(Request(entry[0], timefmt.parse(entry[1]), kind, data,
                                  digest=digest))
        for entry in raw.get("floors") or []:
            if not isinstance(entry, list) or len(entry) != 3 or not isinstance(entry[0], str) \
                    or not isinstance(entry[2], str):
                raise ValueError(f"floor {entry!r} is not [client, floor, time]")
            out.floors[entry[0]] = (_int(entry[1], "floor"), timefmt.parse(entry[2]))
        for entry in raw.get("settled") or []:
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str) \
                    or not isinstance(entry[1], dict):
                raise ValueError(f"settled bucket {entry!r} is not [time, {{outcome: runs}}]")
            unknown = set(entry[1]) - set(OUTCOMES)
            if unknown:
                raise ValueError(f"settled bucket has unknown outcomes {sorted(unknown)}")
            bucket = Bucket(timefmt.parse(entry[0]),
                            {o: _runs(r, f"settled {o}") for o, r in entry[1].items()})
            out.buckets.append(bucket)
            out.settled_runs += bucket.count()
        return out

    @classmethod
    def _from_commit_list(cls, raw: list[Any]) -> Receipts:
        """Receipts kept one entry a commit (``[{"seq", "at", "push", "claim",
        "completed", "failed", "dead"}]``), as a development version wrote them."""
        out = cls()
        for item in raw:
            if not isinstance(item, dict) or not isinstance(item.get("at"), str):
                raise ValueError(f"receipt {item!r} is not an object with a time")
            at = timefmt.parse(item["at"])
            for entry in item.get("push") or []:
                if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
                    raise ValueError(f"push receipt {entry!r} is malformed")
                out._remember(Request(entry[0], at, PUSH, _runs(entry[1:], "push ids")))
            for entry in item.get("claim") or []:
                if not isinstance(entry, list) or len(entry) != 3 or not isinstance(
                        entry[0], str):
                    raise ValueError(f"claim receipt {entry!r} is malformed")
                out._remember(Request(entry[0], at, CLAIM, [_int(entry[1], "fence"),
                                                            _int(entry[2], "count")]))
            runs = {o: _runs(item[o], f"settled {o}") for o in OUTCOMES if item.get(o)}
            if runs:
                bucket = Bucket(at, runs)
                out.buckets.append(bucket)
                out.settled_runs += bucket.count()
        return out
