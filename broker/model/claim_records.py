"""Claim records: one compact record a claim, holding the claim's one lease.

Format version 5 keeps a claim's lease once, in a record of the head's
``"claims"`` list (one a line, ascending ``fence``), instead of once per
claimed job::

    {"fence":5001,"n":3,"worker":"w-1","lease_s":60.0,
     "expires_at":"2026-11-22T03:44:47.123Z","heartbeat_at":"2026-11-22T03:43:47.123Z",
     "parts":[{"seq":[1201,2,1300,1]}],"settled":[0,1],"cancel":[[2,"2026-11-22T03:43:50.000Z"]]}

Position ``i`` (0-based, in claim order) holds the lease numbered ``fence + i``,
so a job's token stays ``<job id>.<fence + i>`` (:mod:`broker.model.tokens` is
unchanged). ``parts`` say where the positions come from: here only ``seq``
parts (runs ``first, count, ...`` of inline jobs, whose lines say
``"status":"claimed","claim":<fence>``); ``{"seg": key, "at": runs}`` parts
hold jobs at positions of a segment, ``{"spill": key, "at": runs, "seq": runs}``
parts at positions of a pending spill object (and name their seqs), neither
with a line in the head (:mod:`broker.model.held`,
:mod:`broker.model.spill_parts`). ``settled`` (runs of positions, written
only when not empty) are positions no longer held; ``cancel`` the marked ones
with the time their cancel was asked for. A record whose positions are all
settled leaves the head (:mod:`broker.model.lifecycle`).

The record is the stored truth of the lease, and the only one in memory: a
claimed :class:`~broker.model.job.Job` reads its ``lease_*`` numbers through
its record (``Job.rec``), so a heartbeat of a claim of 2,000 jobs edits one
object; the job keeps its own token and a copy of its cancel mark
(``cancel_ms``), which :mod:`broker.model.lifecycle` keeps in step. Pure:
values and bytes, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker import timefmt
from broker.model.job import CLAIMED, Job
from broker.wire import compact

# Everything but worker (JSON-encoded) and the runs needs no escaping.
_RECORD = (b'{"fence":%d,"n":%d,"worker":%s,"lease_s":%s,"expires_at":"%s",'
           b'"heartbeat_at":"%s","parts":[{"seq":%s}]%s%s}')
_RECORD_PARTS = (b'{"fence":%d,"n":%d,"worker":%s,"lease_s":%s,"expires_at":"%s",'
                 b'"heartbeat_at":"%s","parts":%s%s%s}')


@dataclass(slots=True, eq=False)
class Done:
    """One commit's completions of a record's segment-part positions (``"done"``):
    the commit's seq, its id (set when the commit is stamped), its time (ms),
    the positions completed and their results (JSON bytes or None), aligned.
    No payload: the archive object reads it from the segment."""

    commit_seq: int
    commit: str | None
    at_ms: int
    pos: list[int] = field(default_factory=list)
    results: list[bytes | None] = field(default_factory=list)

    def encode(self) -> bytes:
        """The entry as the record's ``"done"`` holds it."""
        commit = b"null" if self.commit is None else orjson.dumps(self.commit)
        results = b",".join([b"null" if r is None else r for r in self.results])
        return b'{"commit_seq":%d,"commit":%s,"at":"%s","pos":%s,"results":[%s]}' % (
            self.commit_seq, commit, timefmt.fmt_bytes(self.at_ms),
            orjson.dumps(seq_runs(self.pos)), results)


@dataclass(slots=True, eq=False)
class ClaimRecord:
    """One claim: the lease numbers ``fence .. fence + n - 1``, the lease
    (``lease_ms`` long, expiring at ``expires_ms``, last renewed at
    ``heartbeat_ms``, all ms), the jobs' seqs in claim order (``seqs``,
    position -> seq), the settled positions (a bitmask) and the cancel marks
    (position -> ms)."""

    fence: int
    worker: str
    lease_ms: int
    expires_ms: int
    heartbeat_ms: int
    seqs: list[int] = field(default_factory=list)
    settled: int = 0
    cancel: dict[int, int] = field(default_factory=dict)
    # The positions held at segment parts (``{"seg": key, "at": runs}``), as spans
    # (first position in the record, count, segment key, first position in the
    # segment), ascending; the other positions are inline jobs (``seq`` parts).
    segs: list[tuple[int, int, str, int]] | None = None
    # The positions held at spill parts (``{"spill": key, "at": runs, "seq": runs}``):
    # jobs a claim took from a pending spill ref's cursor on, spans as ``segs``'
    # (first position, count, spill object key, first position in the object),
    # each consecutive in the object too; their seqs are in ``seqs`` (a spill
    # object's seqs are not consecutive, so the part names them).
    spills: list[tuple[int, int, str, int]] | None = None
    # Completions of segment-part positions awaiting their archive object, one a
    # commit (``"done"``): the record stays until the last one is dropped.
    completions: list[Done] | None = None
    _pos: dict[int, int] | None = None  # seq -> position, made when first asked
    _enc: bytes | None = None  # the record's line, cached until it changes

    @property
    def n(self) -> int:
        """How many positions (jobs) the claim has."""
        return len(self.seqs)

    def position(self, seq: int) -> int:
        """The position of the job ``seq`` in this claim (``KeyError`` if none)."""
        pos = self._pos
        if pos is None:
            if len(self.seqs) == 1:
                if self.seqs[0] != seq:
                    raise KeyError(seq)
                return 0
            pos = self._pos = {s: i for i, s in enumerate(self.seqs)}
        return pos[seq]

    def is_settled(self, pos: int) -> bool:
        """Whether position ``pos`` is no longer held."""
        return bool(self.settled >> pos & 1)

    @property
    def done(self) -> bool:
        """Whether every position is settled (the record leaves the head, once
        no completion of it awaits its archive object)."""
        return self.settled == (1 << len(self.seqs)) - 1

    @property
    def gone(self) -> bool:
        """Whether the record leaves the head: every position settled and no
        completion awaiting its archive object."""
        return not self.completions and self.settled == (1 << len(self.seqs)) - 1

    def unsettled(self) -> Iterator[int]:
        """The positions still held, ascending."""
        settled = self.settled
        if not settled:
            yield from range(len(self.seqs))
            return
        for pos in range(len(self.seqs)):
            if not settled >> pos & 1:
                yield pos

    def seg_span(self, pos: int) -> tuple[int, int, str, int] | None:
        """The segment span holding position ``pos``, or None (an inline job's)."""
        for span in self.segs or ():
            if span[0] <= pos < span[0] + span[1]:
                return span
        return None

    def spill_span(self, pos: int) -> tuple[int, int, str, int] | None:
        """The spill span holding position ``pos``, or None."""
        for span in self.spills or ():
            if span[0] <= pos < span[0] + span[1]:
                return span
        return None

    def held_span(self, pos: int) -> tuple[int, int, str, int] | None:
        """The segment or spill span holding position ``pos`` (no line of its
        own in the head), or None (an inline job's)."""
        return self.seg_span(pos) or (self.spill_span(pos) if self.spills else None)

    def add_spill(self, pos0: int, count: int, key: str, at0: int) -> bool:
        """Hold positions ``pos0 ..`` (``count``) at positions ``at0 ..`` of spill
        object ``key``; whether the record did not name ``key`` before."""
        spills = self.spills
        if spills is None:
            spills = self.spills = []
        new = all(span[2] != key for span in spills)
        spills.append((pos0, count, key, at0))
        self._enc = None
        return new

    def spill_keys(self) -> set[str]:
        """The spill objects the record's parts name."""
        return {span[2] for span in self.spills or ()}

    def add_seg(self, pos0: int, count: int, key: str, at0: int) -> bool:
        """Hold positions ``pos0 ..`` (``count``) at positions ``at0 ..`` of segment
        ``key``; whether the record did not name ``key`` before."""
        segs = self.segs
        if segs is None:
            segs = self.segs = []
        new = all(span[2] != key for span in segs)
        segs.append((pos0, count, key, at0))
        self._enc = None
        return new

    def seg_keys(self) -> set[str]:
        """The segments the record's parts name."""
        return {span[2] for span in self.segs or ()}

    def held_seg(self) -> int:
        """How many positions held at segment or spill parts are not settled."""
        settled = self.settled
        held = 0
        for pos0, count, _, _ in [*(self.segs or ()), *(self.spills or ())]:
            mask = ((1 << count) - 1) << pos0
            held += count - (settled & mask).bit_count()
        return held

    def _parts(self) -> bytes:
        """The ``"parts"`` list: runs of seqs of inline positions, runs of
        segment positions and runs of spill positions (with their jobs' seqs),
        in claim order (consecutive spans of one object in one part)."""
        parts: list[Any] = []
        seqs, cur = self.seqs, 0
        spans = [(span, "seg") for span in self.segs or ()] + \
            [(span, "spill") for span in self.spills or ()]
        if self.spills and self.segs:
            spans.sort(key=lambda item: item[0][0])
        first = 0  # (the first position of the last part)
        for (pos0, count, key, at0), kind in spans:
            if pos0 > cur:
                parts.append({"seq": seq_runs(seqs[cur:pos0])})
            last = parts[-1] if parts and pos0 == cur else None
            if last is not None and last.get(kind) == key:
                runs = last["at"]
                if runs[-2] + runs[-1] == at0:
                    runs[-1] += count
                else:
                    runs += (at0, count)
                if kind == "spill":
                    last["seq"] = seq_runs(seqs[first:pos0 + count])
            else:
                part: dict[str, Any] = {kind: key, "at": [at0, count]}
                if kind == "spill":
                    part["seq"] = seq_runs(seqs[pos0:pos0 + count])
                parts.append(part)
                first = pos0
            cur = pos0 + count
        if cur < len(seqs):
            parts.append({"seq": seq_runs(seqs[cur:])})
        return orjson.dumps(parts)

    def encode(self) -> bytes:
        """The record's line (cached until :attr:`_enc` is cleared)."""
        enc = self._enc
        if enc is None and (self.segs or self.spills):
            enc = self._enc = self._encode_parts(self._parts())
        if enc is None:
            settled = b""
            if self.settled:
                settled = b',"settled":' + orjson.dumps(runs_of_bits(self.settled, self.n))
            cancel = b""
            if self.cancel:
                cancel = b',"cancel":' + orjson.dumps(
                    [[pos, timefmt.fmt(at)] for pos, at in sorted(self.cancel.items())])
            seqs = self.seqs
            runs = b"[%d,1]" % seqs[0] if len(seqs) == 1 else orjson.dumps(seq_runs(seqs))
            enc = self._enc = _RECORD % (
                self.fence, len(seqs), _worker_json(self.worker),
                orjson.dumps(self.lease_ms / 1000), timefmt.fmt_bytes(self.expires_ms),
                timefmt.fmt_bytes(self.heartbeat_ms), runs, settled, cancel)
        return enc

    def _encode_parts(self, parts: bytes) -> bytes:
        settled = b""
        if self.settled:
            settled = b',"settled":' + orjson.dumps(runs_of_bits(self.settled, self.n))
        cancel = b""
        if self.cancel:
            cancel = b',"cancel":' + orjson.dumps(
                [[pos, timefmt.fmt(at)] for pos, at in sorted(self.cancel.items())])
        if self.completions:
            cancel += b',"done":[' + b",".join([d.encode() for d in self.completions]) + b"]"
        return _RECORD_PARTS % (
            self.fence, len(self.seqs), _worker_json(self.worker),
            orjson.dumps(self.lease_ms / 1000), timefmt.fmt_bytes(self.expires_ms),
            timefmt.fmt_bytes(self.heartbeat_ms), parts, settled, cancel)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON values (what :meth:`encode` writes)."""
        out: dict[str, Any] = orjson.loads(self.encode())
        return out


_workers: dict[str, bytes] = {}


def _worker_json(worker: str) -> bytes:
    """``worker`` JSON-encoded (cached: a few workers make every claim)."""
    enc = _workers.get(worker)
    if enc is None:
        if len(_workers) >= 4096:
            _workers.clear()
        enc = _workers[worker] = compact(orjson.dumps(worker))  # (4,096 kept: 16 MB else)
    return enc


def seq_runs(seqs: Sequence[int]) -> list[int]:
    """``seqs`` as runs of consecutive values: first, count, first, count, ..."""
    runs: list[int] = []
    for seq in seqs:
        if runs and runs[-2] + runs[-1] == seq:
            runs[-1] += 1
        else:
            runs += (seq, 1)
    return runs


def expand_runs(runs: Sequence[int]) -> list[int]:
    """The values of runs ``first, count, ...`` (the inverse of :func:`seq_runs`)."""
    out: list[int] = []
    for i in range(0, len(runs), 2):
        out.extend(range(runs[i], runs[i] + runs[i + 1]))
    return out


def runs_of_bits(bits: int, n: int) -> list[int]:
    """The set bits of ``bits`` below ``n`` as runs of positions: from, count, ..."""
    runs: list[int] = []
    pos = 0
    while pos < n:
        if bits >> pos & 1:
            start = pos
            while pos < n and bits >> pos & 1:
                pos += 1
            runs += (start, pos - start)
        else:
            pos += 1
    return runs


def bits_of_runs(runs: Sequence[int]) -> int:
    """The bitmask of runs of positions (the inverse of :func:`runs_of_bits`)."""
    bits = 0
    for i in range(0, len(runs), 2):
        bits |= ((1 << runs[i + 1]) - 1) << runs[i]
    return bits


def as_held(job: Job, record: ClaimRecord, pos: int) -> Job:
    """``job`` (just made from its source: a segment line or a spill object's
    job) turned into the claimed job held at position ``pos`` of ``record``:
    one attempt more, its fence and token the record's, its lease and cancel
    read through the record, no cached line. Returns ``job``."""
    job.status = CLAIMED
    job.attempts += 1
    job.claim = record.fence
    job.lease_token = f"{job.id}.{record.fence + pos}"
    job.rec = record
    job.cancel_ms = record.cancel.get(pos)
    job._enc = None
    return job


def held_slices(records: Iterable[ClaimRecord], key: str,
                spans: Callable[[ClaimRecord], list[tuple[int, int, str, int]] | None],
                ) -> tuple[tuple[int, ClaimRecord, int], ...]:
    """``(position in object key, record, position in the record)`` of each job
    one of ``records`` holds at a part naming object ``key`` (``spans``: a
    record's segment or spill spans) and has not settled, or names in a done
    entry, by object position. A settled position in no done entry is
    elsewhere (a line of the head, or the archive): left out."""
    out = []
    for record in records:
        done = {p for e in record.completions or () for p in e.pos}
        for pos0, count, name, at0 in spans(record) or ():
            if name == key:
                out += [(at0 + i, record, pos0 + i) for i in range(count)
                        if not record.is_settled(pos0 + i) or pos0 + i in done]
    return tuple(sorted(out, key=lambda item: item[0]))


def records_bytes(records: dict[int, ClaimRecord]) -> bytes:
    """The head's ``"claims"`` field, one record a line (``[]`` for none), with its
    leading ``,\\n``; ``records`` in ascending fence."""
    if not records:
        return b',\n"claims":[]'
    return b',\n"claims":[\n' + b",\n".join([r._enc or r.encode() for r in records.values()]) \
        + b"\n]"
