"""A job's line in the queue object: byte templates, filled in per job.

Every job is one line of the object's ``jobs`` array. The common job shapes
(pending, claimed, completed, and a bulk push's pending line) are filled
into byte templates here; every other shape goes through
:meth:`broker.model.job.Job.to_dict`, and both give the same bytes (the tests
compare them). A bulk-pushed job is kept as nothing but its line until first
touched (:func:`new_pending_lines`, :func:`pending_from_line`,
:mod:`broker.model.jobtable`). The whole object (header, blocks of lines,
key windows) is joined by :mod:`broker.model.format.codec`. Pure: bytes in, bytes out.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import cast

import orjson

from broker import timefmt
from broker.model.job import CANCELLED, CLAIMED, COMPLETED, PENDING, Job
from broker.wire import compact

# ids, statuses and timestamps never need JSON escaping, so they can be spliced
# in. A job's id is its seq, formatted as job_id_for() does (seq goes in twice).
_PLAIN_JOB = (b',\n{"id":"j%010d","seq":%d,"status":"%s","priority":%d,"run_at":"%s",'
              b'"attempts":%d,"max_attempts":%d,"created_at":"%s","payload":%s}')

# A claimed job without key or error: the other common shape. Its lease is its
# claim record's (broker.model.claim_records): the line names the record's fence.
_CLAIMED_JOB = _PLAIN_JOB.removesuffix(b"}") + b',"claim":%d}'
# A completed job keeps its lease spelled out (as version 4 wrote it, so archive
# lines and the jq recipe do not change). Everything in the lease after its token
# is the same for all the jobs of one claim, so that tail is formatted once (see
# _lease_tail); the worker name, the one field that may need escaping, goes in
# JSON-encoded.
_LEASED_HEAD = _PLAIN_JOB.removesuffix(b"}") + b',"lease":{"token":"%s'
_LEASE_TAIL = b'","worker":%s,"lease_s":%s,"expires_at":"%s","heartbeat_at":"%s"}}'
# A completed job awaiting its archive object: the leased line, then the completion.
COMPLETION = b',"completed_at":"%s","commit_seq":%d,"commit":"%s","result":%s}'
_lease_tails: dict[tuple[str, int, int, int], bytes] = {}

# The same line for a new pending job without key, as a format of seq, seq and
# payload: everything else is the same for all the jobs of one bulk push (or of
# one segment, see broker.model.segments), so it is filled in once.
_PENDING_BODY = (b'{"id":"j%%010d","seq":%%d,"status":"pending","priority":%d,"run_at":"%s",'
                 b'"attempts":0,"max_attempts":%d,"created_at":"%s","payload":%%b}')

# A completed job's line in an archive object: the job's fields without lease and
# key, then who completed it (worker and token), in which commit, when, and its
# result (see broker.model.format.archive). A grouped job's group goes before its
# payload, as on its line in the head.
_ARCHIVED_JOB = (b'{"id":"j%010d","seq":%d,"status":"completed","priority":%d,"run_at":"%s",'
                 b'"attempts":%d,"max_attempts":%d,"created_at":"%s"%s,"payload":%s%s,'
                 b'"worker":%s,"token":"%s","commit_seq":%d,"commit":"%s","completed_at":"%s",'
                 b'"result":%s}\n')


def _lease_tail(job: Job) -> bytes:
    """The encoded lease after its token, shared by the leases of one claim."""
    return lease_tail(*job.lease_numbers())


def lease_tail(worker: str, lease_ms: int, expires_ms: int, heartbeat_ms: int) -> bytes:
    """The encoded lease after its token (worker, length, expiry and heartbeat):
    the same for every job of one claim."""
    key = (worker, lease_ms, expires_ms, heartbeat_ms)
    tail = _lease_tails.get(key)
    if tail is None:
        if len(_lease_tails) >= 4096:  # a few claims' worth is all that is ever reused
            _lease_tails.clear()
        tail = _lease_tails[key] = _LEASE_TAIL % (
            orjson.dumps(worker), orjson.dumps(lease_ms / 1000),
            timefmt.fmt_bytes(expires_ms), timefmt.fmt_bytes(heartbeat_ms))
    return tail


def first_claim_line(pending: bytes, claim: bytes) -> bytes:
    """:func:`job_line` of the job a line of :func:`new_pending_lines` describes,
    once claimed for the first time in the claim record ``claim`` (its
    :func:`claim_tail`): that line with its status and attempts spliced and the
    record named, a third of the cost of a fresh encode (``bench/broker_bench.py``,
    cycle rows). The first ``"status"`` and ``"attempts"`` of such a line are its
    own (nothing before them is a payload); both new values have the old ones' width.
    """
    return pending[:-1].replace(b'"status":"pending"', b'"status":"claimed"', 1).replace(
        b'"attempts":0,', b'"attempts":1,', 1) + claim


def claim_tail(fence: int) -> bytes:
    """What ends a claimed line of the claim record ``fence``."""
    return b',"claim":%d}' % fence


def completed_from_claimed(claimed: bytes, token: str, tail: bytes) -> bytes:
    """A claimed line (:data:`_CLAIMED_JOB`'s shape) with its record's name cut
    and the lease spelled in (``token``, ``tail`` from :func:`lease_tail`), status
    still claimed and without the closing brace: what a completion is appended to."""
    return claimed[:claimed.rindex(b',"claim":')] + b',"lease":{"token":"' + token.encode() \
        + tail[:-1]


def stored_dict(job: Job) -> dict[str, object]:
    """The job as its line holds it: :meth:`Job.to_dict`, but a claimed job
    names its claim record instead of carrying its lease and cancel mark
    (both are the record's), and the error history is :func:`errors_field`."""
    out = job.to_dict()
    if job.errors:
        out["errors"] = errors_field(job)
    if job.status == CLAIMED:
        out.pop("lease", None)
        out.pop("cancel_requested_at", None)
        out["claim"] = job.claim
    return out


def errors_field(job: Job) -> list[list[object]]:
    """A job line's ``"errors"``: its history, oldest first, as ``[attempt,
    failed_at, text]``, the newest entry's text null (it is the line's
    ``last_error``, or ``""`` when the line has none: never stored twice).
    Optional: a line without it (a job that never failed, or written by a
    broker before histories) has the history of its ``last_error`` alone."""
    last = len(job.errors) - 1
    return [[attempt, timefmt.fmt(failed_ms), None if i == last else text]
            for i, (attempt, failed_ms, text) in enumerate(job.errors)]


def plain_token(token: str) -> bool:
    """True if ``token`` (a lease token or commit id) needs no JSON escaping, so
    it can be spliced into a template (the broker makes them so; the decoder
    refuses any other)."""
    return token.isascii() and token.isprintable() and '"' not in token and "\\" not in token


def job_line(job: Job) -> bytes:
    """``job``'s line of the object: its JSON, preceded by the ``,\n`` that separates
    it from the one before, cached on the job until :func:`broker.model.format.codec.touch`
    clears it.

    The common shapes (pending, or claimed, with no key or error; a group
    spliced in) are filled into byte templates; everything else goes through
    :func:`stored_dict`. Both give the same bytes (the tests compare them). A
    grouped line carries ``"group"`` right before ``"payload"``: after the fields
    the byte splices edit (status, attempts), so no group name can pass for one.
    """
    enc = job._enc
    if enc is None:
        token = job.lease_token
        claimed = job.status == CLAIMED
        if job.key is None and not job.errors \
                and (claimed or job.cancel_ms is None) \
                and (job.done_ms is None or job.done_commit is not None):
            fields = (job.seq, job.seq, job.status.encode(), job.priority,
                      timefmt.fmt_bytes(job.run_at_ms), job.attempts,
                      job.max_attempts, timefmt.fmt_bytes(job.created_ms), job.payload)
            if claimed:
                enc = _CLAIMED_JOB % (*fields, job.claim or 0)
            elif token is None:
                enc = _PLAIN_JOB % fields
            else:
                enc = _LEASED_HEAD % (*fields, token.encode()) + _lease_tail(job)
                if job.done_ms is not None:  # completed: the commit's id is plain
                    enc = enc[:-1] + COMPLETION % (
                        timefmt.fmt_bytes(job.done_ms), job.done_seq,
                        (job.done_commit or "").encode(),
                        b"null" if job.result is None else job.result)
            if job.group is not None:
                enc = _with_group(enc, job.group)
        else:
            enc = b",\n" + orjson.dumps(stored_dict(job))
        job._enc = enc
    return enc


def _with_group(line: bytes, group: str) -> bytes:
    """A template's line with ``"group"`` spliced in before its ``"payload"``: the
    first ``,"payload":`` of a template's line is its own (nothing before it comes
    from the caller). Grouped claims' cycles encode every job this way, not
    through :func:`stored_dict` (``bench/groups_cpu_bench.py``)."""
    field = _group_fields.get(group)
    if field is None:
        if len(_group_fields) >= 4096:  # the groups of a few claims are all that is reused
            _group_fields.clear()
        field = _group_fields[group] = b',"group":' + orjson.dumps(group) + b',"payload":'
    return line.replace(b',"payload":', field, 1)


_group_fields: dict[str, bytes] = {}


def archive_line(job: Job) -> bytes:
    """A completed (or cancelled) job's line in its archive object (see
    :mod:`broker.model.format.archive`).

    Made from the job's stored fields alone, so every broker that writes
    the archive object of a commit writes the same bytes. Of its error
    history it keeps ``last_error`` only (the head and spill objects keep the
    history while the job is queued). Ids and tokens
    never need escaping (see :mod:`broker.model.format.decode`), so the line is filled into a
    byte template. Raises ``ValueError`` for a job that is neither.
    """
    token = job.lease_token
    if job.status == CANCELLED:
        return _cancelled_line(job)
    if job.status != COMPLETED or token is None or job.done_ms is None \
            or job.done_commit is None:
        raise ValueError(f"job {job.id} is not a committed completion")
    error = b"" if job.last_error is None else (
        b',"last_error":' + orjson.dumps(job.last_error))
    group = b"" if job.group is None else b',"group":' + orjson.dumps(job.group)
    return _ARCHIVED_JOB % (
        job.seq, job.seq, job.priority, timefmt.fmt_bytes(job.run_at_ms),
        job.attempts, job.max_attempts, timefmt.fmt_bytes(job.created_ms), group,
        job.payload, error, orjson.dumps(job.lease_worker), token.encode(),
        job.done_seq, job.done_commit.encode(), timefmt.fmt_bytes(job.done_ms),
        b"null" if job.result is None else job.result)


def _cancelled_line(job: Job) -> bytes:
    """A cancelled job's line in its archive object: as a completed job's, with
    ``"status":"cancelled"``, ``worker`` and ``token`` null for a job cancelled
    while pending, ``cancel_requested_at`` and ``cancelled_at`` (when it was
    asked for, when it ended) instead of ``completed_at``, and a null result.
    Rare, so encoded from a dict (the payload kept verbatim)."""
    if job.done_ms is None or job.done_commit is None or job.cancel_ms is None:
        raise ValueError(f"job {job.id} is not a committed cancellation")
    line: dict[str, object] = {
        "id": job.id, "seq": job.seq, "status": CANCELLED, "priority": job.priority,
        "run_at": timefmt.fmt(job.run_at_ms), "attempts": job.attempts,
        "max_attempts": job.max_attempts, "created_at": timefmt.fmt(job.created_ms)}
    if job.group is not None:
        line["group"] = job.group
    line["payload"] = orjson.Fragment(job.payload)
    if job.last_error is not None:
        line["last_error"] = job.last_error
    line.update(worker=job.lease_worker if job.lease_token is not None else None,
                token=job.lease_token, commit_seq=job.done_seq, commit=job.done_commit,
                cancel_requested_at=timefmt.fmt(job.cancel_ms),
                cancelled_at=timefmt.fmt(job.done_ms), result=None)
    return orjson.dumps(line) + b"\n"


def new_pending_lines(first_seq: int, payloads: Sequence[bytes], now_ms: int,
                      max_attempts: int) -> list[bytes]:
    """The lines of pending jobs with default options, seq ``first_seq`` onwards,
    due and created at ``now_ms``: what a bulk push adds to the state's
    :class:`~broker.model.jobtable.JobTable` (:func:`pending_from_line` makes the
    ``Job`` of one when it is first touched).

    The part of each line that every job of the push shares is formatted
    once, so a job costs its seq and its payload.
    """
    line = b",\n" + pending_format(0, now_ms, now_ms, max_attempts)
    # %-formatting: a third faster than f-strings here, and this runs a million times
    # per bulk push (bench/broker_bench.py, push rows)
    return [line % (seq, seq, payload) for seq, payload in enumerate(payloads, first_seq)]


def new_grouped_pending_lines(first_seq: int, payloads: Sequence[bytes],
                              groups: Sequence[str | None], now_ms: int,
                              max_attempts: int) -> list[bytes]:
    """:func:`new_pending_lines` for jobs of which some have a group (``groups``,
    one per payload, None for none): a grouped job's line is :func:`job_line`'s
    (the group spliced before the payload, as :func:`_with_group` does), filled
    from one template per push (``bench/groups_cpu_bench.py``)."""
    line = b",\n" + pending_format(0, now_ms, now_ms, max_attempts)
    grouped = line.replace(b',"payload":', b',"group":%b,"payload":', 1)
    # Every job grouped and its group spelt before (the common case): the fields found
    # in C, the lines by a listcomp, not a loop's body a job; a KeyError (a job
    # without a group, a group not spelt yet: None is never a key) rather than a
    # scan for None, whose compares cost more than they save
    # (groups_model_bench --instructions)
    try:
        got = list(map(_group_json.__getitem__, cast("Sequence[str]", groups)))
    except KeyError:
        pass
    else:
        return [grouped % (seq, seq, field, payload) for seq, field, payload in zip(
            range(first_seq, first_seq + len(payloads)), got, payloads, strict=True)]
    out = []
    for seq, (payload, group) in enumerate(zip(payloads, groups, strict=True), first_seq):
        if group is None:
            out.append(line % (seq, seq, payload))
            continue
        out.append(grouped % (seq, seq, _group_field(group), payload))
    return out


def _group_field(group: str) -> bytes:
    """``group`` as a line spells it (its JSON string), kept in ``_group_json``."""
    fields = _group_json
    field = fields.get(group)
    if field is None:
        if len(fields) >= 4096:  # the groups of a few pushes are all that is reused
            fields.clear()
        field = fields[group] = compact(orjson.dumps(group))  # (4,096 kept: 16 MB else)
    return field


_group_json: dict[str, bytes] = {}


def pending_format(priority: int, run_at_ms: int, created_ms: int, max_attempts: int) -> bytes:
    """A pending job's line without key, error or the leading ``,\\n``, as a
    %-format of ``(seq, seq, payload)``: the rest is filled in here, once.

    ``b",\\n" + pending_format(...) % (seq, seq, payload)`` is :func:`job_line`
    of that job (the tests compare them); :func:`new_pending_lines` and a
    segment object's lines (:mod:`broker.model.segments`) are made from it.
    """
    return _PENDING_BODY % (priority, timefmt.fmt_bytes(run_at_ms), max_attempts,
                            timefmt.fmt_bytes(created_ms))


# How pending_from_line reads a line of new_pending_lines (and
# broker.model.segments any line of pending_format): from the "run_at" marker
# on, every field has a fixed width but max_attempts' digits.
# No field before it holds text that could look like the marker (ids, numbers).
_RUN_AT = b'"run_at":"'
_STAMP_CHARS = len(timefmt.fmt(0))
_TO_MAX_ATTEMPTS = _STAMP_CHARS + len(b'","attempts":0,"max_attempts":')
_TO_PAYLOAD = len(b',"created_at":"') + _STAMP_CHARS + len(b'","payload":')


@functools.lru_cache(maxsize=4096)
def stamp_ms(stamp: bytes) -> int:
    """A time as the object spells it (``b"2026-11-22T03:43:47.123Z"``), in ms."""
    return timefmt.parse(stamp.decode())


def line_due_stamp(line: bytes) -> bytes:
    """The ``run_at`` time of a line from :func:`new_pending_lines`, as spelled."""
    at = line.index(_RUN_AT, 30) + len(_RUN_AT)
    return line[at:at + _STAMP_CHARS]


def pending_from_line(seq: int, line: bytes) -> Job:
    """The job of seq ``seq`` that a line of :func:`new_pending_lines` describes,
    with the line as its cached encoding (it is the job's line as it stands).

    This runs once per job claimed from a bulk push: two searches, fixed
    offsets and a cache of the fields a push's jobs share, not a JSON parse
    (``bench/broker_bench.py``, cycle rows).
    """
    at = line.index(_RUN_AT, 30) + len(_RUN_AT)  # (30: past the shortest id and seq)
    end = line.index(b",", at + _TO_MAX_ATTEMPTS)
    shared = line[at:end]  # run_at (= created_at) to max_attempts
    fields = _shared_fields.get(shared)
    if fields is None:
        if len(_shared_fields) >= 4096:  # a few pushes' worth is all that is reused
            _shared_fields.clear()
        fields = _shared_fields[shared] = (stamp_ms(shared[:_STAMP_CHARS]),
                                           int(shared[_TO_MAX_ATTEMPTS:]))
    due_ms, max_attempts = fields
    at = end + _TO_PAYLOAD
    if line[at - _AFTER_STAMP:at] == _STAMP_PAYLOAD:
        job = Job(seq, line[at:-1], PENDING, 0, due_ms, 0, max_attempts, due_ms)
    else:  # (a grouped push's line: the group spliced before the payload)
        # (a JSON string holds no bare ',"payload":': its quotes are escaped)
        # (offsets as module constants, not summed a job: groups_model_bench --instructions)
        group_at = at + _STAMP_TO_GROUP
        payload_at = line.index(_PAYLOAD_FIELD, group_at)
        job = Job(seq, line[payload_at + _PAYLOAD_LEN:-1], PENDING, 0, due_ms, 0,
                  max_attempts, due_ms)
        field = line[group_at:payload_at]
        # (group_of_field(), inlined: once a grouped job claimed; a miss, or an empty
        # name, asks it, which answers the same)
        job.group = _groups_read.get(field) or group_of_field(field)
    job._enc = line
    return job


def pending_payload(line: bytes) -> bytes:
    """The payload of the job a line of :func:`new_pending_lines` or
    :func:`new_grouped_pending_lines` describes, as :func:`pending_from_line`
    reads it, without making its ``Job`` (a claim held in a record answers the
    payload and nothing else of the line). The payload is the line's last
    field, and no field before it can spell ``","payload":`` (a JSON string
    escapes its quotes). ``ValueError`` for a line without one."""
    return line[line.index(_STAMP_PAYLOAD, 30) + len(_STAMP_PAYLOAD):-1]


def archived_from_pending(line: bytes, tail: bytes) -> bytes | None:
    """The archive line (:func:`archive_line`'s bytes) of the job a line of
    :func:`new_pending_lines` describes, completed on its first attempt: the
    line with ``"status":"completed"`` and ``"attempts":1`` spliced in, its
    closing brace replaced by ``tail`` (``,"worker":..`` to the result, the
    closing brace and the line break, as :data:`_ARCHIVED_JOB` spells them).
    The fields from status to the payload are what a push's (or a segment's)
    jobs share, so they are checked and respliced once per spelling; they
    must be as :func:`archive_line` writes them back (a broker's spelling).
    None for a line of another shape (a group's, or attempted): the caller
    makes the ``Job`` and encodes it."""
    status = line.find(b',"status":"', 20)
    payload = line.find(b'","payload":', 30)
    if status < 0 or payload < 0 or not line.startswith(b',\n{"id":"j'):
        return None
    shared = line[status:payload]
    spliced = _archived_shared.get(shared)
    if spliced is None:
        if len(_archived_shared) >= 4096:  # a few pushes' worth is all that is reused
            _archived_shared.clear()
        spliced = _archived_shared[shared] = _completed_shared(shared)
    if not spliced:
        return None
    return b"%b%b%b%b" % (line[2:status], spliced, line[payload:-1], tail)


_archived_shared: dict[bytes, bytes] = {}
_PENDING_SHARED = re.compile(
    rb',"status":"pending","priority":(0|-?[1-9][0-9]*),"run_at":"([^"]*)",'
    rb'"attempts":0,"max_attempts":([1-9][0-9]*),"created_at":"([^"]*)')


def _completed_shared(shared: bytes) -> bytes:
    """The fields from status up to the payload of a pending line's job
    (``shared``, as :func:`new_pending_lines` spells them) as its archive line
    spells them once completed on its first attempt; empty if they are not
    spelled so (a group, an attempt, a time not as the broker writes it)."""
    match = _PENDING_SHARED.fullmatch(shared)
    if match is None:
        return b""
    for stamp in (match[2], match[4]):
        try:
            if timefmt.fmt_bytes(stamp_ms(stamp)) != stamp:
                return b""
        except ValueError:
            return b""
    return b',"status":"completed","priority":%b,"run_at":"%b","attempts":1,' \
        b'"max_attempts":%b,"created_at":"%b' % (match[1], match[2], match[3], match[4])


def line_group(line: bytes) -> str | None:
    """The group of the job a line of :func:`new_pending_lines` or
    :func:`new_grouped_pending_lines` describes (None: none), read without
    making its ``Job`` (a third of :func:`pending_from_line`'s cost)."""
    field = line_group_field(line)
    return None if field is None else group_of_field(field)


def line_group_field(line: bytes) -> bytes | None:
    """:func:`line_group` as the line spells it (its JSON string; None: no group):
    for a caller that maps the spellings it meets to its own ids."""
    # (one search: the first created_at marker is the line's own, as _RUN_AT is above)
    at = line.index(_CREATED_AT, 30) + _CREATED_TO_GROUP
    if not line.startswith(_STAMP_GROUP, at):
        return None
    at += len(_STAMP_GROUP)
    return line[at:line.index(_PAYLOAD_FIELD, at)]


def group_of_field(field: bytes) -> str:
    """The group that ``field`` (its JSON string, as a line spells it) names."""
    group = _groups_read.get(field)
    if group is None:
        if len(_groups_read) >= 4096:  # the groups of a few pushes are all that is reused
            _groups_read.clear()
        group = _groups_read[field] = orjson.loads(field)
    return group


_shared_fields: dict[bytes, tuple[int, int]] = {}
_groups_read: dict[bytes, str] = {}
_PAYLOAD_FIELD = b',"payload":'
_STAMP_PAYLOAD = b'"' + _PAYLOAD_FIELD  # (what follows created_at's stamp: a payload,
_STAMP_GROUP = b'","group":'  # or a group)
_AFTER_STAMP = len(_STAMP_PAYLOAD)
_STAMP_TO_GROUP = len(_STAMP_GROUP) - _AFTER_STAMP  # (from a stamp's end + _AFTER_STAMP)
_PAYLOAD_LEN = len(_PAYLOAD_FIELD)
_CREATED_AT = b',"created_at":"'
_CREATED_TO_GROUP = len(_CREATED_AT) + _STAMP_CHARS  # (to the '",' after its stamp)

