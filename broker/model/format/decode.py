"""Reading a queue object: its bytes in, a checked :class:`~broker.model.state.QueueState`
out (:func:`decode_state`; :mod:`broker.model.format.codec` writes what this reads).

Every invariant the broker relies on is checked here (ids unique and equal to
their seqs, counters at least the largest seq and lease number in use,
settings and counters typed and in range, times within 1970-9999, leases
where the status needs one, a cancel's fields only on a claimed or cancelled
job and counted in ``counters.cancelled``), and payloads and results are kept as the bytes
they were written as (:class:`LineSpans`). A state object this refuses is
never overwritten: the broker says which object and why.
"""

from __future__ import annotations

import heapq
import json
from bisect import bisect_left
from dataclasses import fields
from typing import Any

import orjson

from broker.errors import CorruptState, ForeignState, InvalidRequest, NewerState
from broker.fields import group as group_name
from broker.limits import (
    BROKER_LEASE_S,
    ERRORS_KEPT,
    MAX_ATTEMPTS,
    MAX_ERROR_CHARS,
    MAX_LEASE_S,
    MAX_PRIORITY,
    MAX_RECORDED_BROKER_LEASE_S,
)
from broker.model.format.claims_format import (
    link,
    link_segments,
    records_from_json,
    records_from_v4,
)
from broker.model.format.codec import reset_blocks
from broker.model.format.segment_format import check_time, ref_from_json
from broker.model.format.spill_refs import refs_from
from broker.model.indexes import SEQ_MASK, rebuild_indexes
from broker.model.job import (
    CANCELLED,
    CLAIMED,
    COMPLETED,
    DEAD,
    NO_ERRORS,
    PENDING,
    STATUSES,
    ErrorEntry,
    Job,
    Lease,
    job_id_for,
)
from broker.model.job_lines import plain_token
from broker.model.receipts import Receipts, fence_of
from broker.model.state import (
    FORMAT,
    LINEAGE,
    VERSION,
    BrokerRecord,
    Counters,
    KeyEntry,
    QueueSettings,
    QueueState,
    SegmentRef,
)
from broker.model.tokens import check_key
from broker.wire import compact


def _count(raw: Any, what: str, hi: int = SEQ_MASK) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= hi:
        raise ValueError(f"{what} must be an integer within [0, {hi}], got {raw!r}")
    return raw


def _text(raw: Any, what: str, *, optional: bool = False) -> str | None:
    if raw is None and optional:
        return None
    if not isinstance(raw, str):
        raise ValueError(f"{what} must be a string, got {raw!r}")
    return raw


def _lease_from(raw: Any, job_id: str) -> Lease:
    if not isinstance(raw, dict):
        raise ValueError(f"job {job_id!r} has a lease that is not an object")
    token = raw.get("token")
    if not isinstance(token, str) or not plain_token(token) or \
            token.rpartition(".")[0] != job_id or fence_of(token) is None:
        raise ValueError(f"lease token {token!r} is not one this broker makes for {job_id!r}")
    lease_s = raw.get("lease_s")
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or \
            not 0 < lease_s <= MAX_LEASE_S:
        raise ValueError(f"job {job_id!r} has lease_s {lease_s!r}; "
                         f"it must be in (0, {MAX_LEASE_S:g}]")
    return Lease(
        token=token,
        worker=str(_text(raw.get("worker"), f"job {job_id!r} lease worker")),
        lease_ms=round(float(lease_s) * 1000),
        expires_ms=check_time(raw.get("expires_at"), f"job {job_id!r} lease expiry"),
        heartbeat_ms=check_time(raw.get("heartbeat_at"), f"job {job_id!r} heartbeat time"),
    )


def _errors_from(raw: dict[str, Any], job_id: str, attempts: int,
                 written_ms: int) -> tuple[ErrorEntry, ...]:
    """A job line's error history (:func:`broker.model.job_lines.errors_field`),
    checked: at most ERRORS_KEPT ``[attempt, failed_at, text]`` entries, each
    text a string of at most MAX_ERROR_CHARS characters but the newest one's,
    null (it is ``last_error``, at most as long, or ``""`` without one). A line without
    ``"errors"`` (a broker before histories wrote it) has its ``last_error``
    alone, failed at its last attempt (the one before, for a claimed or
    completed job; at least 1) and, the line keeping no time, at
    ``written_ms`` (when the head was written: no earlier than the failure).
    ``ValueError`` naming the job otherwise.

    No format version of its own (5, or 6 with groups): a broker from before
    histories reads the fields it knows of a job line and ignores any other,
    so it loads a head with them, and its next write drops them (each job
    keeping its ``last_error``; checked with main ``de634bd``)."""
    last_error = _text(raw.get("last_error"), f"job {job_id!r} last_error", optional=True)
    if last_error is not None and len(last_error) > MAX_ERROR_CHARS:
        # (every broker cuts it so; loaded, a failure would write it into "errors": refused)
        raise ValueError(f"job {job_id!r} last_error must be at most {MAX_ERROR_CHARS} "
                         f"characters, got {len(last_error)}")
    entries = raw.get("errors")
    if entries is None:
        if last_error is None:
            return NO_ERRORS
        # (a claimed or completed job was claimed again since it failed)
        again = raw.get("status") in (CLAIMED, COMPLETED)
        return (ErrorEntry(max(1, attempts - again), written_ms, last_error),)
    if not isinstance(entries, list) or not 0 < len(entries) <= ERRORS_KEPT:
        raise ValueError(f"job {job_id!r} errors must be a list of 1..{ERRORS_KEPT} entries")
    out = []
    for i, entry in enumerate(entries):
        what = f"job {job_id!r} errors[{i}]"
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError(f"{what} must be [attempt, failed_at, text]")
        attempt = _count(entry[0], f"{what} attempt", MAX_ATTEMPTS)
        newest = i == len(entries) - 1
        text = entry[2]
        if newest and text is not None:
            raise ValueError(f"{what} is the newest: its text is last_error's (null here)")
        if not newest and (not isinstance(text, str) or len(text) > MAX_ERROR_CHARS):
            raise ValueError(f"{what} text must be a string of at most "
                             f"{MAX_ERROR_CHARS} characters")
        if attempt < 1:
            raise ValueError(f"{what} attempt must be 1..{MAX_ATTEMPTS}")
        out.append(ErrorEntry(attempt, check_time(entry[1], f"{what} failed_at"),
                              (last_error or "") if newest else text))
    return tuple(out)


def _job_from(raw: Any, spans: LineSpans | None, version: int = VERSION,
              written_ms: int = 0) -> Job:
    if not isinstance(raw, dict):
        raise ValueError("each job must be an object")
    status, job_id = raw.get("status"), raw.get("id")
    seq = _count(raw.get("seq"), f"job {job_id!r} seq")
    # The byte templates and the heap keys rely on these; the broker never
    # writes anything else.
    if seq < 1 or job_id != job_id_for(seq):
        raise ValueError(f"job {job_id!r} has seq {seq}; its id must be {job_id_for(seq)!r}")
    if status not in STATUSES:
        raise ValueError(f"job {job_id!r} has unknown status {status!r}")
    if "payload" not in raw:
        raise ValueError(f"job {job_id!r} has no payload")
    priority = raw.get("priority")
    if isinstance(priority, bool) or not isinstance(priority, int) or \
            not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"job {job_id!r} has priority {priority!r}; "
                         f"it must be an integer within +-{MAX_PRIORITY}")
    max_attempts = _count(raw.get("max_attempts"), f"job {job_id!r} max_attempts", MAX_ATTEMPTS)
    if max_attempts < 1:
        raise ValueError(f"job {job_id!r} has max_attempts {max_attempts}; "
                         f"it must be 1..{MAX_ATTEMPTS}")
    attempts = _count(raw.get("attempts"), f"job {job_id!r} attempts", max_attempts)
    lease = raw.get("lease")
    job = Job(
        seq=seq,
        # (kept in the state: copies, not orjson's 4 KB buffers; see compact)
        payload=compact(spans.payload(raw["payload"]) if spans else orjson.dumps(raw["payload"])),
        status=status,
        priority=priority,
        run_at_ms=check_time(raw.get("run_at"), f"job {job_id!r} run_at"),
        attempts=attempts,
        max_attempts=max_attempts,
        created_ms=check_time(raw.get("created_at"), f"job {job_id!r} created_at"),
        key=_text(raw.get("key"), f"job {job_id!r} key", optional=True),
        lease=_lease_from(lease, job_id) if lease is not None else None,
        errors=_errors_from(raw, job_id, attempts, written_ms),
    )
    if raw.get("group") is not None:  # (null: none, as a push takes it)
        if version < 6:
            raise ValueError(f"job {job_id!r} has a group; groups came in format version 6")
        try:
            job.group = group_name(f"job {job_id!r}", raw["group"])
        except InvalidRequest as exc:
            raise ValueError(str(exc)) from None
    records = version >= 5  # (a claimed line names its claim record, which holds its lease)
    if records and status == CLAIMED:
        if lease is not None or "cancel_requested_at" in raw:
            raise ValueError(f"claimed job {job_id!r} has a lease or cancel_requested_at of "
                             "its own; in format version 5 both are its claim record's")
        job.claim = _count(raw.get("claim"), f"claimed job {job_id!r} claim", 1 << 62)
    elif "claim" in raw:
        raise ValueError(f"job {job_id!r} is {status} but names a claim")
    elif (status in (CLAIMED, COMPLETED) and job.lease is None) or (
            status in (PENDING, DEAD) and job.lease is not None):
        raise ValueError(f"job {job_id!r} is {status} but "
                         + ("has no lease" if job.lease is None else "has a lease"))
    if "cancel_requested_at" in raw:  # (a claimed job marked, or a cancelled one)
        if status not in (CLAIMED, CANCELLED):
            raise ValueError(f"job {job_id!r} is {status} but has cancel_requested_at")
        job.cancel_ms = check_time(raw["cancel_requested_at"],
                                   f"job {job_id!r} cancel_requested_at")
    if status == CANCELLED:
        if job.cancel_ms is None:
            raise ValueError(f"cancelled job {job_id!r} has no cancel_requested_at")
        if "result" in raw or "completed_at" in raw:
            raise ValueError(f"cancelled job {job_id!r} has a result or completed_at")
        job.done_ms = check_time(raw.get("cancelled_at"), f"job {job_id!r} cancelled_at")
        _done_commit(job, raw)
    if status == PENDING and attempts >= job.max_attempts:
        raise ValueError(f"job {job_id!r} is pending with no attempts left")
    if status == COMPLETED:
        job.done_ms = check_time(raw.get("completed_at"), f"job {job_id!r} completed_at")
        _done_commit(job, raw)
        if "result" not in raw:
            raise ValueError(f"completed job {job_id!r} has no result")
        result = spans.result(raw["result"]) if spans else orjson.dumps(raw["result"])
        job.result = None if result == b"null" else compact(result)
    return job


def _done_commit(job: Job, raw: dict[str, Any]) -> None:
    """A completed or cancelled job's commit (``commit_seq``, ``commit``), checked."""
    job.done_seq = _count(raw.get("commit_seq"), f"job {job.id!r} commit_seq")
    job.done_commit = _text(raw.get("commit"), f"job {job.id!r} commit")
    if not plain_token(job.done_commit or ""):
        raise ValueError(f"job {job.id!r} has commit {job.done_commit!r}")


class LineSpans:
    """The verbatim bytes of one line's payload and result (a job line of the
    queue object, or a line of an archive object).

    The broker writes each job on a line of its own with ``"payload":`` as the
    first field whose value can be a structure, and ``"result":`` as the first
    key after the payload that can be one, so their spans are found without a
    second full parse (:meth:`payload` first, then :meth:`result`; either
    raises :class:`NotOurLayout` for a line of another layout). Where the
    bytes equal what orjson would write (nearly always) a comparison confirms
    it; otherwise (big integers, other number spellings, escapes) the
    standard library's scanner finds the exact span.
    """

    __slots__ = ("_end", "_line")

    _scan = json.JSONDecoder().raw_decode

    def __init__(self, line: bytes) -> None:
        self._line = line
        self._end = 0

    def _span(self, marker: bytes, value: Any) -> bytes:
        line = self._line
        at = line.find(marker, self._end)
        if at < 0:
            raise NotOurLayout
        start = at + len(marker)
        try:
            enc = orjson.dumps(value)
        except orjson.JSONEncodeError:  # deeper than orjson writes: scan for it
            enc = b""
        end = start + len(enc)
        if enc and line.startswith(enc, start) and line[end:end + 1] in (b",", b"}"):
            self._end = end
            return enc
        # The value as it was sent, with any white space around it (staged
        # payloads pass through verbatim).
        text = line.decode()
        cut = len(line[:start].decode())
        begin = cut
        while begin < len(text) and text[begin] in _JSON_SPACE:
            begin += 1
        try:
            _, stop = self._scan(text, begin)
        except (ValueError, RecursionError):
            raise NotOurLayout from None
        while stop < len(text) and text[stop] in _JSON_SPACE:
            stop += 1
        raw = text[cut:stop].encode()
        self._end = start + len(raw)
        return raw

    def payload(self, value: Any) -> bytes:
        return self._span(b'"payload":', value)

    def result(self, value: Any) -> bytes:
        return self._span(b'"result":', value)


_JSON_SPACE = " \t\r\n"


class NotOurLayout(Exception):
    """The object's lines are not laid out as the broker writes them."""


def _job_lines(data: bytes, count: int) -> list[bytes] | None:
    """The lines holding the jobs, one each, if the object has the broker's layout."""
    head = data.find(b'\n"jobs":[\n')
    if head < 0 or not count:
        return None
    lines = data[head + 10:].split(b"\n", count)
    if len(lines) <= count:
        return None
    jobs = [line[:-1] if line.endswith(b",") else line for line in lines[:count]]
    if not all(line.startswith(b'{"id":"j') and line.endswith(b"}") for line in jobs):
        return None
    return jobs


def _settings_from(raw: Any) -> QueueSettings:
    if raw is None:
        return QueueSettings()
    if not isinstance(raw, dict):
        raise ValueError("settings must be an object")
    return QueueSettings.from_dict(raw)


def _counters_from(raw: Any) -> Counters:
    if raw is None:
        return Counters()
    if not isinstance(raw, dict):
        raise ValueError("counters must be an object")
    known = {f.name for f in fields(Counters)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown counters {sorted(unknown)}")
    return Counters(**{k: _count(v, f"counter {k}", 1 << 62) for k, v in raw.items()})


def _broker_from(raw: Any) -> BrokerRecord | None:
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise ValueError("broker must be an object or null")
    lease_s = raw.get("lease_s", BROKER_LEASE_S)  # objects before version 3 had none
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or \
            not 0 < lease_s <= MAX_RECORDED_BROKER_LEASE_S:
        raise ValueError(f"broker lease_s must be in (0, {MAX_RECORDED_BROKER_LEASE_S:g}], "
                         f"got {lease_s!r}")
    return BrokerRecord(
        id=str(_text(raw.get("id"), "broker id")),
        url=str(_text(raw.get("url"), "broker url")),
        expires_ms=check_time(raw.get("lease_expires_at"), "broker lease expiry"),
        lease_ms=round(float(lease_s) * 1000),
    )


def decode_state(data: bytes, *, where: str = "queue object") -> QueueState:
    """Parse an object's bytes into a state with its indexes rebuilt.

    Checks every invariant the broker relies on (ids unique and matching their
    seqs, counters at least the largest seq and fence in use, settings,
    counters and times typed and in range, leases where the status needs
    one, segment references in order, disjoint and apart from the head's
    jobs) and keeps payloads and results as their exact bytes. An object
    before version 4 has no ``"segments"``; it loads with none.

    Raises ``CorruptState`` (saying what is wrong) if it is not a well-formed
    queue object, ``ForeignState`` if it carries another format tag and
    ``NewerState`` if its version is newer than this code understands. Never
    returns a partial state.
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
    if isinstance(version, bool) or not isinstance(version, int):
        raise CorruptState(f"{where} has no integer version; refusing to touch it")
    if version > VERSION:
        raise NewerState(
            f"{where} is format version {version}; this osqueue understands up to {VERSION}. "
            "Upgrade osqueue before running it on this queue"
        )
    try:
        state = _decode_fields(raw, data)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptState(f"{where} is malformed ({type(exc).__name__}: {exc}); "
                           "refusing to touch it") from None
    rebuild_indexes(state)
    reset_blocks(state)
    return state


def _decode_fields(raw: dict[str, Any], data: bytes) -> QueueState:
    lineage = raw.get("lineage") or []
    if not isinstance(lineage, list) or not all(isinstance(c, str) for c in lineage):
        raise ValueError("lineage must be a list of commit ids")
    state = QueueState(
        seq=_count(raw.get("seq"), "seq", 1 << 62),
        writer=_text(raw.get("writer"), "writer", optional=True),
        commit=_text(raw.get("commit"), "commit", optional=True),
        lineage=list(lineage[-LINEAGE:]),
        updated_ms=check_time(raw.get("updated_at"), "updated_at"),
        broker=_broker_from(raw.get("broker")),
        paused=bool(raw.get("paused", False)),
        settings=_settings_from(raw.get("settings")),
        counters=_counters_from(raw.get("counters")),
    )
    jobs = raw.get("jobs")
    if not isinstance(jobs, list):
        raise ValueError("jobs must be a list")
    version = raw["version"]
    _add_jobs(state, jobs, _job_lines(data, len(jobs)), version)
    _claims_from(raw, state, version)
    top_fence = cancels = 0
    for job in state.jobs.values():
        if job.lease is not None:
            top_fence = max(top_fence, job.lease.fence)
        if job.cancel_ms is not None:
            cancels += 1
    for record in state.claim_records.values():  # (settled positions' fences too)
        top_fence = max(top_fence, record.fence + record.n - 1)
    keys = raw.get("keys") or []
    if not isinstance(keys, list):
        raise ValueError("keys must be a list")
    for entry in keys:
        if not isinstance(entry, list) or len(entry) != 3 or not all(
                isinstance(v, str) for v in entry):
            raise ValueError(f"key entry {entry!r} is not [key, job id, time]")
        key, job_id, at = entry
        entry_ = KeyEntry(job_id, check_time(at, f"key {key!r} time"))
        if job_id == "(published)":  # a publish key, kept with the keys before version 3
            state.once[key] = entry_
        else:
            state.keys[key] = entry_
    once = raw.get("once") or []
    if not isinstance(once, list):
        raise ValueError("once must be a list")
    for entry in once:
        if not isinstance(entry, list) or len(entry) != 2 or not all(
                isinstance(v, str) for v in entry):
            raise ValueError(f"once entry {entry!r} is not [key, time]")
        state.once[entry[0]] = KeyEntry("(published)", check_time(entry[1], f"key {entry[0]!r}"))
    state.receipts = Receipts.decode(raw.get("receipts"))
    if "token_key" in raw:  # (an object from before tokens were tagged has none)
        state.token_key = check_key(raw["token_key"])
    if "untagged_fences" in raw:  # (leases granted before the key: see broker.model.tokens)
        state.untagged_fences = _count(raw["untagged_fences"], "untagged_fences", 1 << 62)
        if state.untagged_fences and not state.token_key:
            raise ValueError("untagged_fences is set but token_key is missing")
    top_seq = max(state.jobs, default=0)
    top_seq = max(top_seq, state.receipts.max_seq())
    top_fence = max(top_fence, state.receipts.max_fence())
    counters = state.counters
    if counters.enqueued < top_seq:
        raise ValueError(f"counters.enqueued is {counters.enqueued} but job seq {top_seq} "
                         "exists: new jobs would reuse ids")
    if counters.fence < state.untagged_fences:
        raise ValueError(f"untagged_fences is {state.untagged_fences} but counters.fence is "
                         f"{counters.fence}: leases not yet granted would be taken untagged")
    if counters.fence < top_fence:
        raise ValueError(f"counters.fence is {counters.fence} but lease number {top_fence} "
                         "exists: new leases would reuse tokens")
    if counters.reserved > counters.enqueued:
        raise ValueError(f"counters.reserved is {counters.reserved}, above counters.enqueued "
                         f"{counters.enqueued}")
    if counters.cancelled < cancels:  # (what makes brokers from before cancel refuse it)
        raise ValueError(f"counters.cancelled is {counters.cancelled} but {cancels} job(s) "
                         "are cancelled or marked for cancellation")
    unknown = set(raw) - _TOP_FIELDS
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    state.segment_refs = _refs_from(raw, state)
    link_segments(state)  # (the records' segment parts, now that the refs are read)
    return state


_TOP_FIELDS = frozenset({"format", "version", "seq", "writer", "commit", "lineage", "updated_at",
                         "broker", "paused", "settings", "counters", "segments", "claims",
                         "spills", "jobs", "keys", "once", "receipts", "token_key",
                         "untagged_fences"})


def _claims_from(raw: dict[str, Any], state: QueueState, version: int) -> None:
    """The claim records (``"claims"``, version 5), checked and tied to the
    claimed lines, or, for an older object, made from its claimed lines (see
    :mod:`broker.model.format.claims_format`), and the references to spill
    objects (``"spills"``, :func:`broker.model.format.spill_refs.refs_from`)."""
    if version < 5:
        if "claims" in raw or "spills" in raw:
            raise ValueError(f"claims or spills in an object of format version {version}")
        records_from_v4(state)
        return
    for name in ("claims", "spills"):
        if name not in raw:
            raise ValueError(f"{name} is missing (format version 5 always has it)")
    state.spill_refs = list(refs_from(raw["spills"]))
    link(state, records_from_json(raw["claims"], state.counters.fence))


def _refs_from(raw: dict[str, Any], state: QueueState) -> list[SegmentRef]:
    """The segment references (``"segments"``), checked against each other and
    the state: ascending first seqs with disjoint ranges, every seq within
    ``1..counters.enqueued``, and no job of the head with a seq a segment
    still holds (its untaken part; a taken job moved into the head). An object
    before version 4 has none; one of version 4 must have the field."""
    if "segments" not in raw:
        if raw["version"] >= 4:
            raise ValueError("segments is missing (format version 4 always has it)")
        return []
    items = raw["segments"]
    if not isinstance(items, list):
        raise ValueError("segments must be a list")
    grouped_ok = raw["version"] >= 6  # (grouped refs came with groups, in version 6)
    refs = [ref_from_json(item, f"segments[{i}]", grouped_ok=grouped_ok)
            for i, item in enumerate(items)]
    if not refs:
        return refs
    enqueued, end = state.counters.enqueued, 1
    for i, ref in enumerate(refs):
        if ref.first_seq < end:
            raise ValueError(f"segments[{i}] ({ref.key}) starts at seq {ref.first_seq}, "
                             f"before the end of segments[{i - 1}]: the references must be "
                             "in ascending first_seq with disjoint seq ranges")
        end = ref.first_seq + ref.count
        if end - 1 > enqueued:
            raise ValueError(f"segments[{i}] ({ref.key}) holds seqs up to {end - 1} but "
                             f"counters.enqueued is {enqueued}: new jobs would reuse ids")
    seqs = sorted(state.jobs)
    for i, ref in enumerate(refs):
        if ref.groups is not None:
            _check_grouped_ref(i, ref, seqs)
            continue
        at = bisect_left(seqs, ref.next_seq)
        if at < len(seqs) and seqs[at] < ref.first_seq + ref.count:
            raise ValueError(f"segments[{i}] ({ref.key}) still holds seq {seqs[at]} "
                             f"(taken {ref.taken} of {ref.count}), but the jobs list has it "
                             "too: a job is in the head or in its segment, never both")
    return refs


def _check_grouped_ref(i: int, ref: SegmentRef, seqs: list[int]) -> None:
    """A grouped ref's taken positions (``taken_at``) against the head's jobs:
    a job of the head within its seqs must be at a taken position (moved into
    the head), never at a pending one. O(head jobs in its range + log)."""
    taken_at, r = ref.taken_at, 0
    stop = ref.first_seq + ref.count
    for seq in seqs[bisect_left(seqs, ref.first_seq):bisect_left(seqs, stop)]:
        pos = seq - ref.first_seq
        while r < len(taken_at) and taken_at[r] + taken_at[r + 1] <= pos:
            r += 2
        if r >= len(taken_at) or taken_at[r] > pos:
            raise ValueError(f"segments[{i}] ({ref.key}) still holds seq {seq} (position "
                             f"{pos} is not in its taken_at), but the jobs list has it "
                             "too: a job is in the head or in its segment, never both")


def _add_jobs(state: QueueState, jobs: list[Any], lines: list[bytes] | None,
              version: int) -> None:
    for i, item in enumerate(jobs):
        try:
            job = _job_from(item, LineSpans(lines[i]) if lines is not None else None, version,
                            state.updated_ms)
        except NotOurLayout:  # this line was edited by hand: re-encode what was parsed
            job = _job_from(item, None, version, state.updated_ms)
        if job.seq in state.jobs:
            raise ValueError(f"job id {job.id!r} appears twice")
        state.jobs[job.seq] = job
        if job.group is not None:
            heapq.heappush(state.grouped, job.seq)
