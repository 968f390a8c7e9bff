"""The queue's operations and their results, as plain values.

:func:`broker.model.transitions.apply` takes one of these and returns a
:class:`Result`; the HTTP layer builds them from requests and the client reads
:class:`ItemResult` back. Plain data only (no rules, no I/O), so importing this
module is cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker.errors import OsqueueError
from broker.model.columns import Columns
from broker.model.job import DEAD, PENDING
from broker.model.state import SegmentRef
from broker.wire import ItemResult

# -- operations ----------------------------------------------------------------


class NewJob(NamedTuple):
    """A job to push. ``payload`` is its JSON encoding (bytes).

    A NamedTuple, not a dataclass: pushes make millions of these, and a tuple
    is several times cheaper to build.
    """

    payload: bytes
    priority: int = 0
    delay_ms: int = 0
    max_attempts: int | None = None
    key: str | None = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class Push:
    """Enqueue jobs.

    ``request``: the caller's key for this call; a repeat while its receipt
    is kept answers the same ids and creates nothing. ``digest``: of the jobs
    (:func:`broker.model.receipts.push_digest`), kept in the receipt: a push
    under a remembered key with another digest is refused (None: not checked,
    as a receipt written before digests). ``once``: a key in the
    idempotency window making the push happen at most once: a repeat creates
    nothing and sets ``Result.duplicate`` (Spark publishes staged writes this
    way). ``missing``: staged chunks of a publish that could not be found;
    unless ``once`` shows the publish happened already, the push is refused.
    """

    jobs: tuple[NewJob, ...]
    once: str | None = None
    request: str | None = None
    missing: int = 0
    floor: int | None = None  # the caller's calls below this number were answered
    refs: tuple[SegmentRef, ...] = ()  # as for PushPayloads
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class PushPayloads:
    """:class:`Push` for jobs with default options, given as their payloads'
    JSON bytes: the bulk form (a Spark write publishes a million at once).

    ``refs``: jobs pushed by reference, besides ``payloads``: segment objects
    already written with them, over seqs a :class:`Reserve` handed out (see
    :func:`broker.model.segments.claims.attach_refs`)."""

    payloads: tuple[bytes, ...]
    once: str | None = None
    request: str | None = None
    missing: int = 0
    floor: int | None = None
    refs: tuple[SegmentRef, ...] = ()
    digest: str | None = None  # of the jobs, ``refs``' too when given (as for Push)


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hand out ``count`` seqs for a push by reference, whose largest payload is
    ``largest`` bytes (refused as a push of it would be): the broker writes
    their segment objects, then pushes the refs (:class:`PushPayloads`).
    Answers the seqs (``ids``) and, as ``view``, the max_attempts their jobs
    get: the queue's in the version the seqs land with."""

    count: int
    largest: int


def push_of(jobs: Sequence[NewJob | bytes], once: str | None = None,
            request: str | None = None, missing: int = 0,
            floor: int | None = None, refs: tuple[SegmentRef, ...] = (),
            digest: str | None = None) -> Push | PushPayloads:
    """The push of ``jobs`` (bare bytes: a payload with default options) and of
    the segments ``refs``: the bulk :class:`PushPayloads` when every job is bare."""
    payloads = tuple(job for job in jobs if isinstance(job, bytes))
    if len(payloads) == len(jobs):
        return PushPayloads(payloads, once, request, missing, floor, refs, digest)
    return Push(tuple(NewJob(job) if isinstance(job, bytes) else job for job in jobs), once,
                request, missing, floor, refs, digest)


@dataclass(frozen=True, slots=True)
class Claim:
    """Claim up to ``max_jobs``. ``request``: the caller's key for this call; a
    repeat while its receipt is kept hands back the jobs the first call
    claimed that are still held under its leases, and claims nothing new.
    ``floor``: the caller's calls numbered below it were answered (their
    receipts can go, see :mod:`broker.model.receipts`)."""

    worker: str
    max_jobs: int = 1
    lease_ms: int = 30_000
    request: str | None = None
    floor: int | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    tokens: tuple[str, ...]
    lease_ms: int = 30_000


# Per-job items are NamedTuples, like NewJob: a frozen dataclass costs several times
# more to build. The hot calls keep thousands of them column-wise (broker.model.columns).
class CompleteItem(NamedTuple):
    token: str
    result: bytes | None = None  # JSON bytes


class CompleteItems(Columns[CompleteItem]):
    """The items of one complete, column-wise (see :mod:`broker.model.columns`): what
    the HTTP layer parses a complete's body into."""

    __slots__ = ()
    row_type = CompleteItem

    @property
    def tokens(self) -> list[str]:
        return self.columns[0]

    @property
    def results(self) -> list[bytes | None]:
        return self.columns[1]


@dataclass(frozen=True, slots=True)
class Complete:
    items: Sequence[CompleteItem]  # a tuple, or CompleteItems


class FailItem(NamedTuple):
    token: str
    error: str = ""
    retry_in_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    items: tuple[FailItem, ...]


@dataclass(frozen=True, slots=True)
class Release:
    """Hand back, unworked, the jobs a claim leased to a caller that went away
    before hearing the answer: each job still held under one of ``tokens``
    goes back to pending where it stood (no backoff, no error, the attempt not
    counted) and the token is stale from then on. A job no longer held under
    its token (expired, reclaimed, claimed again) is left alone. ``request``:
    the claim's request key; if a repeat of that claim was answered these
    jobs (see :func:`broker.model.transitions.apply`), nothing is released."""

    tokens: tuple[str, ...]
    request: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel jobs by id (see :mod:`broker.model.cancels`): a pending or delayed
    job ends cancelled at once, a claimed one is marked and ends cancelled at
    its worker's next call about it. Answers one :class:`~broker.wire.CancelAnswer` per id,
    in order, as ``Result.view``; an unknown or finished job changes nothing."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Return expired leases to pending (or dead); trim the key and receipt windows."""


@dataclass(frozen=True, slots=True)
class DropArchived:
    """Remove the completed jobs of the commits ``seqs``: their archive objects
    are written."""

    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Redrive:
    """Return dead jobs to pending (``ids`` None: every dead job). ``request`` and
    ``floor`` as for :class:`Claim`: a repeat answers the first count."""

    ids: tuple[str, ...] | None = None
    request: str | None = None
    floor: int | None = None


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete jobs by status. ``request`` and ``floor`` as for :class:`Claim`: a
    repeat answers the first count and deletes nothing more."""

    statuses: tuple[str, ...] = (PENDING, DEAD)
    request: str | None = None
    floor: int | None = None


@dataclass(frozen=True, slots=True)
class ReadStats:
    """Stats of the committed queue, read in the commit loop's order (a read
    never sees a batch whose write has not landed)."""


@dataclass(frozen=True, slots=True)
class ReadJobs:
    """A page of jobs (see :func:`broker.model.views.list_jobs`), read in the commit loop's order;
    ``raw``: payloads as their stored bytes. A lease shows its worker and
    times; its token only with ``tokens`` (as a client would hold it, see
    :mod:`broker.model.tokens`)."""

    status: str | None = None
    limit: int = 100
    after: str | None = None
    raw: bool = False
    tokens: bool = False


@dataclass(frozen=True, slots=True)
class JobsView:
    """What a :class:`ReadJobs` reads: ``rows``, the page's jobs as dicts, and
    ``resume_after``: None if the page is complete (``limit`` rows, or the
    last of the queue), else the seq to read on after: the page was cut short
    before a segment line the broker had not loaded, more jobs follow, and
    every job up to that seq is in ``rows``."""

    rows: list[dict[str, Any]]
    resume_after: int | None = None


@dataclass(frozen=True, slots=True)
class Inspect:
    """A read for the dashboard: the view of :mod:`broker.model.browse` named
    ``view``, with ``args``, of the committed queue (read in the commit loop's
    order, as :class:`ReadStats`); changes nothing."""

    view: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class SetPaused:
    paused: bool


@dataclass(frozen=True, slots=True)
class Configure:
    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Become the queue's broker; every claimed job gets a fresh lease on our clock."""

    broker_id: str
    url: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class RenewBroker:
    broker_id: str
    url: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class ClearBroker:
    broker_id: str


Op = (
    Push | PushPayloads | Claim | Heartbeat | Complete | Fail | Release | Reclaim | DropArchived
    | Redrive | Purge | SetPaused | Configure | TakeOver | RenewBroker | ClearBroker | ReadStats
    | ReadJobs | Reserve | Inspect | Cancel
)

# -- results -------------------------------------------------------------------


class LeasedJob(NamedTuple):
    """A job a claim handed out, as the broker answers it: the payload's JSON
    bytes and the lease's expiry in ms (the client's :class:`ClaimedJob
    <osqueue_spark.client.ClaimedJob>` is what a worker sees: payload decoded,
    expiry as a time string)."""

    id: str
    payload: bytes
    token: str
    attempt: int
    lease_expires_ms: int


class LeasedJobs(Columns[LeasedJob]):
    """The jobs of one claim, column-wise (see :mod:`broker.model.columns`), and
    ``groups``: the group of each grouped job, by its index (set only when some
    job has one: :func:`groups_of` reads it)."""

    __slots__ = ("groups",)
    row_type = LeasedJob
    groups: dict[int, str]

    @property
    def ids(self) -> list[str]:
        return self.columns[0]

    @property
    def payloads(self) -> list[bytes]:
        return self.columns[1]

    @property
    def tokens(self) -> list[str]:
        return self.columns[2]

    @property
    def attempts(self) -> list[int]:
        return self.columns[3]

    @property
    def lease_expires_ms(self) -> list[int]:
        return self.columns[4]


def groups_of(jobs: Sequence[LeasedJob]) -> dict[int, str]:
    """The groups of a claim's grouped jobs by index (:attr:`LeasedJobs.groups`;
    none for jobs given as a plain list)."""
    return getattr(jobs, "groups", None) or {}


class ItemResults(Columns[ItemResult]):
    """The answers of a heartbeat, complete or fail, one per token in order,
    column-wise (see :mod:`broker.model.columns`)."""

    __slots__ = ()
    row_type = ItemResult

    @property
    def tokens(self) -> list[str]:
        return self.columns[0]

    @property
    def oks(self) -> list[bool]:
        return self.columns[1]

    @property
    def reasons(self) -> list[str | None]:
        return self.columns[2]

    @property
    def statuses(self) -> list[str | None]:
        return self.columns[3]


@dataclass(slots=True)
class Result:
    """What an operation produced. ``changed`` says whether a write is needed."""

    changed: bool = False
    ids: Sequence[str] = field(default_factory=list)
    jobs: Sequence[LeasedJob] = field(default_factory=LeasedJobs)
    items: ItemResults = field(default_factory=ItemResults)
    count: int = 0
    duplicate: bool = False
    replayed: bool = False  # the answer of an earlier call with the same request key
    view: Any = None  # what a read op read; a cancel's answers (list of wire.CancelAnswer)
    error: OsqueueError | None = None  # a refusal that is written (a receipt): raise it
