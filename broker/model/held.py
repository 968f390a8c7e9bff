"""Jobs held at claim records' segment parts (``{"seg": key, "at": runs}``,
see :mod:`broker.model.claim_records`): found by token or by seq, marked for
cancellation in their record, and *materialized*: given a claimed line of their
own, built from the held-jobs cache (:class:`broker.model.state.HeldJobs`), just
before an op settles them, so every settlement (fail, release, cancel end,
reclaim, complete) then runs as for an inline claimed job in the same change.
A claimed line so made never outlives its op. Pure: the broker's ``prepare``
fills the cache first (:func:`broker.model.segments.claims.held_loads`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from broker.model.claim_records import ClaimRecord
from broker.model.format import codec
from broker.model.format.segment_format import segment_job
from broker.model.job import CLAIMED, Job, token_seq
from broker.model.state import QueueState


def held_position(state: QueueState, token: str,
                  fences: list[int] | None = None) -> tuple[ClaimRecord, int] | None:
    """The claim record and position that the stored ``token`` names at a segment
    part (no line of its own in the head), live or not, or None. ``fences``: the
    records' fences, ascending (made here when not given)."""
    seq = token_seq(token)
    if seq is None or seq in state.jobs.entries:
        return None
    try:
        fence = int(token[token.rindex(".") + 1:])
    except ValueError:
        return None
    records = state.claim_records
    if fences is None:
        fences = list(records)
    at = bisect.bisect_right(fences, fence) - 1
    if at < 0:
        return None
    record = records[fences[at]]
    pos = fence - record.fence
    if pos >= record.n or record.seqs[pos] != seq or record.seg_span(pos) is None:
        return None
    return record, pos


def held_by_seq(state: QueueState, seq: int) -> tuple[ClaimRecord, int] | None:
    """The claim record and position holding job ``seq`` at a segment part, not
    settled, or None. O(records with segment parts)."""
    if not state.seg_names:
        return None
    for record in state.claim_records.values():
        for pos0, count, _, _ in record.segs or ():
            pos = pos0 + seq - record.seqs[pos0]
            if pos0 <= pos < pos0 + count and not record.is_settled(pos):
                return record, pos
    return None


def mark_held_cancel(record: ClaimRecord, pos: int, now_ms: int) -> bool:
    """Mark the job held at segment-part position ``pos`` of ``record`` for
    cancellation at ``now_ms`` (a mark in the record: it has no line); whether
    it was not marked already."""
    if pos in record.cancel:
        return False
    record.cancel[pos] = now_ms
    record._enc = None
    return True


def materialize(state: QueueState, record: ClaimRecord, pos: int) -> Job | None:
    """Give the job held at segment-part position ``pos`` of ``record`` (not
    settled) a claimed line of its own in the head, built from its held source
    line, so that a settlement of it works as for any inline claimed job (which
    settles it in the same change: a claimed line never outlives the op). None,
    nothing changed, if its line is not loaded (``prepare`` loads it first)."""
    span = record.seg_span(pos)
    if span is None or record.is_settled(pos):
        return None
    got = state.held.line(record.fence, span, pos - span[0])
    if got is None:
        return None
    ref, line = got
    seq = record.seqs[pos]
    job = segment_job(seq, line, ref)
    job.status = CLAIMED
    job.attempts += 1
    job.claim = record.fence
    job.lease_token = f"{job.id}.{record.fence + pos}"
    job.rec = record
    job.cancel_ms = record.cancel.get(pos)
    job._enc = None
    state.jobs.insert(seq, job)
    codec.inserted_many(state, seq, 1)
    state.approx_bytes += job.size_estimate()
    return job


def materialize_live(state: QueueState, stored: Iterable[str | None], now_ms: int,
                     marked_only: bool = False) -> None:
    """Materialize (:func:`materialize`) the jobs the stored tokens ``stored``
    still hold at segment parts at ``now_ms`` (only those marked for cancel, with
    ``marked_only``: a heartbeat ends only those), before an op settles them."""
    if not state.seg_names:
        return
    fences = list(state.claim_records)
    for token in stored:
        if token is None:
            continue
        found = held_position(state, token, fences)
        if found is None:
            continue
        record, pos = found
        if record.is_settled(pos) or record.expires_ms <= now_ms or (
                marked_only and pos not in record.cancel):
            continue
        materialize(state, record, pos)


def materialize_expired(state: QueueState, now_ms: int) -> None:
    """Materialize every held segment-part job of the records whose lease ran out
    by ``now_ms`` (a reclaim settles them); one whose line is not loaded stays
    held, and its record is reclaimed once ``prepare`` loaded it."""
    if not state.seg_names:
        return
    for record in list(state.claim_records.values()):
        if record.segs and record.expires_ms <= now_ms:
            for pos0, count, _, _ in record.segs:
                for pos in range(pos0, pos0 + count):
                    if not record.is_settled(pos):
                        materialize(state, record, pos)
