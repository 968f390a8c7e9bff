"""The queue object's bytes as a whole: encoding, and the change tracking that
keeps it incremental.

Three modules share the object's layout: :mod:`broker.model.job_lines` fills one
job's line into byte templates, this module joins the whole object (header,
segment references, job lines, key windows, receipts), and
:mod:`broker.model.format.decode` reads it back. Every other module sees plain
operations: :func:`encode_parts` and :func:`stamp` for a commit, and
:func:`touch` / :func:`added` / :func:`removed` for the change tracking that
:mod:`broker.model.lifecycle` does on every job change.

Encoding is incremental (``bench/state_encode_bench.py`` measures it): each
job keeps its line's bytes (``Job._enc``) until it changes, a bulk-pushed job
is kept as nothing but its line until first touched
(:func:`broker.model.job_lines.new_pending_lines`, :mod:`broker.model.jobtable`),
and jobs are grouped in blocks of ``1 << BLOCK_SHIFT`` seqs whose joined
bytes are kept too, so a commit after changing 1k of 100k jobs re-encodes those
1k, their blocks and a join. The bytes are the product contract:
``tests/unit/broker/model/format/test_codec_golden.py`` pins them.
"""

from __future__ import annotations

import heapq
from typing import Any, cast

import orjson

from broker import timefmt
from broker.model.claim_records import records_bytes
from broker.model.format.segment_format import ref_to_json
from broker.model.format.spill_refs import SpillRef, refs_bytes
from broker.model.format.spill_refs import ref_to_json as spill_json
from broker.model.job import Job
from broker.model.job_lines import (
    COMPLETION,
    completed_from_claimed,
    job_line,
    lease_tail,
    stored_dict,
)
from broker.model.state import (
    FORMAT,
    LINEAGE,
    UNGROUPED_VERSION,
    VERSION,
    KeyEntry,
    QueueState,
    SegmentRef,
)

# -- change tracking (called by broker.model.lifecycle on every job change) ------------

BLOCK_SHIFT = 10  # 1,024 sequence numbers a block


def touch(state: QueueState, job: Job) -> None:
    """Record that ``job`` changed: its bytes and its block's bytes are stale."""
    job._enc = None
    state.dirty_blocks.add(job.seq >> BLOCK_SHIFT)


def added(state: QueueState, job: Job) -> None:
    """Record a new job (always the highest seq so far, so appending keeps order)."""
    block = job.seq >> BLOCK_SHIFT
    state.dirty_blocks.add(block)
    lst = state.block_jobs.get(block)
    if lst is None:
        state.block_jobs[block] = [job.seq]
    else:
        lst.append(job.seq)


def removed(state: QueueState, job: Job) -> None:
    """Record a removed job; its block drops it at the next encode."""
    block = job.seq >> BLOCK_SHIFT
    state.dirty_blocks.add(block)
    state.shrunk_blocks.add(block)


def removed_from(state: QueueState, blocks: set[int]) -> None:
    """Record that jobs were removed from ``blocks`` (:func:`removed` for many)."""
    state.dirty_blocks |= blocks
    state.shrunk_blocks |= blocks



def added_many(state: QueueState, first: int, count: int) -> None:
    """:func:`added` for ``count`` jobs with consecutive seqs from ``first``, above
    any seq so far."""
    block_jobs, dirty = state.block_jobs, state.dirty_blocks
    seq, stop = first, first + count
    while seq < stop:
        block = seq >> BLOCK_SHIFT
        end = min(stop, (block + 1) << BLOCK_SHIFT)  # the next block's first seq
        block_jobs.setdefault(block, []).extend(range(seq, end))
        dirty.add(block)
        seq = end


def inserted_many(state: QueueState, first: int, count: int) -> None:
    """:func:`added_many` for seqs that may lie below others (jobs taken from a
    segment object): a block's list is sorted again where they land inside it."""
    block_jobs, dirty = state.block_jobs, state.dirty_blocks
    seq, stop = first, first + count
    while seq < stop:
        block = seq >> BLOCK_SHIFT
        end = min(stop, (block + 1) << BLOCK_SHIFT)
        run = block_jobs.setdefault(block, [])
        below = bool(run) and run[-1] > seq
        run.extend(range(seq, end))
        if below:
            run.sort()
        dirty.add(block)
        seq = end


def reset_blocks(state: QueueState) -> None:
    """Forget every cached block: the next encode joins every job's line again
    (after a load, when no block bytes exist yet)."""
    block_jobs: dict[int, list[int]] = {}
    for seq in state.jobs:
        block_jobs.setdefault(seq >> BLOCK_SHIFT, []).append(seq)
    state.block_jobs = block_jobs
    state.blocks = {}
    state.dirty_blocks = set(block_jobs)
    state.shrunk_blocks = set()


# -- encoding ------------------------------------------------------------------


def version_of(state: QueueState) -> int:
    """The format version ``state`` is written as: :data:`VERSION` while a job in
    the head has a group or a segment ref is grouped, else :data:`UNGROUPED_VERSION`
    (so a queue that uses no groups keeps the bytes, and the readers, of brokers
    from before groups).
    Amortised O(1): each grouped seq leaves the heap once, when it has left the head."""
    grouped, entries = state.grouped, state.jobs.entries
    while grouped and grouped[0] not in entries:
        heapq.heappop(grouped)
    if not grouped and any(ref.groups is not None for ref in state.segment_refs):
        return VERSION  # (a grouped segment's ref: an older broker must not take it)
    return VERSION if grouped else UNGROUPED_VERSION


def _header(state: QueueState) -> dict[str, Any]:
    broker = state.broker
    header = {
        "format": FORMAT,
        "version": VERSION if state.settings.groups else version_of(state),  # (v6: groups)
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
        "settings": state.settings.stored(),
        "counters": state.counters.stored(),
    }
    if state.token_key:  # (a state made without one is written without one)
        header["token_key"] = state.token_key
    if state.untagged_fences:  # (leases from before the key: see broker.model.tokens)
        header["untagged_fences"] = state.untagged_fences
    return header


def _refs_bytes(refs: list[SegmentRef]) -> bytes:
    """The head's ``"segments"`` field, one reference a line (``[]`` for none: the
    field is always there, for jq recipes), with its leading ``,\n``."""
    if not refs:
        return b',\n"segments":[]'
    return b',\n"segments":[\n' + b",\n".join(
        [orjson.dumps(ref_to_json(ref)) for ref in refs]) + b"\n]"


def _key_bytes(key: str, entry: KeyEntry) -> bytes:
    enc = entry.enc
    if enc is None:
        enc = entry.enc = b",\n" + orjson.dumps([key, entry.job_id, timefmt.fmt(entry.at_ms)])
    return enc


def _refresh_blocks(state: QueueState) -> None:
    """Rebuild the bytes of every dirty block, dropping jobs no longer in the state."""
    dirty = state.dirty_blocks
    if not dirty:
        return
    entries: dict[int, Any] = state.jobs.entries  # (Job | bytes: see the join below)
    entries_get = entries.__getitem__
    blocks, lists, shrunk = state.blocks, state.block_jobs, state.shrunk_blocks
    for block in dirty:
        lst = lists.get(block)
        if lst is None:
            live = []
        elif block in shrunk:
            live = [seq for seq in lst if seq in entries]
        else:
            live = lst
        if not live:
            lists.pop(block, None)
            blocks.pop(block, None)
            continue
        if len(live) != len(lst or ()):
            lists[block] = live
        # Each entry is a job, or its line while untouched (see broker.model.jobtable). This
        # runs once per job of every changed block: a class test, not isinstance()
        # (bench/broker_bench.py, cycle rows).
        blocks[block] = b"".join([e if e.__class__ is bytes else (e._enc or job_line(e))
                                  for e in map(entries_get, live)])
    dirty.clear()
    shrunk.clear()


def _spills(state: QueueState) -> list[SpillRef]:
    # (the state types them by what it asks of them: it sits below this module)
    return cast("list[SpillRef]", state.spill_refs)


def encode(state: QueueState) -> bytes:
    """The object's bytes (see :func:`encode_parts`)."""
    return b"".join(encode_parts(state))


def encode_parts(state: QueueState) -> list[bytes]:
    """The object's bytes as chunks to write in order, re-encoding only what changed.

    Jobs keep their own bytes and blocks of 1,024 jobs keep their joined
    bytes, so a commit costs the changed jobs, the changed blocks and one
    list of the blocks (no copy of the whole object). Each job's bytes start with their ``,\n``
    separator; the first one is cut off. The header's fields come first, on one
    line, then the segment references (:func:`_refs_bytes`), the claim records
    (:func:`broker.model.claim_records.records_bytes`), the spill references
    (:func:`broker.model.format.spill_refs.refs_bytes`), then the jobs.
    """
    _refresh_blocks(state)
    head = orjson.dumps(_header(state))
    parts: list[bytes] = [head[:-1], _refs_bytes(state.segment_refs),
                          records_bytes(state.claim_records),
                          refs_bytes(_spills(state)),
                          b',\n"jobs":[\n']
    blocks = state.blocks
    jobs = [blocks[block] for block in sorted(state.block_jobs)]
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
    out["segments"] = [ref_to_json(ref) for ref in state.segment_refs]
    out["claims"] = [record.to_json() for record in state.claim_records.values()]
    out["spills"] = [spill_json(ref) for ref in _spills(state)]
    out["jobs"] = [stored_dict(job) for job in state.jobs.peek()]
    out["keys"] = [[k, e.job_id, timefmt.fmt(e.at_ms)] for k, e in state.keys.items()]
    out["once"] = [[k, timefmt.fmt(e.at_ms)] for k, e in state.once.items()]
    out["receipts"] = state.receipts.to_plain()
    return orjson.dumps(out)


def stamp(state: QueueState, writer: str, now_ms: int, commit: str | None = None) -> None:
    """Mark the state as the next commit (``seq`` + 1) by ``writer``, made by the
    write attempt ``commit`` (a fresh unique id per attempt; see :mod:`broker.commit.loop`)."""
    state.seq += 1
    state.writer = writer
    state.updated_ms = now_ms
    state.commit = commit
    if commit is not None:
        state.lineage = [*state.lineage[-(LINEAGE - 1):], commit]
    claimed, jobs, dirty = state.claimed_lines, state.jobs, state.dirty_blocks
    commit_bytes = (commit or "").encode()
    times: dict[int | None, bytes] = {}  # the jobs of one complete share their time
    for seq in state.completed.get(state.seq, ()):  # completed by this very commit
        job = jobs[seq]
        job.done_commit = commit
        job._enc = None  # touch(), inlined: its line carries the commit's id
        dirty.add(seq >> BLOCK_SHIFT)
        line = claimed.get(seq)
        if line is not None and commit is not None:
            # job_line()'s bytes, from the claimed line (same fields, one status
            # apart; the status is the first string after the digits of id and
            # seq): a third of the cost per completed job (broker_bench cycle rows).
            done = times.get(job.done_ms)
            if done is None:
                done = times[job.done_ms] = timefmt.fmt_bytes(job.done_ms or 0)
            tail = lease_tail(*job.lease_numbers())
            job._enc = completed_from_claimed(
                line.replace(b'"status":"claimed"', b'"status":"completed"', 1),
                job.lease_token or "", tail) \
                + COMPLETION % (done, job.done_seq, commit_bytes,
                                 b"null" if job.result is None else job.result)
    claimed.clear()
    if state.done_commits:  # completions held in claim records: their done entries
        for fence in state.done_commits.get(state.seq, ()):
            record = state.claim_records[fence]
            for entry in record.completions or ():
                if entry.commit_seq == state.seq:
                    entry.commit = commit
                    record._enc = None
    state.receipts.unwritten_since = None  # this write carries them
