"""The segment side of a queue's state: :class:`SegmentRef` (a segment object
the head references, as the head holds it) and the derived in-memory caches
of segment lines a broker keeps per queue: :class:`SegmentWindows` (the lines
claims and pages may take next, and grouped segments' directories as
:class:`HeldRuns`) and :class:`HeldJobs` (the lines of jobs held at claim
records' segment parts). Never stored; :mod:`broker.model.state` re-exports
these names."""

from __future__ import annotations

import itertools
import sys
from array import array
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.errors import shown
from broker.paths import parse_segment_key


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What the head keeps per segment (``"segments"``; see :mod:`broker.model.segments.refs`,
    which keeps the claim order over them). ``run_at_ms`` is the due time of all its
    jobs (ms since the epoch); ``taken`` is the cursor: how many jobs from the
    start have moved into the head. Made by :func:`broker.model.format.segment_format.ref_from_json`
    (checked; :func:`~broker.model.format.segment_format.ref_to_json` writes it) or by the
    broker after writing the object; :func:`broker.model.segments.refs.take` makes the next one.

    A grouped segment's ref (segment format 3; not yet made by the broker) has
    ``groups``, its object's number of runs, and ``taken_at``: its taken
    positions as runs ``(from, count, from, count, ...)``, ascending, disjoint
    and coalesced, counting ``taken`` (not a prefix: ``next_seq`` means nothing
    for it; see :func:`broker.model.segments.refs.take_positions`)."""

    key: str
    etag: str
    first_seq: int
    count: int
    priority: int
    run_at_ms: int
    taken: int = 0
    groups: int | None = None
    taken_at: tuple[int, ...] = ()

    @property
    def next_seq(self) -> int:
        """The seq of the next job to take (one past the last while exhausted)."""
        return self.first_seq + self.taken

    @property
    def remaining(self) -> int:
        """How many jobs are still pending in the segment."""
        return self.count - self.taken

    @property
    def exhausted(self) -> bool:
        """Whether every job has been taken (the head may drop the reference)."""
        return self.taken == self.count

    @property
    def queue(self) -> str:
        """The queue the key names (a ref made by ``ref_from_json`` has one)."""
        parsed = parse_segment_key(self.key)
        if parsed is None:
            raise ValueError(f"segment key {shown(self.key)} is not a segment key")
        return parsed[0]


#: Taken lines a window drops at once (see :meth:`SegmentWindows.take`).
_COMPACT_AT = 8192
#: Most segment windows a broker holds per queue (each at most one segment:
#: 65,536 jobs, 16 MiB); a claim or page needing an evicted one reads it again.
MAX_WINDOWS = 8


@dataclass(frozen=True, slots=True)
class HeldRuns:
    """A grouped segment's directory as :class:`SegmentWindows` holds it: its
    names, interned (the same groups run through every segment of a push),
    and its counts in an ``array('I')``: about 12 bytes a run, not the 80 of
    a tuple a run. Iterates as the ``(name, count)`` pairs it was made of."""

    names: tuple[str | None, ...]
    counts: array

    @classmethod
    def of(cls, runs: Iterable[tuple[str | None, int]]) -> HeldRuns:
        pairs = list(runs)
        return cls(tuple(None if name is None else sys.intern(name) for name, _ in pairs),
                   array("I", [n for _, n in pairs]))

    def __iter__(self) -> Iterator[tuple[str | None, int]]:
        return zip(self.names, self.counts, strict=True)

    def __len__(self) -> int:
        return len(self.names)


@dataclass(slots=True)
class _Window:
    start: int  # the position (0 = the segment's first job) of lines[offset]
    lines: list[bytes]
    offset: int = 0


@dataclass(slots=True)
class SegmentWindows:
    """Loaded job lines of segment objects, by (key, etag): what the broker read
    (:func:`broker.model.format.segment_format.segment_lines` form, with the leading ``,\\n``)
    and has not yet moved into the head. Derived and never stored; one per
    queue, kept across reloads of the head (a segment never changes)."""

    windows: dict[tuple[str, str], _Window] = field(default_factory=dict)
    #: The directories of grouped segments (their runs: ``(group or None, count)``
    #: in position order), kept while the head references them; a grouped
    #: segment's window is always the whole object (its taken positions are
    #: ``taken_at``, not a prefix).
    runs: dict[tuple[str, str], Iterable[tuple[str | None, int]]] = field(
        default_factory=dict)

    def put(self, ref: SegmentRef, start: int, lines: list[bytes],
            keep: Collection[tuple[str, str]] = ()) -> None:
        """Keep ``lines``, the jobs at positions ``start`` onwards of ``ref``'s
        segment. Beyond :data:`MAX_WINDOWS` the oldest window goes, but never
        this one nor one named (key, etag) in ``keep`` (the others a batch
        needs: with more than :data:`MAX_WINDOWS` of those, more are held)."""
        name = (ref.key, ref.etag)
        self.windows.pop(name, None)
        self.windows[name] = _Window(start, lines)
        if len(self.windows) > MAX_WINDOWS:
            spare = [n for n in self.windows if n != name and n not in keep]
            for old in spare[:len(self.windows) - MAX_WINDOWS]:
                del self.windows[old]

    def put_grouped(self, ref: SegmentRef, lines: list[bytes],
                    runs: tuple[tuple[str | None, int], ...],
                    keep: Collection[tuple[str, str]] = ()) -> None:
        """Keep the whole of grouped segment ``ref``'s ``lines`` and its
        directory ``runs`` (as :meth:`put`, which may evict other windows;
        the directory stays while the head references the segment)."""
        self.put_directory(ref, runs)
        self.put(ref, 0, lines, keep)

    def put_directory(self, ref: SegmentRef,
                      runs: tuple[tuple[str | None, int], ...]) -> None:
        """Keep grouped segment ``ref``'s directory ``runs`` without its lines
        (what a claim needs to know its groups' runs; the lines of the runs a
        batch reaches are loaded whole, :meth:`put_grouped`), as
        :class:`HeldRuns`: a deep grouped queue holds the directories of all
        its due segments."""
        self.runs[(ref.key, ref.etag)] = HeldRuns.of(runs)

    def has_directory(self, ref: SegmentRef) -> bool:
        """Whether grouped segment ``ref``'s directory is held."""
        return (ref.key, ref.etag) in self.runs

    def touch(self, refs: Sequence[SegmentRef]) -> None:
        """Mark the windows of ``refs`` (those held) as the latest used, in
        that order: eviction beyond :data:`MAX_WINDOWS` takes the least
        lately used first."""
        windows = self.windows
        for ref in refs:
            name = (ref.key, ref.etag)
            window = windows.pop(name, None)
            if window is not None:
                windows[name] = window

    def line_at(self, ref: SegmentRef, pos: int) -> bytes | None:
        """The loaded line of position ``pos`` of ``ref``'s segment, or None."""
        window = self.windows.get((ref.key, ref.etag))
        if window is None:
            return None
        at = pos - window.start
        return window.lines[at] if window.offset <= at < len(window.lines) else None

    def loaded(self, ref: SegmentRef) -> int:
        """How many of the ref's untaken jobs, from its cursor on, are loaded
        (of a grouped ref: all of them, or none)."""
        window = self.windows.get((ref.key, ref.etag))
        if window is None:
            return 0
        if ref.groups is not None:
            whole = window.start == window.offset == 0 and len(window.lines) == ref.count
            return ref.remaining if whole else 0
        at = window.start + window.offset
        end = window.start + len(window.lines)
        return max(0, end - ref.taken) if at <= ref.taken else 0

    def peek(self, ref: SegmentRef, at: int, n: int) -> list[bytes] | None:
        """Up to ``n`` loaded lines from position ``at`` on (for a page of jobs),
        or None if position ``at`` is not loaded."""
        window = self.windows.get((ref.key, ref.etag))
        if window is None:
            return None
        lo = at - window.start
        if not window.offset <= lo < len(window.lines):
            return None
        return window.lines[lo:lo + n]

    def take(self, ref: SegmentRef, n: int) -> list[bytes]:
        """Up to ``n`` loaded lines from the ref's cursor on (fewer if fewer are
        loaded), which the caller moves into the head."""
        window = self.windows.get((ref.key, ref.etag))
        if window is None or not self.loaded(ref):
            return []
        lo = ref.taken - window.start
        out = window.lines[lo:lo + n]
        window.offset = lo + len(out)
        if window.offset >= len(window.lines):
            del self.windows[(ref.key, ref.etag)]
        elif window.offset > _COMPACT_AT:  # (drop what was taken, now and then)
            window.lines = window.lines[window.offset:]
            window.start += window.offset
            window.offset = 0
        return out

    def keep_only(self, refs: Sequence[SegmentRef]) -> None:
        """Forget the windows of segments ``refs`` no longer names."""
        live = {(ref.key, ref.etag) for ref in refs}
        for name in [name for name in self.windows if name not in live]:
            del self.windows[name]
        for name in [name for name in self.runs if name not in live]:
            del self.runs[name]


#: A claim record's segment span: (first position in the record, count, segment
#: key, first position in the segment); see broker.model.claim_records.
Span = tuple[int, int, str, int]


class HeldJobs:
    """The source lines of jobs held at ``seg`` parts of claim records, per
    record fence and :data:`Span` (which names its source, so lines put by an
    attempt that never landed are never taken for another record's with the
    same fence): the segment ref, the lines joined in one ``bytes`` and an
    ``array`` of offsets, never an object per job. Derived, one per queue,
    filled at claim and by the broker's ``prepare``. Beyond ``limit_bytes`` the
    oldest parts go, never a pinned record's (a running batch needs them).

    The jobs of ``spill`` parts are kept apart (:meth:`put_spilled`): the spill
    object's jobs as its ref shows them (``SpilledJob`` values: payload,
    attempts, errors, key, priority, times), counted at their payload and
    error bytes."""

    __slots__ = ("limit_bytes", "parts", "pinned", "size", "spilled")

    def __init__(self, limit_bytes: int = 256 << 20) -> None:
        self.limit_bytes = limit_bytes
        self.parts: dict[tuple[int, Span], tuple[SegmentRef, bytes, array[int]]] = {}
        self.pinned: set[int] = set()  # record fences a running batch needs
        self.size = 0
        self.spilled: dict[tuple[int, Span], tuple[Any, list[Any], int]] = {}

    def put(self, fence: int, span: Span, ref: SegmentRef, lines: Sequence[bytes]) -> None:
        """Keep ``lines``, the jobs of record ``fence``'s segment part ``span``
        (consecutive positions of ``ref``'s segment)."""
        offsets = array("I", itertools.accumulate(map(len, lines), initial=0))
        blob = b"".join(lines)
        old = self.parts.pop((fence, span), None)
        if old is not None:
            self.size -= len(old[1])
        self.parts[(fence, span)] = (ref, blob, offsets)
        self.size += len(blob)
        if self.size > self.limit_bytes:
            for name in [n for n in self.parts if n[0] not in self.pinned and n[0] != fence]:
                if self.size <= self.limit_bytes:
                    break
                self.size -= len(self.parts.pop(name)[1])

    def put_spilled(self, fence: int, span: Span, ref: Any, jobs: Sequence[Any]) -> None:
        """Keep ``jobs`` (``SpilledJob`` values, as ``ref`` shows them), the jobs
        of record ``fence``'s spill part ``span`` (positions ``span[3] ..`` of
        ``ref``'s object), in order."""
        size = sum(len(job.payload) + sum(len(e.text) for e in job.errors) + 64
                   for job in jobs)
        old = self.spilled.pop((fence, span), None)
        if old is not None:
            self.size -= old[2]
        self.spilled[(fence, span)] = (ref, list(jobs), size)
        self.size += size
        if self.size > self.limit_bytes:
            for name in [n for n in self.spilled if n[0] not in self.pinned and n[0] != fence]:
                if self.size <= self.limit_bytes:
                    break
                self.size -= self.spilled.pop(name)[2]

    def spilled_job(self, fence: int, span: Span, i: int) -> Any | None:
        """The ``i``-th job (a ``SpilledJob``) of record ``fence``'s spill part
        ``span``, or None if it is not loaded."""
        part = self.spilled.get((fence, span))
        if part is None or not 0 <= i < len(part[1]):
            return None
        return part[1][i]

    def has_spilled(self, fence: int, span: Span) -> bool:
        """Whether record ``fence``'s spill part ``span`` is loaded."""
        return (fence, span) in self.spilled

    def line(self, fence: int, span: Span, i: int) -> tuple[SegmentRef, bytes] | None:
        """The ref and line of the ``i``-th job of record ``fence``'s segment part
        ``span``, or None if it is not loaded."""
        part = self.parts.get((fence, span))
        if part is None or not 0 <= i < len(part[2]) - 1:
            return None
        ref, blob, offsets = part
        return ref, blob[offsets[i]:offsets[i + 1]]

    def lines(self, fence: int, span: Span) -> tuple[SegmentRef, list[bytes]] | None:
        """The ref and every line of record ``fence``'s segment part ``span``, in
        order, or None if it is not loaded (the archiver reads a done entry's
        runs of positions so, not a line at a time)."""
        part = self.parts.get((fence, span))
        if part is None:
            return None
        ref, blob, offsets = part
        return ref, [blob[a:b] for a, b in itertools.pairwise(offsets)]

    def has(self, fence: int, span: Span) -> bool:
        """Whether record ``fence``'s segment part ``span`` is loaded."""
        return (fence, span) in self.parts

    def forget(self, fence: int) -> None:
        """Drop the parts of record ``fence`` (it left the head)."""
        for name in [n for n in self.parts if n[0] == fence]:
            self.size -= len(self.parts.pop(name)[1])
        for name in [n for n in self.spilled if n[0] == fence]:
            self.size -= self.spilled.pop(name)[2]
