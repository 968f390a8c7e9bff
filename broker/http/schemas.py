"""The HTTP API's request and response bodies as pydantic models.

These models are the one source of the OpenAPI document (:mod:`broker.http.openapi`)
and state every bound by its name in :mod:`broker.limits`. The hot routes (push,
claim, heartbeat, complete, fail, stage, publish) are not validated with them:
the hand parsers in :mod:`broker.http.parsers` do that, several times faster
(``bench/parse_bench.py``), and ``tests/unit/broker/http/test_schemas.py`` holds the two
equal (same bodies accepted, same values) on generated inputs. The other routes'
bodies (create, purge, redrive, cancel, pause, resume) are validated with their model
by :class:`broker.http.app.App`, and :func:`problem` words a refusal.

Request models are strict (``"5"`` is not a number, ``true`` is not ``1``) and
refuse fields they do not know, as the parsers do; an optional field sent as
``null`` takes its default. Response models forbid unknown fields, so a test
that validates real answers with them notices an undocumented field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from broker.errors import shown
from broker.limits import (
    DEFAULT_LEASE_S,
    ERRORS_KEPT,
    MAX_ATTEMPTS,
    MAX_CLAIM_JOBS,
    MAX_DELAY_S,
    MAX_ERROR_CHARS,
    MAX_GROUP_CHARS,
    MAX_ITEMS,
    MAX_JOB_ID_CHARS,
    MAX_KEY_CHARS,
    MAX_LEASE_S,
    MAX_ONCE_CHARS,
    MAX_PAGE_JOBS,
    MAX_PREFIX_CHARS,
    MAX_PRIORITY,
    MAX_TOKEN_CHARS,
    MAX_WAIT_S,
    MAX_WORKER_CHARS,
    MAX_WRITE_ID_CHARS,
    MIN_LEASE_S,
    SETTING_LIMITS,
)
from broker.model.checks import check_depth

Token = Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)]
Lease = Annotated[float | None, Field(ge=MIN_LEASE_S, le=MAX_LEASE_S,
                                      description="lease in seconds (null: the default)")]


def _storable(value: Any) -> Any:
    """A payload or result as the broker stores it: JSON of at most MAX_DEPTH levels
    (the parsers' own check, so the two agree)."""
    check_depth(orjson.dumps(value), "value")
    return value


def problem(exc: ValidationError) -> str:
    """A request model's refusal as one line: the first error's field and what is
    wrong (``field 'settings.max_attempts': Input should be a valid integer``).
    Never the value given; a field name taken from the body is cut short
    (:func:`broker.errors.shown`)."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    if not errors:
        return "invalid request body"
    first = errors[0]
    msg = {"extra_forbidden": "unknown field", "model_type": "must be a JSON object",
           "dict_type": "must be a JSON object"}.get(
        first["type"], first["msg"].removeprefix("Value error, ")[:200])
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
    where = f"field {shown(loc[1:])}" if loc else "request body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if not loc and first["type"] not in ("model_type", "dict_type"):
        return msg + more  # a rule over the whole body (see _one_of)
    return f"{where}: {msg}{more}"


class Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        if value is None:
            field = cls.model_fields[info.field_name]
            return None if field.is_required() else field.get_default(call_default_factory=True)
        return value


class NewJob(Request):
    """One job to push."""

    payload: Annotated[Any, AfterValidator(_storable)] = Field(
        description="the job: any JSON value")
    priority: Annotated[int | None, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0
    delay_s: Annotated[float | None, Field(ge=0, le=MAX_DELAY_S)] = 0.0
    max_attempts: Annotated[int | None, Field(ge=1, le=MAX_ATTEMPTS)] = None
    key: Annotated[str | None, Field(min_length=1, max_length=MAX_KEY_CHARS,
                                     description="idempotency key of the job")] = None
    group: Annotated[str | None, Field(
        min_length=1, max_length=MAX_GROUP_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$",
        description="the job's group (null: none); shown wherever the job is. Groups "
                    "have no effect on claims yet")] = None


class PushRequest(Request):
    jobs: Annotated[list[NewJob], Field(min_length=1, max_length=MAX_ITEMS)]


class ClaimRequest(Request):
    worker: Annotated[str, Field(min_length=1, max_length=MAX_WORKER_CHARS)]
    max_jobs: Annotated[int | None, Field(ge=1, le=MAX_CLAIM_JOBS)] = 1
    lease_s: Lease = DEFAULT_LEASE_S
    wait_s: Annotated[float | None, Field(
        ge=0, le=MAX_WAIT_S, description="long-poll for this many seconds, or until the "
        "client disconnects (then any jobs claimed go back to pending, attempt not counted)")
    ] = 0.0
    wait_for_queue: bool | None = Field(
        False, description="a queue that does not exist yet answers no jobs (after waiting "
        "wait_s for it to be created) instead of 404 unknown_queue")


class HeartbeatRequest(Request):
    tokens: Annotated[list[Token], Field(min_length=1, max_length=MAX_ITEMS)]
    lease_s: Lease = DEFAULT_LEASE_S


class CompleteItem(Request):
    token: Token
    result: Annotated[Any, AfterValidator(_storable)] = Field(
        None, description="stored with the job: any JSON value")


class CompleteRequest(Request):
    items: Annotated[list[CompleteItem], Field(min_length=1, max_length=MAX_ITEMS)]


class FailItem(Request):
    token: Token
    error: str = ""
    retry_in_s: Annotated[float | None, Field(
        ge=0, le=MAX_DELAY_S, description="retry after this many seconds "
                                          "(null: the queue's backoff)")] = None


class FailRequest(Request):
    items: Annotated[list[FailItem], Field(min_length=1, max_length=MAX_ITEMS)]


class StageHeader(Request):
    """The first line of a stage body."""

    write_id: Annotated[str, Field(min_length=1, max_length=MAX_WRITE_ID_CHARS)]


class PublishRequest(Request):
    prefix: Annotated[str, Field(min_length=1, max_length=MAX_PREFIX_CHARS)]
    keep: list[str] = Field(default_factory=list, description="write ids to publish")
    once: Annotated[str | None, Field(min_length=1, max_length=MAX_ONCE_CHARS)] = None


def _one_of(listed: Any, everything: bool | None, name: str) -> None:
    """Exactly one of the list ``name`` and ``all``: "everything" is never implied."""
    if (listed is None) == (everything is None):
        raise ValueError(f"give either '{name}' (a non-empty list) or \"all\": true" +
                         (", not both" if listed is not None else ""))


JobId = Annotated[str, Field(min_length=1, max_length=MAX_JOB_ID_CHARS)]
def _true(value: bool | None) -> bool | None:
    if value is False:
        raise ValueError("must be true, or left out")
    return value


Everything = Annotated[bool | None, AfterValidator(_true),
                       Field(description="true: act on every one (false is refused)")]


class RedriveRequest(Request):
    """Which dead jobs to return to pending: ``ids``, or ``"all": true``."""

    ids: Annotated[list[JobId] | None, Field(min_length=1, max_length=MAX_ITEMS,
                                             description="dead jobs to return")] = None
    all: Everything = None

    @model_validator(mode="after")
    def _ids_or_all(self) -> RedriveRequest:
        _one_of(self.ids, self.all, "ids")
        return self


class PurgeRequest(Request):
    """Which jobs to delete: those in ``statuses``, or ``"all": true`` (every pending
    and dead job; claimed jobs stay with their workers unless listed)."""

    statuses: Annotated[list[Literal["pending", "claimed", "dead"]] | None, Field(
        min_length=1, max_length=3, description="delete the jobs in these statuses")] = None
    all: Everything = None

    @model_validator(mode="after")
    def _statuses_or_all(self) -> PurgeRequest:
        _one_of(self.statuses, self.all, "statuses")
        return self


class CancelRequest(Request):
    """The jobs to cancel, by id."""

    ids: Annotated[list[JobId], Field(min_length=1, max_length=MAX_ITEMS,
                                      description="jobs to cancel")]


class NoBody(Request):
    """No fields: an empty body or ``{}``."""


#: The group settings a queue may set (docs/operations.md, "Job groups").
GROUP_SETTING_TEXTS = {
    "group_limit": "null (unlimited, the default) or an int 0..1,000,000: the most jobs of "
                   "one group claimed at once (0: none)",
    "group_limits": "an object {group: int 0..1,000,000 or null}: per-group overrides of "
                    "group_limit (replaced whole)",
    "group_weights": "an object {group: int 1..1,000}: turns per round of a group (default 1; "
                     "replaced whole)",
    "group_order": '"fair" (the default: groups in turn) or "fifo" (one claimed job a group, '
                   "its jobs claimed in push order; refused with a group limit above 1)",
    "group_dead": '"skip" (the default: a dead job leaves its fifo group\'s order) or "hold" '
                  "(a fifo group stops while it has a dead job); ignored in fair order",
    "group_rate_per_s": "a number, 0 or 0.001..1,000,000: jobs a second each group may be "
                        "claimed at (a token bucket per group; 0, the default: no per-group "
                        "rate)",
    "group_burst": "an int 0..10,000,000: a group's bucket size (0, the default: one "
                   "second's worth, at least 1)",
}


def _settings_model() -> type[BaseModel]:
    fields: dict[str, Any] = {
        name: (Annotated[kind | None, Field(ge=lo, le=hi)], None)
        for name, (kind, lo, hi) in SETTING_LIMITS.items()}
    # The group settings are checked whole by the broker (broker.model.groups.settings:
    # one place for their rules); null sets one back to its default.
    fields.update({name: (Annotated[Any, Field(description=text)], None)
                   for name, text in GROUP_SETTING_TEXTS.items()})
    return create_model("QueueSettings", __config__=ConfigDict(
        strict=True, extra="forbid", allow_inf_nan=False), **fields)


QueueSettings = _settings_model()


class CreateRequest(Request):
    settings: QueueSettings = Field(  # type: ignore[valid-type]
        default_factory=QueueSettings, description="settings to change; the rest keep theirs")


class JobsQuery(BaseModel):
    """The query of ``GET .../jobs``."""

    status: str | None = Field(None, description="pending, claimed, dead, completed or "
                               "cancelled")
    limit: int = Field(100, description=f"jobs a page holds at most (1..{MAX_PAGE_JOBS})")
    after: str | None = Field(None, description="the last job id of the previous page "
                              "(its next_after)")
    tokens: bool = Field(False, description="show each lease's token (usable: it completes, "
                         "fails or extends the job); without it a lease shows its worker "
                         "and times only")


# -- responses -------------------------------------------------------------------

class Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(Response):
    error: str
    code: str
    url: str | None = Field(None, description="the owner's URL (not_the_broker)")
    results: list[ItemResult] | None = Field(None, description="per token (stale_token)")
    retry_after_s: int | None = Field(None, description="whole seconds to wait, as the "
                                      "Retry-After header says (too_many_requests)")


class ItemResult(Response):
    token: str
    ok: bool
    reason: str | None
    status: str | None = None


class Ids(Response):
    ids: list[str]


class ClaimedJobBody(Response):
    id: str
    payload: Any
    token: str
    attempt: int
    lease_expires_at: str = Field(json_schema_extra={"format": "date-time"})
    group: str | None = Field(None, description="the job's group (absent: none)")


class Claimed(Response):
    jobs: list[ClaimedJobBody]


class Results(Response):
    results: list[ItemResult]


class Staged(Response):
    staged: int


class Published(Response):
    published: int
    discarded: int
    duplicate: bool


class CancelAnswer(Response):
    id: str
    ok: bool
    reason: str | None
    status: str = Field(description="cancelled (a pending or delayed job), cancel_requested "
                        "(a claimed job, marked: it ends cancelled at its worker's next call "
                        "about it or when its lease runs out), finished (completed, dead or "
                        "gone: nothing changed), unknown (no such job) or retry (in a "
                        "segment whose lines could not be loaded: nothing changed)")


class CancelResults(Response):
    results: list[CancelAnswer]


class Redriven(Response):
    redriven: int


class Purged(Response):
    purged: int


class Paused(Response):
    paused: bool


class Queues(Response):
    queues: list[str]


class BrokerRecord(Response):
    id: str
    url: str
    lease_s: float
    lease_expires_at: str


class GroupRow(Response):
    group: str | None = Field(description="the group (null: the jobs without one)")
    claimed: int = Field(description="its jobs claimed now")
    pending: int = Field(description="its ready pending jobs (due ones)")
    limit: int | None = Field(description="its limit (null: unlimited)")
    weight: int
    state: str = Field(description="ready, at_limit, empty...")


class GroupHeldBack(Response):
    jobs: int = Field(description="ready pending jobs of groups at their limit")
    groups_at_limit: int


class GroupStats(Response):
    known: int = Field(description="groups with ready pending or claimed jobs")
    claimed: int = Field(description="jobs claimed now, in all groups")
    held_back: GroupHeldBack
    busiest: list[GroupRow] = Field(description="at most 10, by claimed then pending")


class Stats(Response):
    queue: str
    counts: dict[str, int]
    total: int
    paused: bool
    oldest_pending_age_s: float | None
    next_delayed_run_at: str | None
    enqueued_total: int
    completed_total: int
    failed_total: int
    dead_total: int
    reclaimed_total: int
    cancelled_total: int = Field(description="cancels that took: jobs cancelled, and claimed "
                                 "jobs marked")
    cancel_requested: int = Field(description="claimed jobs marked for cancellation")
    in_spills: dict[str, int] = Field(description="jobs in spill objects, off the queue "
                                      "object: {pending (redriven), dead}")
    spill_objects: dict[str, int] = Field(description="the spill objects referenced: "
                                          "{pending (redriven), dead}")
    seq: int
    approx_state_bytes: int
    dedup_keys: int
    receipts: int
    settled_runs: int
    broker: BrokerRecord | None
    settings: dict[str, Any] = Field(description="every setting (numbers; the group "
                                     "settings only when set)")
    claims_per_s: float = Field(description="jobs claimed a second over the last 10 s, on "
                                "this broker (0 when read from the store)")
    claim_limit_per_s: float | None = Field(description="the dispatch rate limit "
                                            "(max_claims_per_s; null: none)")
    claim_burst: int | None = Field(description="its bucket's size (null: no limit)")
    claim_tokens: int | None = Field(description="whole tokens left in the bucket: jobs a "
                                     "claim may take now (null: no limit)")
    served_by_this_broker: bool
    groups: GroupStats | None = Field(None, description="only while the queue uses job "
                                      "groups (a group setting, or grouped jobs)")
    completed_per_min: float | None = Field(None, description="jobs completed a minute over "
                                            "the last minute, on the broker serving the "
                                            "queue (null elsewhere, and in its first second)")
    state_bytes: int | None = None
    commits: int | None = None
    conflicts: int | None = None
    unknown_outcomes: int | None = None
    last_commit_ms: float | None = None
    fault: str | None = None
    archive_writes_pending: int | None = None
    archive_error: str | None = None


class JobsPage(Response):
    """A page is full (limit jobs) or the last: a page shorter than limit is the
    last one. A broker that does not own the queue reads it from storage, and
    answers 503 ``broker_unavailable`` (retryable) if the owner took and
    deleted segments under three reads of a page in a row."""

    jobs: list[dict[str, Any]] = Field(description="in enqueue order, each as GET jobs/{id} "
                                       "shows it (errors: [] for a job that never failed)")
    next_after: str | None = Field(description="the page's last job id when it is full (pass "
                                   "it as after for the next page, which may be empty); "
                                   "null: no more jobs")


class JobLease(Response):
    worker: str
    lease_s: float
    expires_at: str
    heartbeat_at: str


class JobError(Response):
    attempt: int = Field(description="the attempt that failed (1: the first claim)")
    failed_at: str = Field(description="when its commit failed it (a line written before "
                           "error histories: when that head was written, no earlier)")
    error: str = Field(description=f"its error text, its last {MAX_ERROR_CHARS:,} characters "
                       "(empty: it gave none)")


class JobFound(Response):
    """One job, wherever it is (``location``): the queue object (pending, claimed,
    dead, or finished and awaiting its archive object), a segment object
    (pending), a spill object (dead, off the queue object) or the archive
    (completed or cancelled). Never a lease token."""

    id: str
    seq: int
    status: str = Field(description="pending, claimed, dead, completed or cancelled")
    priority: int
    run_at: str
    attempts: int
    max_attempts: int
    created_at: str
    group: str | None = Field(None, description="the job's group (absent: none)")
    payload: Any
    location: Literal["queue", "segment", "spill", "archive"]
    key: str | None = Field(None, description="its idempotency key (not kept in the archive)")
    last_error: str | None = None
    errors: list[JobError] | None = Field(
        None, description=f"its error history, oldest first: the first failure and the "
        f"{ERRORS_KEPT - 1} latest ([]: it never failed; null: an archived job's, whose "
        "archive line keeps last_error alone)")
    lease: JobLease | None = Field(None, description="a claimed job's lease, without its token")
    cancel_requested_at: str | None = None
    completed_at: str | None = None
    cancelled_at: str | None = None
    result: Any = Field(None, description="a completed job's result")
    worker: str | None = Field(None, description="who finished it (archive)")
    commit_seq: int | None = Field(None, description="the queue object version that "
                                   "recorded its end")
    commit: str | None = None
    archive_key: str | None = Field(None, description="the archive object it is in (or, "
                                    "awaiting it, will be)")


class QueueHealth(Response):
    role: str = Field(description="owner or standby")
    fault: str | None = None
    archive_writes_pending: int | None = None
    archive_error: str | None = None


class Health(Response):
    """``ok`` alone without a valid token; the rest for an authorised caller."""

    ok: bool
    broker: str | None = None
    url: str | None = None
    stopping: bool | None = None
    faulted_queues: list[str] | None = None
    queues: dict[str, QueueHealth] | None = None


ErrorBody.model_rebuild()
