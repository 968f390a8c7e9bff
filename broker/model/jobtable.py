"""The jobs of a queue state by seq, with untouched bulk-pushed jobs kept as bytes.

A bulk push (``PushPayloads``, and so every Spark write) adds jobs that are
fully described by their line in the object: pending, priority 0, no key, no
error, due when pushed. :class:`JobTable` keeps each such job as that line
(``bytes``) until something first asks for the job (a claim, a purge, a
redrive by id, a page of jobs); only then is a :class:`~broker.model.job.Job` made
from the line (:func:`broker.model.job_lines.pending_from_line`) and kept in its place.

Why: Python's garbage collector tracks every ``Job`` but no ``bytes``. An
embedded broker shares the Spark driver's collector (and must leave its
settings alone, see :mod:`broker.gcpause`), and each full collection walks
every tracked object: a million ``Job`` objects made by one
``df.write.format("osqueue")`` cost about eight full passes of up to 0.4 s
each while the queue grows (``bench/spark_bench.py``, the write row). A
million lines cost none.

The table reads as a ``Mapping[int, Job]`` in seq order; reading a job
through :meth:`JobTable.get`, ``[]``, :meth:`JobTable.values` or
:meth:`JobTable.items` makes it a ``Job`` for good (so a caller may change it).
:meth:`JobTable.peek` and :meth:`JobTable.touched` read without making
anything: ``peek`` yields throwaway ``Job`` objects for lines (never to be
changed or moved), ``touched`` skips lines (they are all pending).
:attr:`JobTable.entries` is the dict itself, for the codec and the per-job
loops of :mod:`broker.model.lifecycle` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from broker.model.job import CLAIMED, PENDING, STATUSES, Job
from broker.model.job_lines import line_due_stamp, pending_from_line, stamp_ms


class Tally(NamedTuple):
    """What :meth:`JobTable.tally` counts (times in ms since the epoch)."""

    counts: dict[str, int]
    oldest_due_created_ms: int | None
    next_run_ms: int | None
    marked: int = 0  # claimed jobs marked for cancellation


#: Seqs :meth:`JobTable.peek` looks up one by one before it scans instead.
PROBE = 4096


class JobTable:
    """seq -> :class:`~broker.model.job.Job`, some kept as their line (see the module
    docstring). Iteration is in seq order: jobs are mostly added in ascending
    order; jobs taken from a segment object (:meth:`insert_lines`, :meth:`insert`)
    may come below others, and the table is then sorted once, in place, when
    next iterated (the claim path reads by seq and never needs the order)."""

    __slots__ = ("entries", "unordered")

    def __init__(self) -> None:
        #: seq -> the job, or its line while untouched (pending, default options)
        self.entries: dict[int, Job | bytes] = {}
        #: True while some seq was added below a higher one (see :meth:`_order`)
        self.unordered = False

    def _order(self) -> None:
        """Put the entries back in seq order (in place: the dict stays the same object)."""
        if self.unordered:
            items = sorted(self.entries.items())
            self.entries.clear()
            self.entries.update(items)
            self.unordered = False

    # -- reading that makes jobs ------------------------------------------------------

    def get(self, seq: int, default: Job | None = None) -> Job | None:
        """The job with ``seq`` (made from its line if need be, and kept), or ``default``."""
        entry = self.entries.get(seq)
        if entry is None:
            return default
        if isinstance(entry, bytes):
            entry = self.entries[seq] = pending_from_line(seq, entry)
        return entry

    def __getitem__(self, seq: int) -> Job:
        job = self.get(seq)
        if job is None:
            raise KeyError(seq)
        return job

    def values(self) -> Iterator[Job]:
        """Every job in seq order, each line made a ``Job`` (and kept) as it is reached."""
        self._order()
        entries = self.entries
        for seq, entry in entries.items():
            if isinstance(entry, bytes):
                entry = entries[seq] = pending_from_line(seq, entry)
            yield entry

    def items(self) -> Iterator[tuple[int, Job]]:
        """(seq, job) for every job, as :meth:`values` makes them."""
        for job in self.values():
            yield job.seq, job

    # -- reading that makes nothing ------------------------------------------------

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, seq: object) -> bool:
        return seq in self.entries

    def __iter__(self) -> Iterator[int]:
        self._order()
        return iter(self.entries)

    def touched(self) -> Iterator[Job]:
        """The jobs that are ``Job`` objects, in seq order: every job that is not an
        untouched pending one (so every claimed, dead and completed job)."""
        self._order()
        for entry in self.entries.values():
            if not isinstance(entry, bytes):
                yield entry

    def peek(self, after_seq: int = -1, status: str | None = None) -> Iterator[Job]:
        """The jobs after ``after_seq`` in seq order, optionally of one status, lines
        read into throwaway ``Job`` objects that are not kept: read them, never
        change or move them.

        A page from the middle costs what it reads, not its position: the
        seqs after ``after_seq`` are looked up one by one (a dict has no
        ordered seek; seqs are dense where jobs were pushed and not yet
        archived) for up to :data:`PROBE` seqs, then the rest is scanned."""
        self._order()
        entries = self.entries
        if not entries:
            return
        seq, last = after_seq + 1, next(reversed(entries))
        if seq > next(iter(entries)):
            stop = min(last, after_seq + PROBE)
            while seq <= stop:
                entry = entries.get(seq)
                if entry is not None:
                    job = _matching(seq, entry, status)
                    if job is not None:
                        yield job
                seq += 1
            if seq > last:
                return
        for found, entry in entries.items():  # the start, or a sparse stretch
            if found < seq:
                continue
            if isinstance(entry, bytes):
                if status is None or status == PENDING:
                    yield pending_from_line(found, entry)
            elif status is None or entry.status == status:
                yield entry

    def peek_before(self, before_seq: int, status: str | None = None) -> Iterator[Job]:
        """:meth:`peek` backwards: the jobs before ``before_seq``, newest first."""
        self._order()
        entries = self.entries
        if not entries:
            return
        seq, first = before_seq - 1, next(iter(entries))
        if seq < next(reversed(entries)):
            stop = max(first, before_seq - PROBE)
            while seq >= stop:
                entry = entries.get(seq)
                if entry is not None:
                    job = _matching(seq, entry, status)
                    if job is not None:
                        yield job
                seq -= 1
            if seq < first:
                return
        for found in reversed(entries):
            if found <= seq:
                job = _matching(found, entries[found], status)
                if job is not None:
                    yield job

    def count_by_status(self) -> dict[str, int]:
        """How many jobs have each status."""
        counts = dict.fromkeys(STATUSES, 0)
        lines = 0
        for entry in self.entries.values():
            if isinstance(entry, bytes):
                lines += 1
            else:
                counts[entry.status] += 1
        counts[PENDING] += lines
        return counts

    def tally(self, now_ms: int) -> Tally:
        """One pass for the dashboard's summary: counts by status, the oldest due
        pending job's creation time, the next delayed job's due time (ms) and
        the claimed jobs marked for cancellation.
        Untouched lines stand in by the first of them: they were pushed in
        seq order, due when pushed, so it is the oldest to within the clock
        skew between the brokers that pushed them (:meth:`untouched_due_times`
        is exact, and reads every line)."""
        self._order()  # (the first line in seq order)
        counts = dict.fromkeys(STATUSES, 0)
        lines = 0
        first_line: bytes | None = None
        oldest: int | None = None
        later: int | None = None
        marked = 0
        for entry in self.entries.values():
            if isinstance(entry, bytes):
                if first_line is None:
                    first_line = entry
                lines += 1
                continue
            status = entry.status
            counts[status] += 1
            if status == PENDING:
                if entry.run_at_ms <= now_ms:
                    if oldest is None or entry.created_ms < oldest:
                        oldest = entry.created_ms
                elif later is None or entry.run_at_ms < later:
                    later = entry.run_at_ms
            elif status == CLAIMED and entry.cancel_ms is not None:
                marked += 1
        counts[PENDING] += lines
        if first_line is not None:
            at = stamp_ms(line_due_stamp(first_line))
            if at <= now_ms:
                oldest = at if oldest is None else min(oldest, at)
            elif later is None or at < later:
                later = at
        return Tally(counts, oldest, later, marked)

    def untouched_due_times(self) -> set[int]:
        """The times (ms) at which untouched pending jobs are due; such a job was
        created when it became due."""
        stamps = {line_due_stamp(e) for e in self.entries.values() if isinstance(e, bytes)}
        return set(map(stamp_ms, stamps))

    # -- changes -------------------------------------------------------------------------

    def __setitem__(self, seq: int, job: Job) -> None:
        self.entries[seq] = job

    def __delitem__(self, seq: int) -> None:
        del self.entries[seq]

    def add_lines(self, first_seq: int, lines: list[bytes]) -> None:
        """Add untouched pending jobs ``first_seq`` onwards, one line each (lines
        from :func:`broker.model.job_lines.new_pending_lines`)."""
        self.entries.update(zip(range(first_seq, first_seq + len(lines)), lines, strict=True))

    def _below(self, seq: int) -> None:
        if not self.unordered and self.entries and next(reversed(self.entries)) > seq:
            self.unordered = True

    def insert_lines(self, first_seq: int, lines: list[bytes]) -> None:
        """:meth:`add_lines` for seqs that may lie below others (jobs taken from a
        segment object whose lines have the default options)."""
        if lines:
            self._below(first_seq)
            self.add_lines(first_seq, lines)

    def insert(self, seq: int, job: Job) -> None:
        """Add ``job`` under ``seq``, which may lie below others (a job taken from a
        segment object)."""
        self._below(seq)
        self.entries[seq] = job

    # -- comparison ----------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        """Equal to a table or mapping with equal jobs under the same seqs (a line
        equals the job made from it)."""
        self._order()
        if isinstance(other, JobTable):
            other._order()
            other_jobs: Any = dict(zip(other.entries, other.peek(), strict=True))
        elif isinstance(other, dict):
            other_jobs = other
        else:
            return NotImplemented
        return dict(zip(self.entries, self.peek(), strict=True)) == other_jobs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        lines = sum(isinstance(e, bytes) for e in self.entries.values())
        return f"JobTable({len(self.entries)} jobs, {lines} untouched)"


def _matching(seq: int, entry: Job | bytes, status: str | None) -> Job | None:
    """The job of ``entry`` (a throwaway one for a line) if it has ``status``."""
    if isinstance(entry, bytes):
        return pending_from_line(seq, entry) if status in (None, PENDING) else None
    return entry if status is None or entry.status == status else None
