"""Where a job changes status: the table of allowed moves and the one entry
point that makes them, keeping the status, the heaps and the cached encoding
in step.

h11 checks every event against a table of the states a connection may move
between; this does the same for a job::

    (new) -push-> pending -claim-> claimed -complete-> completed -archived-> (gone)
                   ^   ^  |          |   |
                   |   '-retry, ----'   '-last attempt failed-> dead
                   |     reclaim,  |                             |
                   |     release   '-cancel-> cancelled -archived-> (gone)
                   '------------------redrive--------------------'
    purge: pending, claimed or dead -> (gone)

A pending job's cancel moves it to cancelled at once; a claimed job's marks
it (``Job.cancel_ms``, a change within a status) and it moves to cancelled
at its worker's next call about it or when its lease runs out, never to
pending, dead or completed (see :mod:`broker.model.cancels`).

:data:`MOVES` is that table, and :func:`move` the entry point every rule in
:mod:`broker.model.transitions` goes through. A move the table does not allow is a
bug in the rules, not a bad request: it raises :class:`IllegalMove`, which is
deliberately not an :class:`~broker.errors.OsqueueError`, so the commit loop
treats it as a fault (it re-reads the committed object, see
:mod:`broker.commit.loop`) rather than as a refusal that changed nothing.

The loops that run once per job of a large call (a push, a bulk push, a claim,
a complete) are written out here rather than calling :func:`move` per job:
each checks its one move against the table once per call, then does per job
exactly what :func:`move` would. ``bench/broker_bench.py`` (push, claim and
complete rows) and ``bench/state_encode_bench.py`` are what justify them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

from broker.model.claim_records import ClaimRecord
from broker.model.format import codec
from broker.model.groups.counts import GroupState, moved_hook, settle_hook
from broker.model.held import unname
from broker.model.indexes import (
    SEQ_MASK,
    compact_leases,
    lease_key,
    promote_due,
    ready_key,
    schedule,
    timed_key,
)
from broker.model.job import (
    CANCELLED,
    CLAIMED,
    COMPLETED,
    DEAD,
    FINISHED,
    JOB_OVERHEAD_BYTES,
    PENDING,
    Job,
    JobIds,
    token_seq,
)
from broker.model.job_lines import (
    claim_tail,
    first_claim_line,
    new_grouped_pending_lines,
    new_pending_lines,
    pending_from_line,
)
from broker.model.ops import ItemResults, LeasedJobs
from broker.model.state import QueueState
from broker.wire import ItemResult, compact

NEW = "(new)"  # not in the state yet
GONE = "(gone)"  # removed from the state

#: Every status a job may move to from each status (and from NEW, to GONE).
#: A lease's renewal (heartbeat, takeover) and a completion's commit id are
#: changes within a status, not moves.
MOVES: dict[str, frozenset[str]] = {
    NEW: frozenset({PENDING}),  # push
    PENDING: frozenset({CLAIMED, CANCELLED, GONE}),  # claim; cancel; purge
    # retry/reclaim/release; last try; complete; a marked job's end; purge
    CLAIMED: frozenset({PENDING, DEAD, COMPLETED, CANCELLED, GONE}),
    DEAD: frozenset({PENDING, GONE}),  # redrive; purge
    COMPLETED: frozenset({GONE}),  # dropped once its archive object is written
    CANCELLED: frozenset({GONE}),  # the same
}


class IllegalMove(AssertionError):
    """A rule tried to move a job in a way :data:`MOVES` forbids (a bug)."""


def check_move(frm: str, to: str) -> None:
    """Raise :class:`IllegalMove` unless :data:`MOVES` allows ``frm`` -> ``to``."""
    if to not in MOVES.get(frm, ()):
        raise IllegalMove(f"a job may not move from {frm} to {to}")


def move(state: QueueState, job: Job, to: str, now_ms: int) -> None:
    """Move ``job`` to status ``to`` (or :data:`GONE`): the one entry point.

    The caller sets the job's other fields first (a lease for claimed, none
    for pending or dead, ``done_*`` and ``result`` for completed, ``done_*``
    and ``cancel_ms`` for cancelled); this sets
    the status, indexes the job (ready or delayed heap for pending at
    ``now_ms``, lease heap for claimed, the commit's completions for
    completed), marks its encoding stale, and keeps the size estimate. A job
    not yet in ``state`` moves from :data:`NEW` and is added. Raises
    :class:`IllegalMove`, having changed nothing, for a move the table
    forbids or a job whose fields do not fit its new status.
    """
    seq = job.seq
    frm = job.status if state.jobs.get(seq) is job else NEW
    check_move(frm, to)
    if to == GONE:
        if frm == CLAIMED:
            settle(state, job)
        del state.jobs[seq]
        codec.removed(state, job)
        state.approx_bytes -= job.size_estimate()
        if state.groups is not None and job.group is not None:  # (a fifo group's head, dead)
            moved_hook(state.groups, job, frm, to, now_ms)
        return
    leased = job.lease_token is not None
    if (to == CLAIMED and job.claim not in state.claim_records) or \
            (to in (CLAIMED, COMPLETED) and not leased) or (to in (PENDING, DEAD) and leased) or \
            (to in FINISHED) != (job.done_seq is not None) or \
            (job.cancel_ms is not None and to not in (CLAIMED, CANCELLED)) or \
            (to == CANCELLED and job.cancel_ms is None):
        raise IllegalMove(f"job {job.id} moving to {to} has the fields of another status")
    if frm == CLAIMED:
        settle(state, job)
    job.status = to
    if frm == NEW:
        state.jobs[seq] = job
        codec.added(state, job)
        state.approx_bytes += job.size_estimate()
    else:
        codec.touch(state, job)
    if to == PENDING:
        schedule(state, job, now_ms)
    elif to == CLAIMED:
        assert job.claim is not None  # (checked above)
        job.rec = state.claim_records[job.claim]  # (the lease is the record's from now on)
        heapq.heappush(state.leases, lease_key(job.lease_expires_ms, job.claim))
    elif to in FINISHED:
        assert job.done_seq is not None
        state.completed.setdefault(job.done_seq, []).append(seq)
        state.approx_bytes += len(job.result or b"")
    if state.groups is not None and job.group is not None:  # (a fifo group's head, dead)
        moved_hook(state.groups, job, frm, to, now_ms)


# -- changes within a status --------------------------------------------------------


def settle(state: QueueState, job: Job, tell_groups: bool = True) -> None:
    """Mark ``job``'s position in its claim record settled (it leaves claimed,
    whatever for); a record with every position settled leaves the head. The
    caller moves the job on (:func:`move` calls this). ``tell_groups`` False:
    the caller tells the groups itself (:func:`complete_held`, once for all
    its jobs)."""
    fence = job.claim
    record = None if fence is None else state.claim_records.get(fence)
    if record is None or fence is None:
        raise IllegalMove(f"claimed job {job.id} is in no claim record")
    pos = record.position(job.seq)
    if tell_groups and state.groups is not None:  # (its group holds one fewer)
        settle_hook(state.groups, job)
    record.settled |= 1 << pos
    record.cancel.pop(pos, None)
    record._enc = None
    job.unlink()
    job.claim = None
    if record.gone:
        del state.claim_records[fence]
        if record.segs or record.spills:
            unname(state, record)


def extend_claim(state: QueueState, record: ClaimRecord, lease_ms: int, now_ms: int) -> None:
    """Renew a claim's lease (a heartbeat): ``lease_ms`` from ``now_ms``, for every
    job the claim still holds. One edit of the head (the record's line: claimed
    lines do not carry the lease) and O(1) in memory: the jobs read their lease
    through the record (:attr:`Job.rec`), and the lease heap gets one entry."""
    if record.fence not in state.claim_records:
        raise IllegalMove(f"claim record {record.fence} is not in the head")
    record.lease_ms = lease_ms
    record.expires_ms = expires = now_ms + lease_ms
    record.heartbeat_ms = now_ms
    record._enc = None
    heapq.heappush(state.leases, lease_key(expires, record.fence))


def claim_of(state: QueueState, job: Job) -> ClaimRecord:
    """The claim record of the claimed ``job``."""
    record = None if job.claim is None else state.claim_records.get(job.claim)
    if record is None or job.status != CLAIMED:
        raise IllegalMove(f"job {job.id} is {job.status} and in no claim record")
    return record


def mark_cancel(state: QueueState, job: Job, now_ms: int) -> None:
    """Mark a claimed job for cancellation at ``now_ms`` (it stays claimed): in its
    claim record (the head), and on the job."""
    if job.status != CLAIMED or job.cancel_ms is not None:
        raise IllegalMove(f"job {job.id} is {job.status}; only a claimed job is marked, once")
    record = claim_of(state, job)
    record.cancel[record.position(job.seq)] = now_ms
    record._enc = None
    job.cancel_ms = now_ms


def restart_leases(state: QueueState, now_ms: int) -> None:
    """Give every claim a fresh lease of its own length from ``now_ms`` (a new
    broker's clock: what the old one wrote no longer counts): one edit per
    claim record (its jobs read it through)."""
    for record in state.claim_records.values():
        record.expires_ms = now_ms + record.lease_ms
        record._enc = None
    compact_leases(state)


def token_job(state: QueueState, token: str) -> Job | None:
    """The job a fencing token names (whether or not the token is still good)."""
    seq = token_seq(token)
    return None if seq is None else state.jobs.get(seq)


def live_job(state: QueueState, token: str, now_ms: int) -> Job | None:
    """The job ``token`` still holds at ``now_ms``, or None if the token is stale:
    the job is claimed under this very token and its lease has not expired."""
    job = token_job(state, token)
    if job is None or job.status != CLAIMED or job.lease_token != token or \
            job.lease_expires_ms <= now_ms:
        return None
    return job


# -- the per-job loops of large calls (see the module docstring) ----------------------


def add_pending_bulk(state: QueueState, payloads: Sequence[bytes], now_ms: int,
                     groups: Sequence[str | None] | None = None) -> JobIds:
    """Add a pending job with default options for each payload (JSON bytes), due
    at ``now_ms``, each in its group of ``groups`` if given (None: no group);
    return their ids. The caller has checked sizes, groups and room.

    A bulk push of a million jobs comes here: each job's line is filled in
    from one template per push (:func:`broker.model.job_lines.new_pending_lines`), the
    jobs are kept as those lines until first touched (see
    :mod:`broker.model.jobtable`), and the ready heap grows by a run of ascending
    keys.
    """
    if not payloads:
        return JobIds(0, 0)
    check_move(NEW, PENDING)
    counters = state.counters
    first = counters.enqueued + 1
    if groups is None:
        lines = new_pending_lines(first, payloads, now_ms, state.settings.max_attempts)
    else:  # (their groups' heaps take them from the ready heap: segments/grouped.py)
        lines = new_grouped_pending_lines(first, payloads, groups, now_ms,
                                          state.settings.max_attempts)
        state.grouped.extend(  # (ascending: still a heap)
            range(first, first + len(groups)) if None not in groups else
            (seq for seq, group in enumerate(groups, first) if group is not None))
    count = len(lines)
    counters.enqueued += count
    state.jobs.add_lines(first, lines)
    codec.added_many(state, first, count)
    ready = state.ready
    base = ready_key(0, now_ms, 0)
    entries = range(base + first, base + first + count)
    if ready:
        for entry in entries:
            heapq.heappush(ready, entry)
    else:
        ready.extend(entries)  # ascending, so already a heap
    state.approx_bytes += sum(map(len, payloads)) + JOB_OVERHEAD_BYTES * count
    return JobIds(first, count)


def add_pending(state: QueueState, jobs: list[Job], now_ms: int) -> None:
    """Add new jobs (seqs consecutive, above any so far) as pending at ``now_ms``.

    What :func:`move` from :data:`NEW` to pending does, per job, written out
    for a push of many jobs with options (``bench/broker_bench.py``, push rows).
    """
    if not jobs:
        return
    check_move(NEW, PENDING)
    all_jobs = state.jobs
    approx = 0
    for job in jobs:
        job.status = PENDING
        all_jobs[job.seq] = job
        schedule(state, job, now_ms)
        if job.group is not None and state.groups is not None:
            moved_hook(state.groups, job, NEW, PENDING, now_ms)
        approx += job.size_estimate()
    codec.added_many(state, jobs[0].seq, len(jobs))
    state.approx_bytes += approx


def open_claim(state: QueueState, worker: str, lease_ms: int, now_ms: int) -> ClaimRecord:
    """A new claim record for a claim by ``worker`` at ``now_ms`` (empty; its
    fences start after every one granted). :func:`claim_ready` fills it;
    :func:`close_claim` puts it in the head."""
    return ClaimRecord(state.counters.fence + 1, worker, lease_ms, now_ms + lease_ms, now_ms)


def close_claim(state: QueueState, record: ClaimRecord) -> None:
    """Put the claim record filled by :func:`claim_ready` in the head (unless it
    claimed nothing), its lease in the lease heap."""
    if record.seqs:
        if record.fence + record.n - 1 != state.counters.fence:
            raise IllegalMove(f"claim record {record.fence} does not end at the last fence")
        state.claim_records[record.fence] = record
        heapq.heappush(state.leases, lease_key(record.expires_ms, record.fence))


def claim_ready(state: QueueState, worker: str, max_jobs: int, lease_ms: int,
                now_ms: int, tag: Callable[[str], str],
                until_key: int | None = None, record: ClaimRecord | None = None) -> LeasedJobs:
    """Claim up to ``max_jobs`` runnable pending jobs in claim order (priority
    desc, run-at, seq) under fresh leases of ``lease_ms`` for ``worker``; each
    job's token is answered as ``tag`` makes it (see :mod:`broker.model.tokens`).
    With ``until_key``, stop before the first ready entry at or above it (a
    segment's next job comes first: :mod:`broker.model.segments.claims`).
    The jobs join ``record`` (from :func:`open_claim`; the caller closes it),
    or, without one, a claim record of their own, put in the head here.

    Per job, what :func:`move` to claimed does, written out: this loop runs
    once per claimed job (``bench/broker_bench.py``, claim rows). The jobs
    are answered column-wise, no object per job (see :mod:`broker.model.columns`).
    """
    check_move(PENDING, CLAIMED)
    promote_due(state, now_ms)
    out = LeasedJobs()
    ids, payloads, tokens, attempts, expiries = out.columns
    ready, entries = state.ready, state.jobs.entries
    get, from_line, splice = entries.get, pending_from_line, first_claim_line
    counters, dirty, shift = state.counters, state.dirty_blocks, codec.BLOCK_SHIFT
    own = record is None
    if record is None:  # (open_claim(), inlined)
        record = ClaimRecord(counters.fence + 1, worker, lease_ms, now_ms + lease_ms, now_ms, [])
    base = record.fence
    if base + len(record.seqs) != counters.fence + 1:
        raise IllegalMove(f"claim record {base} is not the last claim")
    expires = record.expires_ms
    tail = claim_tail(base)
    held = record.seqs
    heappop, heappush = heapq.heappop, heapq.heappush
    while ready and len(ids) < max_jobs and (until_key is None or ready[0] < until_key):
        entry = heappop(ready)
        seq = entry & SEQ_MASK
        job = get(seq)
        line = None
        if isinstance(job, bytes):  # untouched since its bulk push (JobTable.get, inlined)
            line = job
            # A line's one ready entry is its push's (nothing else indexes a line), so
            # the stale-entry test below is not needed for it.
            job = entries[seq] = from_line(seq, line)
        elif job is None or job.status != PENDING or ready_key(
                job.priority, job.run_at_ms, seq) != entry:
            continue  # a stale entry: the job moved on
        if job.run_at_ms > now_ms:  # indexed early (clock moved back, or after a load)
            heappush(state.delayed, timed_key(job.run_at_ms, seq))
            continue
        counters.fence += 1
        job_id = "j%010d" % seq  # noqa: UP031 (state.job_id_for, inlined)
        token = f"{job_id}.{counters.fence}"
        job.status = CLAIMED
        job.attempts += 1
        job.claim = base
        held.append(seq)
        job.lease_token = token
        job.rec = record  # (worker, length, expiry, heartbeat: the record's)
        # codec.touch(), inlined; a job fresh from its line gets its new line now
        job._enc = None if line is None else splice(line, tail)
        dirty.add(seq >> shift)
        ids.append(job_id)
        payloads.append(job.payload)
        tokens.append(tag(token))
        attempts.append(job.attempts)
        expiries.append(expires)
    record._pos = None
    if own and held:  # (close_claim(), inlined: its fences end at counters.fence)
        state.claim_records[base] = record
        heappush(state.leases, lease_key(expires, base))
    return out


def complete_held(state: QueueState, items: Iterable[tuple[str, bytes | None]], now_ms: int,
                  stored: Callable[[str], str | None],
                  stale: Callable[[str, str | None], ItemResult],
                  held: Callable[[str, str, int, bytes | None], ItemResult | None] | None = None,
                  ) -> tuple[ItemResults, list[int]]:
    """Complete the job each live token holds, with its result (JSON bytes or
    None), in the commit after ``state.seq``. Each item's token is a client's:
    ``stored(token)`` is the stored token it stands for, or None if its tag
    does not verify. Answers ``stale(token, stored token or None)`` for the
    tokens that hold no live lease, and for those whose job is marked for
    cancellation (``stale`` ends such a job cancelled). ``held(wire, token, seq,
    result)``, for a token whose job has no line, answers it if a claim record
    holds it at a segment part (:mod:`broker.model.held`), else None. Returns
    the answers in order (column-wise, see :mod:`broker.model.columns`, each
    with the client's token) and the lease numbers completed.

    Per job, what :func:`live_job` and :func:`move` to completed do, written
    out: this loop runs once per completed job (``bench/broker_bench.py``,
    complete rows).
    """
    check_move(CLAIMED, COMPLETED)
    commit_seq = state.seq + 1
    answers = ItemResults()
    answered, oks, reasons, statuses = answers.columns
    get, dirty, shift = state.jobs.entries.get, state.dirty_blocks, codec.BLOCK_SHIFT
    claimed_lines = state.claimed_lines
    records = state.claim_records
    records_get = records.get
    done: list[int] = []  # job seqs
    fences: list[int] = []
    added_bytes = 0
    # The groups of the jobs settled, told once for all (GroupState.settle_many), not
    # a call chain a job: told before any other call that may change a group (stale,
    # held), so they see the groups as one by one would (groups_model_bench --instructions)
    groups = state.groups
    settling: list[str | None] = []
    for wire, value in items:
        token = stored(wire)
        if token is None:
            _tell_settled(groups, settling)
            answers.append(stale(wire, None))  # never looked up
            continue
        seq = token_seq(token)
        job = None if seq is None else get(seq)
        if job is None and held is not None and seq is not None:
            _tell_settled(groups, settling)
            if (answer := held(wire, token, seq, value)) is not None:
                # (held at a segment part: its record's done entry; answers.append(), inlined)
                answered.append(answer[0])
                oks.append(answer[1])
                reasons.append(answer[2])
                statuses.append(answer[3])
                continue
        if job is None or isinstance(job, bytes) or (lease := job.rec) is None or \
                job.status != CLAIMED or job.lease_token != token or \
                lease.expires_ms <= now_ms or \
                job.cancel_ms is not None:  # (a marked job ends cancelled: see stale)
            _tell_settled(groups, settling)
            answers.append(stale(wire, token))  # (a job kept as its line is pending)
            continue
        assert seq is not None
        record = records_get(job.claim or 0)
        if record is not None and len(record.seqs) == 1 and not record.segs \
                and not record.spills:  # settle(), inlined
            del records[record.fence]
            job.unlink()
            job.claim = None
        else:
            settle(state, job, False)
        if groups is not None:
            settling.append(job.group)
        job.status = COMPLETED
        job.done_ms = now_ms
        job.done_seq = commit_seq
        job.result = value if value is None else compact(value)  # (kept until archived)
        if job._enc is not None and job.key is None and not job.errors:
            claimed_lines[seq] = job._enc  # see codec.stamp
        job._enc = None  # codec.touch(), inlined
        dirty.add(seq >> shift)
        done.append(seq)
        fences.append(int(token[token.rindex(".") + 1:]))  # Lease.fence, inlined
        if value is not None:
            added_bytes += len(value)
        answered.append(wire)
        oks.append(True)
        reasons.append(None)
        statuses.append(COMPLETED)
    _tell_settled(groups, settling)
    if done:
        state.completed.setdefault(commit_seq, []).extend(done)
        state.approx_bytes += added_bytes
    return answers, fences


def _tell_settled(groups: GroupState | None, settling: list[str | None]) -> None:
    """Tell ``groups`` (if any) the groups of the jobs settled so far, ``settling``
    (emptied): :func:`complete_held`'s one :meth:`GroupState.settle_many` for them."""
    if settling:
        assert groups is not None
        groups.settle_many(settling)
        settling.clear()


def drop_completed(state: QueueState, commit_seq: int) -> int:
    """Move every job the commit ``commit_seq`` completed (or cancelled) to :data:`GONE` (their
    archive object is written); returns how many. What :func:`move` does per
    job, written out: this runs once per completed job
    (``bench/broker_bench.py``, cycle rows)."""
    check_move(COMPLETED, GONE)
    check_move(CANCELLED, GONE)
    jobs, shift = state.jobs.entries, codec.BLOCK_SHIFT
    blocks: set[int] = set()
    freed = dropped = 0
    for seq in state.completed.pop(commit_seq, ()):
        job = jobs.get(seq)
        if isinstance(job, Job) and job.status in FINISHED and job.done_seq == commit_seq:
            del jobs[seq]
            blocks.add(seq >> shift)  # codec.removed(), for the lot below
            freed += job.size_estimate()
            dropped += 1
    codec.removed_from(state, blocks)
    state.approx_bytes -= freed
    return dropped
