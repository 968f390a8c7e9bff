"""The queue object's bytes: byte templates, the per-job cached encoding, and
encode/decode.

The one module that knows how a state is laid out as bytes (as h11 keeps its
byte writers in ``_writers.py``, away from its state machine). Every other
module sees plain operations: :func:`encode_parts` for a commit,
:func:`decode` for a read, :func:`archive_line` for an archive object, and
:func:`touch` / :func:`added` / :func:`removed` for the change tracking that
:mod:`broker.lifecycle` does on every job change.

Encoding is incremental (``bench/state_encode_bench.py`` measures it): each
job keeps its line's bytes (``Job._enc``) until it changes, a bulk-pushed job
is kept as nothing but its line until first touched
(:func:`new_pending_lines`, :func:`pending_from_line`, :mod:`broker.jobtable`),
and jobs are
grouped in segments of ``1 << SEGMENT_SHIFT`` seqs whose joined bytes are kept
too, so a commit after changing 1k of 100k jobs re-encodes those 1k, their
segments and a join. The common job shapes are filled into byte templates;
everything else goes through :meth:`broker.state.Job.to_dict`, and both give
the same bytes (the tests compare them). The bytes are the product contract:
``tests/broker/test_format_golden.py`` pins them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import orjson

from broker import timefmt
from broker.state import (
    COMPLETED,
    FORMAT,
    LINEAGE,
    PENDING,
    VERSION,
    Job,
    KeyEntry,
    QueueState,
)

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
# A completed job awaiting its archive object: the leased line, then the completion.
_COMPLETION = b',"completed_at":"%s","commit_seq":%d,"commit":"%s","result":%s}'
_lease_tails: dict[tuple[str, int, int, int], bytes] = {}

# The same line for a new pending job with default options, split so a bulk push
# fills in only seq and payload (the rest is one bytes object per push).
_NEW_JOB_HEAD = b',\n{"id":"j%010d","seq":%d'
_NEW_JOB_TAIL = (b',"status":"pending","priority":0,"run_at":"%s","attempts":0,'
                 b'"max_attempts":%d,"created_at":"%s","payload":')

# A completed job's line in an archive object: the job's fields without lease and
# key, then who completed it (worker and token), in which commit, when, and its
# result (see broker.archive).
_ARCHIVED_JOB = (b'{"id":"j%010d","seq":%d,"status":"completed","priority":%d,"run_at":"%s",'
                 b'"attempts":%d,"max_attempts":%d,"created_at":"%s","payload":%s%s,'
                 b'"worker":%s,"token":"%s","commit_seq":%d,"commit":"%s","completed_at":"%s",'
                 b'"result":%s}\n')


def _lease_tail(job: Job) -> bytes:
    """The encoded lease after its token, shared by the leases of one claim."""
    return lease_tail(job.lease_worker, job.lease_ms, job.lease_expires_ms,
                      job.lease_heartbeat_ms)


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


def first_claim_line(pending: bytes, token: str, tail: bytes) -> bytes:
    """:func:`job_line` of the job a line of :func:`new_pending_lines` describes,
    once claimed for the first time under ``token`` (``tail`` from
    :func:`lease_tail`): that line with its status and attempts spliced and the
    lease appended, a third of the cost of a fresh encode (``bench/broker_bench.py``,
    cycle rows). The first ``"status"`` and ``"attempts"`` of such a line are its
    own (nothing before them is a payload); both new values have the old ones' width.
    """
    return pending[:-1].replace(b'"status":"pending"', b'"status":"claimed"', 1).replace(
        b'"attempts":0,', b'"attempts":1,', 1) + b',"lease":{"token":"' + token.encode() + tail


def plain_token(token: str) -> bool:
    """True if ``token`` (a lease token or commit id) needs no JSON escaping, so
    it can be spliced into a template (the broker makes them so; the decoder
    refuses any other)."""
    return token.isascii() and token.isprintable() and '"' not in token and "\\" not in token


def job_line(job: Job) -> bytes:
    """``job``'s line of the object: its JSON, preceded by the ``,\n`` that separates
    it from the one before, cached on the job until :func:`touch` clears it.

    The common shapes (pending, or claimed, with no key or error) are
    filled into byte templates; everything else goes through
    :meth:`Job.to_dict`. Both give the same bytes (the tests compare them).
    """
    enc = job._enc
    if enc is None:
        token = job.lease_token
        if job.key is None and job.last_error is None and (
                job.done_ms is None or job.done_commit is not None):
            fields = (job.seq, job.seq, job.status.encode(), job.priority,
                      timefmt.fmt_bytes(job.run_at_ms), job.attempts,
                      job.max_attempts, timefmt.fmt_bytes(job.created_ms), job.payload)
            if token is None:
                enc = _PLAIN_JOB % fields
            else:
                enc = _LEASED_HEAD % (*fields, token.encode()) + _lease_tail(job)
                if job.done_ms is not None:  # completed: the commit's id is plain
                    enc = enc[:-1] + _COMPLETION % (
                        timefmt.fmt_bytes(job.done_ms), job.done_seq,
                        (job.done_commit or "").encode(),
                        b"null" if job.result is None else job.result)
        else:
            enc = b",\n" + orjson.dumps(job.to_dict())
        job._enc = enc
    return enc


def archive_line(job: Job) -> bytes:
    """A completed job's line in its archive object (see :mod:`broker.archive`).

    Made from the job's stored fields alone, so every broker that writes
    the archive object of a commit writes the same bytes. Ids and tokens
    never need escaping (see :mod:`broker.decode`), so the line is filled into a
    byte template. Raises ``ValueError`` for a job that is not completed.
    """
    token = job.lease_token
    if job.status != COMPLETED or token is None or job.done_ms is None \
            or job.done_commit is None:
        raise ValueError(f"job {job.id} is not a committed completion")
    error = b"" if job.last_error is None else (
        b',"last_error":' + orjson.dumps(job.last_error))
    return _ARCHIVED_JOB % (
        job.seq, job.seq, job.priority, timefmt.fmt_bytes(job.run_at_ms),
        job.attempts, job.max_attempts, timefmt.fmt_bytes(job.created_ms),
        job.payload, error, orjson.dumps(job.lease_worker), token.encode(),
        job.done_seq, job.done_commit.encode(), timefmt.fmt_bytes(job.done_ms),
        b"null" if job.result is None else job.result)


# -- change tracking (called by broker.lifecycle on every job change) ------------

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
        state.seg_jobs[seg] = [job.seq]
    else:
        lst.append(job.seq)


def removed(state: QueueState, job: Job) -> None:
    """Record a removed job; its segment drops it at the next encode."""
    seg = job.seq >> SEGMENT_SHIFT
    state.dirty.add(seg)
    state.shrunk.add(seg)


def removed_from(state: QueueState, segments: set[int]) -> None:
    """Record that jobs were removed from ``segments`` (:func:`removed` for many)."""
    state.dirty |= segments
    state.shrunk |= segments


def new_pending_lines(first_seq: int, payloads: Sequence[bytes], now_ms: int,
                      max_attempts: int) -> list[bytes]:
    """The lines of pending jobs with default options, seq ``first_seq`` onwards,
    due and created at ``now_ms``: what a bulk push adds to the state's
    :class:`~broker.jobtable.JobTable` (:func:`pending_from_line` makes the
    ``Job`` of one when it is first touched).

    The part of each line that every job of the push shares is formatted
    once, so a job costs its seq and its payload.
    """
    stamp = timefmt.fmt_bytes(now_ms)
    line = _NEW_JOB_HEAD + (_NEW_JOB_TAIL % (stamp, max_attempts, stamp)).replace(b"%", b"%%") \
        + b"%b}"
    # %-formatting: a third faster than f-strings here, and this runs a million times
    # per bulk push (bench/broker_bench.py, push rows)
    return [line % (seq, seq, payload) for seq, payload in enumerate(payloads, first_seq)]


# How pending_from_line reads a line of _NEW_JOB_HEAD + _NEW_JOB_TAIL: from the
# "run_at" marker on, every field has a fixed width but max_attempts' digits.
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
    job = Job(seq, line[end + _TO_PAYLOAD:-1], PENDING, 0, due_ms, 0, max_attempts, due_ms)
    job._enc = line
    return job


_shared_fields: dict[bytes, tuple[int, int]] = {}


def added_many(state: QueueState, first: int, count: int) -> None:
    """:func:`added` for ``count`` jobs with consecutive seqs from ``first``, above
    any seq so far."""
    seg_jobs, dirty = state.seg_jobs, state.dirty
    seq, stop = first, first + count
    while seq < stop:
        seg = seq >> SEGMENT_SHIFT
        end = min(stop, (seg + 1) << SEGMENT_SHIFT)  # the next segment's first seq
        seg_jobs.setdefault(seg, []).extend(range(seq, end))
        dirty.add(seg)
        seq = end


def reset_segments(state: QueueState) -> None:
    """Forget every cached segment: the next encode joins every job's line again
    (after a load, when no segment bytes exist yet)."""
    seg_jobs: dict[int, list[int]] = {}
    for seq in state.jobs:
        seg_jobs.setdefault(seq >> SEGMENT_SHIFT, []).append(seq)
    state.seg_jobs = seg_jobs
    state.segments = {}
    state.dirty = set(seg_jobs)
    state.shrunk = set()


# -- encoding ------------------------------------------------------------------


def _header(state: QueueState) -> dict[str, Any]:
    broker = state.broker
    return {
        "format": FORMAT,
        "version": VERSION,
        "seq": state.seq,
        "writer": state.writer,
        "commit": state.commit,
        "lineage": state.lineage,
        "updated_at": timefmt.fmt(state.updated_ms),
        "broker": None
        if broker is None
        else {"id": broker.id, "url": broker.url, "lease_s": broker.lease_ms / 1000,
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
    entries: dict[int, Any] = state.jobs.entries  # (Job | bytes: see the join below)
    entries_get = entries.__getitem__
    segments, lists, shrunk = state.segments, state.seg_jobs, state.shrunk
    for seg in dirty:
        lst = lists.get(seg)
        if lst is None:
            live = []
        elif seg in shrunk:
            live = [seq for seq in lst if seq in entries]
        else:
            live = lst
        if not live:
            lists.pop(seg, None)
            segments.pop(seg, None)
            continue
        if len(live) != len(lst or ()):
            lists[seg] = live
        # Each entry is a job, or its line while untouched (see broker.jobtable). This
        # runs once per job of every changed segment: a class test, not isinstance()
        # (bench/broker_bench.py, cycle rows).
        segments[seg] = b"".join([e if e.__class__ is bytes else (e._enc or job_line(e))
                                  for e in map(entries_get, live)])
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
    parts.append(b'\n],\n"once":')
    parts.append(orjson.dumps([[k, timefmt.fmt(e.at_ms)] for k, e in state.once.items()]))
    parts.append(b',\n"receipts":')
    parts += state.receipts.encode()
    parts.append(b"}\n")
    return parts


def encode_full(state: QueueState) -> bytes:
    """Encode without any cached bytes (the baseline the benchmark compares with)."""
    out = dict(_header(state))
    out["jobs"] = [job.to_dict() for job in state.jobs.peek()]
    out["keys"] = [[k, e.job_id, timefmt.fmt(e.at_ms)] for k, e in state.keys.items()]
    out["once"] = [[k, timefmt.fmt(e.at_ms)] for k, e in state.once.items()]
    out["receipts"] = state.receipts.to_plain()
    return orjson.dumps(out)


def decode(data: bytes, *, where: str = "queue object") -> QueueState:
    """Parse an object's bytes into a state, checking every invariant (see
    :func:`broker.decode.decode_state`, which says what it raises)."""
    from broker.decode import decode_state  # (the decoder builds on this module)

    return decode_state(data, where=where)


def stamp(state: QueueState, writer: str, now_ms: int, commit: str | None = None) -> None:
    """Mark the state as the next commit (``seq`` + 1) by ``writer``, made by the
    write attempt ``commit`` (a fresh unique id per attempt; see :mod:`broker.commit`)."""
    state.seq += 1
    state.writer = writer
    state.updated_ms = now_ms
    state.commit = commit
    if commit is not None:
        state.lineage = [*state.lineage[-(LINEAGE - 1):], commit]
    claimed, jobs, dirty = state.claimed_lines, state.jobs, state.dirty
    commit_bytes = (commit or "").encode()
    times: dict[int | None, bytes] = {}  # the jobs of one complete share their time
    for seq in state.completed.get(state.seq, ()):  # completed by this very commit
        job = jobs[seq]
        job.done_commit = commit
        job._enc = None  # touch(), inlined: its line carries the commit's id
        dirty.add(seq >> SEGMENT_SHIFT)
        line = claimed.get(seq)
        if line is not None and commit is not None:
            # job_line()'s bytes, from the claimed line (same fields, one status
            # apart; the status is the first string after the digits of id and
            # seq): a third of the cost per completed job (broker_bench cycle rows).
            done = times.get(job.done_ms)
            if done is None:
                done = times[job.done_ms] = timefmt.fmt_bytes(job.done_ms or 0)
            job._enc = line.replace(b'"status":"claimed"', b'"status":"completed"', 1)[:-1] \
                + _COMPLETION % (done, job.done_seq, commit_bytes,
                                 b"null" if job.result is None else job.result)
    claimed.clear()
    state.receipts.unwritten_since = None  # this write carries them
