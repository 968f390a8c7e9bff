"""One job of a queue: its fields, its lease, its id and token spellings.

A job's status is pending, claimed, dead, completed or cancelled. Ids are the enqueue
sequence number, zero-padded (``j0000000042``); a lease token is
``<job id>.<fence>``. :class:`Job` keeps its lease in its own fields and its
encoded line in ``_enc``, which only :mod:`broker.model.job_lines` and
:mod:`broker.model.lifecycle` touch. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol, overload

import orjson

from broker import timefmt, wire
from broker.fields import error_text
from broker.limits import ERRORS_KEPT, MAX_ERROR_CHARS
from broker.model.columns import LazySequence

PENDING = "pending"
CLAIMED = "claimed"
DEAD = "dead"
COMPLETED = "completed"  # awaiting its archive object, then dropped
CANCELLED = wire.CANCELLED  # the same: awaiting its archive object, then dropped
STATUSES = (PENDING, CLAIMED, DEAD, COMPLETED, CANCELLED)
#: Statuses of jobs that have left the queue and await their archive object.
FINISHED = (COMPLETED, CANCELLED)


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


class JobIdRuns(LazySequence[str]):
    """The ids of jobs in runs of consecutive seqs (``runs``: first seq, count,
    first seq, count, ...), spelled out only when read: a publish whose jobs
    went into several segments and the head."""

    __slots__ = ("runs",)

    def __init__(self, runs: list[int]) -> None:
        self.runs = runs

    def __len__(self) -> int:
        return sum(self.runs[1::2])

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return list(self)[index]
        at = index + len(self) if index < 0 else index
        for i in range(0, len(self.runs), 2):
            if 0 <= at < self.runs[i + 1]:
                return job_id_for(self.runs[i] + at)
            at -= self.runs[i + 1]
        raise IndexError(index)

    def __iter__(self) -> Iterator[str]:
        return (job_id_for(seq) for i in range(0, len(self.runs), 2)
                for seq in range(self.runs[i], self.runs[i] + self.runs[i + 1]))

    def __repr__(self) -> str:
        return f"JobIdRuns({self.runs})"


class PermutedJobIds(LazySequence[str]):
    """The ids of jobs with consecutive seqs from ``first``, in an order other
    than theirs: id ``i`` is the job of seq ``first + offsets[i]`` (a grouped
    push by reference, whose segments hold each group's jobs together, answers
    the ids in the order of its request). ``offsets``: an ``array('I')``."""

    __slots__ = ("first", "offsets")

    def __init__(self, first: int, offsets: Sequence[int]) -> None:
        self.first = first
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [job_id_for(self.first + at) for at in self.offsets[index]]
        return job_id_for(self.first + self.offsets[index])

    def __iter__(self) -> Iterator[str]:
        first = self.first
        return (job_id_for(first + at) for at in self.offsets)

    def __repr__(self) -> str:
        return f"PermutedJobIds({self.first}, {len(self.offsets)} ids)"


def token_seq(token: str) -> int | None:
    """The seq of the job a fencing token (``<job id>.<fence>``) names, or None."""
    return seq_of(token.rpartition(".")[0])



class ErrorEntry(NamedTuple):
    """One failure in a job's history: the attempt that failed (1 is the
    first claim), when (ms since the epoch) and its error text (``""`` for a
    failure that gave none)."""

    attempt: int
    failed_ms: int
    text: str


#: The history of a job that never failed: one shared empty tuple, so a job
#: that never failed costs nothing for it.
NO_ERRORS: tuple[ErrorEntry, ...] = ()


def bounded_errors(entries: Sequence[ErrorEntry]) -> tuple[ErrorEntry, ...]:
    """A job's error history as it is kept: at most :data:`~broker.limits.ERRORS_KEPT`
    entries, the first attempt's (usually the real cause) and the latest ones
    (what is happening now), each text cut to its last
    :data:`~broker.limits.MAX_ERROR_CHARS` characters (as ``last_error`` is)."""
    if not entries:
        return NO_ERRORS
    kept = entries if len(entries) <= ERRORS_KEPT else (
        entries[0], *entries[len(entries) - ERRORS_KEPT + 1:])
    return tuple(entry if len(entry.text) <= MAX_ERROR_CHARS
                 else entry._replace(text=entry.text[-MAX_ERROR_CHARS:]) for entry in kept)


#: Rough bytes an error-history entry adds to its job's line besides its text
#: (attempt, failure time, brackets, quotes and commas: about 36; the names
#: ``"last_error"`` and ``"errors"`` spread over the entries).
ERROR_ENTRY_BYTES = 48


def errors_bytes(errors: Sequence[ErrorEntry]) -> int:
    """Rough bytes ``errors`` add to a job's line: each text's characters (one
    byte each: a text of escaped or non-ASCII characters costs more) and
    :data:`ERROR_ENTRY_BYTES`. Part of :meth:`Job.size_estimate`, so that
    ``max_state_bytes`` sees histories (up to ERRORS_KEPT x MAX_ERROR_CHARS)."""
    return sum(len(entry.text) for entry in errors) + ERROR_ENTRY_BYTES * len(errors)


def with_error(errors: tuple[ErrorEntry, ...], attempt: int, failed_ms: int,
               text: str) -> tuple[ErrorEntry, ...]:
    """``errors`` with the failure of ``attempt`` at ``failed_ms`` (ms since the
    epoch) appended, bounded (:func:`bounded_errors`: the first entry and the
    latest ones, ``text`` cut to its last MAX_ERROR_CHARS characters; lone
    surrogates escaped, :func:`broker.fields.error_text`)."""
    text = error_text(text)
    if len(text) > MAX_ERROR_CHARS:
        text = text[-MAX_ERROR_CHARS:]
    entry = ErrorEntry(attempt, failed_ms, text)
    if len(errors) < ERRORS_KEPT:
        return (*errors, entry)
    return (errors[0], *errors[len(errors) - ERRORS_KEPT + 2:], entry)


class LeaseHolder(Protocol):
    """What a claimed job reads its lease's numbers from: its claim record
    (:class:`broker.model.claim_records.ClaimRecord`, a layer above)."""

    worker: str
    lease_ms: int
    expires_ms: int
    heartbeat_ms: int


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

    A claimed job's worker, length, expiry and heartbeat are its claim
    record's (``rec``, :mod:`broker.model.claim_records`), read through: a
    heartbeat renewing a claim of 2,000 jobs edits one record, not 2,000 jobs.
    When the job leaves its claim (:func:`broker.model.lifecycle.settle`) they
    are copied into its own fields, which a completed job keeps.
    """

    __slots__ = (
        "_enc",
        "_lease_expires_ms",
        "_lease_heartbeat_ms",
        "_lease_ms",
        "_lease_worker",
        "attempts",
        "cancel_ms",
        "claim",
        "created_ms",
        "done_commit",
        "done_ms",
        "done_seq",
        "errors",
        "group",
        "key",
        "lease_token",
        "max_attempts",
        "payload",
        "priority",
        "rec",
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
        group: str | None = None,
        errors: tuple[ErrorEntry, ...] = NO_ERRORS,
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
        # the error history, oldest first, bounded (bounded_errors); ``last_error``
        # alone (no ``errors``) is a history of one entry whose time is unknown (0)
        self.errors = errors if last_error is None else (
            errors or (ErrorEntry(max(1, attempts), 0, last_error),))
        self.group = group  # its group's name (broker.fields.group), or None
        # the lease (see the class docstring); the numbers mean nothing while the token is None
        self.lease_token: str | None = None
        self.rec: LeaseHolder | None = None  # a claimed job's record: the lease numbers' home
        self._lease_worker = ""
        self._lease_ms = self._lease_expires_ms = self._lease_heartbeat_ms = 0
        if lease is not None:
            self.lease = lease
        # a claimed job's claim record (its base fence: broker.model.claim_records);
        # the lease_* fields read that record's lease through ``rec`` while it holds the job
        self.claim: int | None = None
        # when its cancel was asked for: a claimed job marked, or a cancelled job
        self.cancel_ms: int | None = None
        # completed (or cancelled) jobs only: when, in which commit (its seq and
        # id), the result's JSON (a completed job's)
        self.done_ms: int | None = None
        self.done_seq: int | None = None
        self.done_commit: str | None = None
        self.result: bytes | None = None
        self._enc: bytes | None = None  # the line's bytes, cached (codec, lines and lifecycle only)

    @property
    def last_error(self) -> str | None:
        """The newest failure's error text (None if it gave none, or the job never
        failed): its history's last entry, so the two never disagree."""
        errors = self.errors
        return (errors[-1].text or None) if errors else None

    def errors_view(self) -> list[dict[str, Any]]:
        """The error history as the job views show it, oldest first:
        ``{"attempt", "failed_at", "error"}`` each (a failure without text: ``""``)."""
        return [{"attempt": attempt, "failed_at": timefmt.fmt(failed_ms), "error": text}
                for attempt, failed_ms, text in self.errors]

    @property
    def lease_worker(self) -> str:
        """The worker holding the lease (its record's while claimed)."""
        rec = self.rec
        return self._lease_worker if rec is None else rec.worker

    @lease_worker.setter
    def lease_worker(self, worker: str) -> None:
        self._lease_worker = worker

    @property
    def lease_ms(self) -> int:
        """The lease's length in ms (its record's while claimed)."""
        rec = self.rec
        return self._lease_ms if rec is None else rec.lease_ms

    @lease_ms.setter
    def lease_ms(self, ms: int) -> None:
        self._lease_ms = ms

    @property
    def lease_expires_ms(self) -> int:
        """When the lease expires, ms since the epoch (its record's while claimed)."""
        rec = self.rec
        return self._lease_expires_ms if rec is None else rec.expires_ms

    @lease_expires_ms.setter
    def lease_expires_ms(self, ms: int) -> None:
        self._lease_expires_ms = ms

    @property
    def lease_heartbeat_ms(self) -> int:
        """When the lease was last renewed, ms since the epoch (its record's while claimed)."""
        rec = self.rec
        return self._lease_heartbeat_ms if rec is None else rec.heartbeat_ms

    @lease_heartbeat_ms.setter
    def lease_heartbeat_ms(self, ms: int) -> None:
        self._lease_heartbeat_ms = ms

    def lease_numbers(self) -> tuple[str, int, int, int]:
        """The lease's worker, length (ms), expiry and heartbeat (ms since the
        epoch), its record's while claimed: what the encoders read, in one call
        (the four properties cost a completed job four calls on the cycle rows
        of ``bench/broker_bench.py``). Meaningless while ``lease_token`` is None."""
        rec = self.rec
        if rec is None:
            return (self._lease_worker, self._lease_ms, self._lease_expires_ms,
                    self._lease_heartbeat_ms)
        return rec.worker, rec.lease_ms, rec.expires_ms, rec.heartbeat_ms

    def unlink(self) -> None:
        """Copy the record's lease into the job's own fields and stop reading
        through it (the job leaves its claim; a completed job keeps the lease)."""
        rec = self.rec
        if rec is not None:
            self._lease_worker, self._lease_ms = rec.worker, rec.lease_ms
            self._lease_expires_ms, self._lease_heartbeat_ms = rec.expires_ms, rec.heartbeat_ms
            self.rec = None

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
        self.rec = None
        if lease is None:
            self.lease_token = None
            self._lease_worker = ""
            self._lease_ms = self._lease_expires_ms = self._lease_heartbeat_ms = 0
        else:
            (self.lease_token, self._lease_worker, self._lease_ms, self._lease_expires_ms,
             self._lease_heartbeat_ms) = lease

    @property
    def id(self) -> str:
        """``j`` and the seq, zero-padded (made when asked: a million pending
        jobs need no million id strings)."""
        return job_id_for(self.seq)

    def to_dict(self) -> dict[str, Any]:
        """The job as the job views show it (payload as an orjson fragment): its
        line's fields, with its error history as ``errors`` (:meth:`errors_view`;
        the line spells it compactly: :func:`broker.model.job_lines.stored_dict`)."""
        out: dict[str, Any] = {
            "id": self.id,
            "seq": self.seq,
            "status": self.status,
            "priority": self.priority,
            "run_at": timefmt.fmt(self.run_at_ms),
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "created_at": timefmt.fmt(self.created_ms),
        }
        if self.group is not None:  # (before the payload: see broker.model.job_lines)
            out["group"] = self.group
        out["payload"] = orjson.Fragment(self.payload)
        if self.key is not None:
            out["key"] = self.key
        if self.last_error is not None:
            out["last_error"] = self.last_error
        if self.errors:
            out["errors"] = self.errors_view()
        lease = self.lease
        if lease is not None:
            out["lease"] = {
                "token": lease.token,
                "worker": lease.worker,
                "lease_s": lease.lease_ms / 1000,
                "expires_at": timefmt.fmt(lease.expires_ms),
                "heartbeat_at": timefmt.fmt(lease.heartbeat_ms),
            }
        if self.cancel_ms is not None:
            out["cancel_requested_at"] = timefmt.fmt(self.cancel_ms)
        if self.done_ms is not None:
            cancelled = self.status == CANCELLED
            out["cancelled_at" if cancelled else "completed_at"] = timefmt.fmt(self.done_ms)
            out["commit_seq"] = self.done_seq
            out["commit"] = self.done_commit
            if not cancelled:
                out["result"] = orjson.Fragment(b"null" if self.result is None else self.result)
        return out

    def size_estimate(self) -> int:
        """Rough bytes of the job's line (payload, result, error history:
        :func:`errors_bytes`, and :data:`JOB_OVERHEAD_BYTES`). A change of the
        history while the job is in a state changes this: the caller keeps
        the state's estimate (``transitions._settle_failure``)."""
        size = len(self.payload) + JOB_OVERHEAD_BYTES + len(self.result or b"")
        return size + errors_bytes(self.errors) if self.errors else size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Job):
            return NotImplemented
        return self.to_plain() == other.to_plain()

    __hash__ = None  # type: ignore[assignment]

    def to_plain(self) -> dict[str, Any]:
        """Like :meth:`to_dict` with the payload decoded (for comparisons and APIs)."""
        out = self.to_dict()
        out["payload"] = wire.loads(self.payload)  # (numbers exact)
        if "result" in out:
            out["result"] = wire.loads(self.result or b"null")
        return out

    def __repr__(self) -> str:
        return f"Job({self.id}, {self.status}, attempts={self.attempts})"


