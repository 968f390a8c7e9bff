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
from collections.abc import Iterable, Sequence

import orjson

from broker import timefmt
from broker.model import tokens
from broker.model.claim_records import ClaimRecord, Done, as_held, held_slices
from broker.model.format import codec
from broker.model.format.archive import Archived
from broker.model.format.segment_format import segment_job
from broker.model.format.spill_format import SpilledJob
from broker.model.job import CLAIMED, COMPLETED, Job, seq_of
from broker.model.job_lines import archive_line, archived_from_pending
from broker.model.ops import LeasedJob
from broker.model.spill_parts import claimed_job, spill_view, unname_spill
from broker.model.state import QueueState, SegmentRef, Span
from broker.wire import compact


def unname(state: QueueState, record: ClaimRecord) -> None:
    """``record`` left the head: the segments it named lose a name, and one that
    is exhausted and named by no record is dropped (its object is deleted once
    the commit without it lands); its held lines are forgotten."""
    names = state.seg_names
    for key in record.spill_keys() if record.spills else ():
        left = names.get(key, 1) - 1
        if left > 0:
            names[key] = left
        else:
            names.pop(key, None)
            unname_spill(state, key)
    for key in record.seg_keys():
        left = names.get(key, 1) - 1
        if left > 0:
            names[key] = left
            continue
        names.pop(key, None)
        refs = state.segment_refs
        for i, ref in enumerate(refs):
            if ref.key == key:
                if ref.exhausted:
                    del refs[i]
                    state.dropped_refs.append(ref)
                break
    state.held.forget(record.fence)


def held_position(state: QueueState, token: str, fences: list[int] | None = None,
                  hint: ClaimRecord | None = None,
                  seq: int | None = None) -> tuple[ClaimRecord, int] | None:
    """The claim record and position that the stored ``token`` names at a segment
    part (no line of its own in the head), live or not, or None. ``fences``: the
    records' fences, ascending (made here when not given; one made before a
    record left the head still does: a token of a record gone is held by none).
    ``hint``: a record to try first (the one the caller's last token named: a
    claim's tokens come back together), found without a search if it is still
    in the head and its fences span the token's. ``seq``: the token's job seq
    (:func:`broker.model.job.token_seq`) when the caller read it already and
    found no line of that job in the head."""
    head, dot, tail = token.rpartition(".")
    if seq is None:
        seq = seq_of(head) if dot else None
        if seq is None or seq in state.jobs.entries:
            return None
    elif not dot:
        return None
    try:
        fence = int(tail)
    except ValueError:
        return None
    records = state.claim_records
    if hint is not None and hint.fence <= fence < hint.fence + len(hint.seqs) and \
            records.get(hint.fence) is hint:  # (fence ranges are disjoint: the search's)
        record = hint
    else:
        if fences is None:
            fences = list(records)
        at = bisect.bisect_right(fences, fence) - 1
        if at < 0:
            return None
        # (``fences`` may name records gone since: none holds it)
        found = records.get(fences[at])
        if found is None:
            return None
        record = found
    pos = fence - record.fence
    if pos >= record.n or record.seqs[pos] != seq or record.held_span(pos) is None:
        return None
    return record, pos


def held_by_seq(state: QueueState, seq: int,
                done: bool = False) -> tuple[ClaimRecord, int] | None:
    """The claim record and position holding job ``seq`` at a segment part, not
    settled (or, with ``done``, completed in a done entry), or None.
    O(records with segment parts)."""
    if not state.seg_names:
        return None
    for record in state.claim_records.values():
        for pos0, count, _, _ in record.spills or ():
            seqs = record.seqs[pos0:pos0 + count]
            if seq in seqs:
                pos = pos0 + seqs.index(seq)
                if not record.is_settled(pos) or (done and done_at(record, pos) is not None):
                    return record, pos
        for pos0, count, _, _ in record.segs or ():
            pos = pos0 + seq - record.seqs[pos0]
            if pos0 <= pos < pos0 + count and (not record.is_settled(pos) or (
                    done and done_at(record, pos) is not None)):
                return record, pos
    return None


def done_at(record: ClaimRecord, pos: int) -> tuple[Done, int] | None:
    """The done entry completing position ``pos`` of ``record``, and its index there."""
    for entry in record.completions or ():
        at = bisect.bisect_left(entry.pos, pos)
        if at < len(entry.pos) and entry.pos[at] == pos:
            return entry, at
    return None


def view_at(state: QueueState, record: ClaimRecord, pos: int) -> Job | None:
    """The job at segment-part position ``pos`` of ``record`` as a throwaway
    :class:`Job`: claimed (:func:`held_view`) or completed awaiting its archive
    object (:func:`done_job`); None if its line is not loaded or it is neither."""
    if not record.is_settled(pos):
        return held_view(state, record, pos)
    if record.spills and (spill := record.spill_span(pos)) is not None:
        done = done_at(record, pos)
        got = None if done is None else state.held.spilled_job(record.fence, spill,
                                                                pos - spill[0])
        return None if got is None or done is None else spill_done_job(record, *done, got)
    done, span = done_at(record, pos), record.seg_span(pos)
    got = None if done is None or span is None else state.held.line(
        record.fence, span, pos - span[0])
    return None if got is None or done is None else done_job(record, done[0], done[1], *got)


def mark_held_cancel(record: ClaimRecord, pos: int, now_ms: int) -> bool:
    """Mark the job held at segment-part position ``pos`` of ``record`` for
    cancellation at ``now_ms`` (a mark in the record: it has no line); whether
    it was not marked already."""
    if pos in record.cancel:
        return False
    record.cancel[pos] = now_ms
    record._enc = None
    return True


def held_view(state: QueueState, record: ClaimRecord, pos: int) -> Job | None:
    """The claimed job held at segment-part position ``pos`` of ``record``, as a
    throwaway :class:`Job` reading its lease through the record (for a page or a
    lookup; :func:`materialize` adds it to the head), or None if its line is not
    loaded. A spill part's job: :func:`broker.model.spill_parts.spill_view`."""
    if record.spills and (spill := record.spill_span(pos)) is not None:
        return spill_view(state, record, pos, spill)
    span = record.seg_span(pos)
    got = None if span is None else state.held.line(record.fence, span, pos - span[0])
    return None if got is None else job_at(record, pos, got[0], got[1])


def page_held(state: QueueState, after_seq: int, n: int,
              status: str | None = None) -> list[tuple[int, ClaimRecord, int, Span]]:
    """The first ``n`` jobs of segment and spill parts with a seq above
    ``after_seq``, in seq order: ``(seq, record, position, span)``; held ones
    (claimed) and, for ``status`` None or completed, those of segment parts'
    done entries. O(spans x n)."""
    out: list[tuple[int, ClaimRecord, int, Span]] = []
    for record in state.claim_records.values():
        done = {p for e in record.completions or () for p in e.pos} \
            if status in (None, COMPLETED) else set()
        held = status in (None, CLAIMED)
        for span in record.segs or ():
            pos0, count = span[0], span[1]
            first = record.seqs[pos0]
            pos = pos0 + max(0, after_seq + 1 - first)
            got = 0
            while pos < pos0 + count and got < n:
                if (held and not record.is_settled(pos)) or pos in done:
                    out.append((first + pos - pos0, record, pos, span))
                    got += 1
                pos += 1
        for span in record.spills or ():
            pos0, count = span[0], span[1]
            seqs = record.seqs
            out += sorted((seqs[pos], record, pos, span) for pos in range(pos0, pos0 + count)
                          if seqs[pos] > after_seq and (
                              (held and not record.is_settled(pos)) or pos in done))[:n]
    out.sort(key=lambda item: item[0])
    return out[:n]


def held_page(state: QueueState, after_seq: int, n: int,
              status: str | None = None) -> tuple[list[Job], int | None]:
    """:func:`page_held` as throwaway jobs (:func:`view_at`), and the seq of the
    first one whose line is not loaded (the page ends before it), or None."""
    jobs: list[Job] = []
    for seq, record, pos, _ in page_held(state, after_seq, n, status):
        job = view_at(state, record, pos)
        if job is None:
            return jobs, seq
        jobs.append(job)
    return jobs, None


def materialize(state: QueueState, record: ClaimRecord, pos: int) -> Job | None:
    """Give the job held at segment-part position ``pos`` of ``record`` (not
    settled) a claimed line of its own in the head, built from its held source
    line, so that a settlement of it works as for any inline claimed job (which
    settles it in the same change: a claimed line never outlives the op). None,
    nothing changed, if its line is not loaded (``prepare`` loads it first).
    A spill part's job is made so too (attempts the spilled ones + 1, its error
    history kept)."""
    span = record.held_span(pos)
    if span is None or record.is_settled(pos):
        return None
    job = held_view(state, record, pos)
    if job is None:
        return None
    seq = job.seq
    state.jobs.insert(seq, job)
    codec.inserted_many(state, seq, 1)
    state.approx_bytes += job.size_estimate()
    return job


def materialize_live(state: QueueState, stored: Iterable[str | None], now_ms: int,
                     marked_only: bool = False) -> None:
    """Materialize (:func:`materialize`) the jobs the stored tokens ``stored``
    still hold at segment or spill parts at ``now_ms`` (only those marked for
    cancel, with ``marked_only``: a heartbeat ends only those), before an op
    settles them."""
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
        if (record.segs or record.spills) and record.expires_ms <= now_ms:
            for pos0, count, _, _ in [*(record.segs or ()), *(record.spills or ())]:
                for pos in range(pos0, pos0 + count):
                    if not record.is_settled(pos):
                        materialize(state, record, pos)


def complete_position(state: QueueState, record: ClaimRecord, pos: int,
                      result: bytes | None, now_ms: int) -> None:
    """Complete the job held at segment-part (or spill-part) position ``pos`` of
    ``record`` in the commit after ``state.seq``: its position settled and
    added, with ``result``, to that commit's ``done`` entry of the record (no
    line, no payload: the archive object reads it from the segment, or the
    spill object)."""
    commit_seq = state.seq + 1
    record.settled |= 1 << pos
    if record.cancel:
        record.cancel.pop(pos, None)
    if state.groups is not None:  # (_left_held(), inlined: this runs once per job)
        state.groups.settle(None)
    entries = record.completions
    if entries is None:
        entries = record.completions = []
    if not entries or entries[-1].commit_seq != commit_seq:
        entries.append(Done(commit_seq, None, now_ms))
        state.done_commits.setdefault(commit_seq, []).append(record.fence)
    state.approx_bytes += len(result or b"") + 8  # (results are in the head until archived)
    if result is not None:
        result = compact(result)  # (kept until archived: not orjson's 4 KB buffer)
    entry = entries[-1]  # (positions ascending, results aligned: runs on disk)
    done = entry.pos
    if not done or done[-1] < pos:  # (a claim's tokens mostly come back in order)
        done.append(pos)
        entry.results.append(result)
    else:
        at = bisect.bisect(done, pos)
        done.insert(at, pos)
        entry.results.insert(at, result)
    record._enc = None


def _left_held(state: QueueState) -> None:
    """A job held at a segment part was settled without a line of its own (as
    :func:`broker.model.lifecycle.settle` tells the groups of one with a line):
    an ungrouped segment's, so the jobs without a group hold one fewer."""
    if state.groups is not None:
        state.groups.settle(None)


def drop_done(state: QueueState, commit_seq: int) -> int:
    """Drop the done entries of commit ``commit_seq`` (its archive object landed);
    a record with every position settled and none left leaves the head.
    Returns how many completions went."""
    dropped = 0
    records = state.claim_records
    for fence in state.done_commits.pop(commit_seq, ()):
        record = records.get(fence)
        if record is None or not record.completions:
            continue
        kept = [e for e in record.completions if e.commit_seq != commit_seq]
        state.approx_bytes -= sum(len(r or b"") + 8 for e in record.completions
                                  if e.commit_seq == commit_seq for r in e.results)
        dropped += sum(len(e.pos) for e in record.completions) - sum(len(e.pos) for e in kept)
        record.completions = kept or None
        record._enc = None
        if record.gone:
            del records[fence]
            unname(state, record)
    return dropped


def done_entries(state: QueueState, commit_seq: int) -> list[tuple[ClaimRecord, Done]]:
    """The records' done entries of commit ``commit_seq``, in fence order."""
    records = state.claim_records
    out = []
    for fence in sorted(state.done_commits.get(commit_seq, ())):
        record = records.get(fence)
        if record is None:
            continue
        out += [(record, e) for e in record.completions or () if e.commit_seq == commit_seq]
    return out


def done_job(record: ClaimRecord, entry: Done, i: int, ref: SegmentRef, line: bytes) -> Job:
    """The completed job of ``entry``'s ``i``-th position, its source ``line`` of
    ``ref``'s segment: what its archive line is made from (the record's worker,
    its token, the entry's commit and time, its result: no clock, no cache, so
    every broker makes the same bytes)."""
    pos = entry.pos[i]
    job = segment_job(record.seqs[pos], line, ref)
    job.status = COMPLETED
    job.attempts += 1
    job.lease_token = f"{job.id}.{record.fence + pos}"
    job.rec = record
    job.unlink()
    job.done_ms, job.done_seq, job.done_commit = entry.at_ms, entry.commit_seq, entry.commit
    job.result = entry.results[i]
    job._enc = None
    return job


def done_lines(record: ClaimRecord, entry: Done,
               lines: Sequence[tuple[SegmentRef, bytes] | SpilledJob]) -> Archived:
    """The archive lines of ``entry``'s completions, ``lines`` the source line of
    each of its positions in order (and its segment's ref): the bytes
    :func:`broker.model.job_lines.archive_line` makes of :func:`done_job`'s job,
    spliced from the source line without a ``Job`` each (one is made for a
    line of another shape). A position of a spill part has its spilled job
    (as its ref shows it) instead: :func:`spill_done_job`'s job's line.
    ``ValueError`` for an entry not committed yet."""
    commit = entry.commit
    if commit is None:
        raise ValueError(f"the completions of claim {record.fence} in commit "
                         f"{entry.commit_seq} are not committed")
    # (what follows the token is the same for every completion of the entry)
    worker = b',"worker":' + orjson.dumps(record.worker) + b',"token":"j'
    after = b'","commit_seq":%d,"commit":"%s","completed_at":"%s","result":' % (
        entry.commit_seq, commit.encode(), timefmt.fmt_bytes(entry.at_ms))
    record_seqs, fence = record.seqs, record.fence
    seqs = [record_seqs[pos] for pos in entry.pos]
    out = []
    for i, (seq, pos, result, source) in enumerate(zip(seqs, entry.pos, entry.results,
                                                       lines, strict=True)):
        if isinstance(source, SpilledJob):
            out.append(archive_line(spill_done_job(record, entry, i, source)))
            continue
        ref, line = source
        made = archived_from_pending(line, b"%b%010d.%d%b%b}\n" % (
            worker, seq, fence + pos, after, b"null" if result is None else result))
        out.append(archive_line(done_job(record, entry, i, ref, line)) if made is None
                   else made)
    return Archived(seqs, out, entry.at_ms, entry.commit_seq, commit)


def spill_done_job(record: ClaimRecord, entry: Done, i: int, spilled: SpilledJob) -> Job:
    """The completed job of ``entry``'s ``i``-th position, held at a spill part,
    ``spilled`` its job as its ref shows it: what its archive line is made from
    (as :func:`done_job`: the record's worker, its token, the entry's commit,
    time and result; attempts the spilled ones + 1, its error history kept)."""
    job = claimed_job(record, entry.pos[i], spilled)
    job.status = COMPLETED
    job.claim = None
    job.cancel_ms = None
    job.unlink()
    job.done_ms, job.done_seq, job.done_commit = entry.at_ms, entry.commit_seq, entry.commit
    job.result = entry.results[i]
    job._enc = None
    return job


def spill_job_at(record: ClaimRecord, pos: int, spilled: SpilledJob) -> Job:
    """The job at spill-part position ``pos`` of ``record``, ``spilled`` its job
    as its ref shows it: completed if a done entry names it
    (:func:`spill_done_job`), else claimed (:func:`claimed_job`)."""
    done = done_at(record, pos)
    return claimed_job(record, pos, spilled) if done is None else \
        spill_done_job(record, done[0], done[1], spilled)


def done_count(state: QueueState) -> int:
    """How many completions the records' done entries hold (awaiting archive)."""
    return sum(len(e.pos) for r in state.claim_records.values() for e in r.completions or ())


def segment_slices(state: QueueState,
                   ref: SegmentRef) -> tuple[tuple[int, ClaimRecord, int], ...]:
    """``(position in ref's segment, record, position in the record)`` of each
    job that a claim record of ``state`` holds at a segment part of ``ref`` (not
    settled) or names in a done entry, by segment position: for the readers of
    whole segments (the Spark reader, the chaos checker). A settled position in
    no done entry is elsewhere (a line of the head, or the archive): left out."""
    if ref.key not in state.seg_names:
        return ()
    return held_slices(state.claim_records.values(), ref.key, lambda record: record.segs)


def job_at(record: ClaimRecord, pos: int, ref: SegmentRef, line: bytes) -> Job:
    """The job at segment-part position ``pos`` of ``record``, from its source
    ``line`` of ``ref``'s segment: completed if a done entry names it
    (:func:`done_job`), else claimed, reading its lease through the record."""
    done = done_at(record, pos)
    if done is not None:
        return done_job(record, done[0], done[1], ref, line)
    return as_held(segment_job(record.seqs[pos], line, ref), record, pos)


def purge_held(state: QueueState) -> int:
    """A purge of claimed jobs, for those held at segment parts: every such
    position not settled is settled (gone, as a purge keeps nothing of a job);
    a record left with none held and no done entry leaves the head. Returns how
    many jobs went."""
    purged = 0
    records = state.claim_records
    for record in [r for r in records.values() if r.segs or r.spills]:
        for pos0, count, _, _ in [*(record.segs or ()), *(record.spills or ())]:
            for pos in range(pos0, pos0 + count):
                if not record.is_settled(pos):
                    record.settled |= 1 << pos
                    record.cancel.pop(pos, None)
                    _left_held(state)
                    purged += 1
        record._enc = None
        if record.gone:
            del records[record.fence]
            unname(state, record)
    return purged


def held_seqs_before(state: QueueState, before_seq: int, n: int,
                     status: str | None) -> list[int]:
    """The last ``n`` seqs below ``before_seq`` of the jobs of segment and spill
    parts a page of ``status`` shows (held: claimed; in done entries: completed),
    descending: for the dashboard's paging back. O(spans x n)."""
    if not state.seg_names or status not in (None, CLAIMED, COMPLETED):
        return []
    out: list[int] = []
    for record in state.claim_records.values():
        done = {p for e in record.completions or () for p in e.pos} \
            if status in (None, COMPLETED) else set()
        held = status in (None, CLAIMED)
        for pos0, count, _, _ in record.segs or ():
            first = record.seqs[pos0]
            pos, got = pos0 + min(count, before_seq - first) - 1, 0
            while pos >= pos0 and got < n:
                if (held and not record.is_settled(pos)) or pos in done:
                    out.append(first + pos - pos0)
                    got += 1
                pos -= 1
        for pos0, count, _, _ in record.spills or ():
            seqs = record.seqs
            out += sorted((seqs[pos] for pos in range(pos0, pos0 + count)
                           if seqs[pos] < before_seq and (
                               (held and not record.is_settled(pos)) or pos in done)),
                          reverse=True)[:n]
    return sorted(out, reverse=True)[:n]


def still_held(state: QueueState, first_fence: int, count: int,
                now_ms: int) -> list[LeasedJob]:
    """The jobs still held under the leases numbered ``first_fence`` onwards
    (``count`` of them), in the order they were claimed, with their tokens
    as the claim answered them: the unsettled, unexpired positions of the
    records those lease numbers fall in (a claim is one record, whose fence is
    the claim's first; a version-4 claim may have become several records, split
    where its jobs' leases differed or where one had already settled)."""
    end = first_fence + count
    tag = tokens.tagger(state).tag
    held = []
    for record in state.claim_records.values():  # (ascending fence; a repeat only)
        if record.fence >= end:
            break
        if record.fence + record.n <= first_fence or record.expires_ms <= now_ms:
            continue
        for pos in record.unsettled():
            fence = record.fence + pos
            if fence < first_fence:
                continue
            if fence >= end:
                break
            job = state.jobs.get(record.seqs[pos])
            if job is None and record.spills and record.spill_span(pos) is not None:
                job = spill_view(state, record, pos)  # (held at a spill part: from the cache)
                if job is not None:
                    held.append(LeasedJob(job.id, job.payload, tag(f"{job.id}.{fence}"),
                                          job.attempts, record.expires_ms))
                continue
            if job is None:  # held at a segment part: its line from the held-jobs cache
                span = record.seg_span(pos)
                got = None if span is None else state.held.line(record.fence, span, pos - span[0])
                if got is None:
                    continue  # (not loaded: left to its lease)
                job = segment_job(record.seqs[pos], got[1], got[0])
                held.append(LeasedJob(job.id, job.payload, tag(f"{job.id}.{fence}"),
                                      job.attempts + 1, record.expires_ms))
                continue
            token = job.lease_token
            assert job.status == CLAIMED and token is not None
            held.append(LeasedJob(job.id, job.payload, tag(token), job.attempts,
                                  job.lease_expires_ms))
    return held
