"""Reading the head's claim records (``"claims"``, format version 5) and making
them from a version-4 head's claimed lines.

:func:`records_from_json` checks every record on its own and against the others
(ascending, disjoint fences, each field typed and in range); :func:`link` then
ties the records to the jobs they hold (every unsettled position an inline
claimed line naming its record, every claimed line in exactly one record) and
points each job at its record for its lease. :func:`records_from_v4` makes the
records of a version-4 head, whose claimed lines each carry their lease:
consecutive lease numbers with the same worker, length, expiry and heartbeat
(how a claim of many jobs was granted) make one record, any other claimed job
a record of its own; lease numbers, so tokens, do not change. Every refusal
raises ``ValueError`` naming the record (``claims[i]``, its fence) and what is
wrong; :mod:`broker.model.format.decode` turns it into ``CorruptState``.
"""

from __future__ import annotations

from typing import Any

import orjson

from broker import timefmt
from broker.limits import MAX_CLAIM_JOBS, MAX_LEASE_S
from broker.model.claim_records import ClaimRecord, Done, bits_of_runs, expand_runs, seq_runs
from broker.model.format.segment_format import MAX_SEGMENT_JOBS
from broker.model.format.spill_format import MAX_SPILL_JOBS
from broker.model.format.spill_refs import SpillRef
from broker.model.indexes import TIME_MASK
from broker.model.job import CLAIMED, PENDING, job_id_for
from broker.model.state import QueueState
from broker.wire import compact

_FIELDS = frozenset({"fence", "n", "worker", "lease_s", "expires_at", "heartbeat_at", "parts",
                     "settled", "cancel", "done"})
_DONE_FIELDS = frozenset({"commit_seq", "commit", "at", "pos", "results"})
_FENCE_MAX = 1 << 62


def _int(raw: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not lo <= raw <= hi:
        raise ValueError(f"{what} must be an integer within [{lo}, {hi}], got {raw!r}")
    return raw


def _time(raw: Any, what: str) -> int:
    if not isinstance(raw, str):
        raise ValueError(f"{what} must be a time string, got {raw!r}")
    try:
        ms = timefmt.parse(raw)
    except ValueError:
        raise ValueError(f"{what} {raw!r} is not a time") from None
    if not 0 <= ms <= TIME_MASK:
        raise ValueError(f"{what} {raw!r} is before 1970 or after 9999")
    return ms


def _runs(raw: Any, what: str, lo: int, hi: int) -> list[int]:
    """Runs ``[from, count, ...]``: counts >= 1, ascending and apart, within ``[lo, hi]``."""
    if not isinstance(raw, list) or not raw or len(raw) % 2:
        raise ValueError(f"{what} must be a non-empty list of [from, count] runs, got {raw!r}")
    end = lo
    for i in range(0, len(raw), 2):
        start = _int(raw[i], f"{what} run start", lo, hi)
        count = _int(raw[i + 1], f"{what} run count", 1, hi - start + 1)
        if start < end or start + count - 1 > hi:
            raise ValueError(f"{what} runs must be ascending, apart and within [{lo}, {hi}], "
                             f"got {raw!r}")
        end = start + count
    return list(raw)


def record_from_json(raw: Any, where: str) -> ClaimRecord:
    """One record, checked on its own (``where`` names it: ``claims[i]``)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object")
    fence = _int(raw.get("fence"), f"{where} fence", 1, _FENCE_MAX)
    where = f"{where} (fence {fence})"
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ValueError(f"{where} has unknown fields {sorted(unknown)}")
    n = _int(raw.get("n"), f"{where} n", 1, MAX_CLAIM_JOBS)
    worker = raw.get("worker")
    if not isinstance(worker, str) or not worker:
        raise ValueError(f"{where} worker must be a non-empty string, got {worker!r}")
    lease_s = raw.get("lease_s")
    if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or \
            not 0 < lease_s <= MAX_LEASE_S:
        raise ValueError(f"{where} has lease_s {lease_s!r}; it must be in (0, {MAX_LEASE_S:g}]")
    parts = raw.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ValueError(f"{where} parts must be a non-empty list")
    seqs: list[int] = []
    segs: list[tuple[int, int, str, int]] = []
    spills: list[tuple[int, int, str, int]] = []
    for part in parts:
        if isinstance(part, dict) and set(part) == {"spill", "at", "seq"}:
            _spill_part(part, where, seqs, spills)
            continue
        if isinstance(part, dict) and set(part) == {"seg", "at"}:
            key = part["seg"]
            if not isinstance(key, str) or not key:
                raise ValueError(f"{where} seg part must name a segment key, got {key!r}")
            runs = _runs(part["at"], f"{where} seg part at", 0, MAX_SEGMENT_JOBS - 1)
            for i in range(0, len(runs), 2):
                segs.append((len(seqs), runs[i + 1], key, runs[i]))
                seqs += [0] * runs[i + 1]  # (its seqs: link_segments, from the ref)
            continue
        if not isinstance(part, dict) or set(part) != {"seq"}:
            kind = sorted(part) if isinstance(part, dict) else part
            raise ValueError(f"{where} has a part {kind!r}; this osqueue reads only "
                             "{\"seq\": runs}, {\"seg\": key, \"at\": runs} and "
                             "{\"spill\": key, \"at\": runs, \"seq\": runs} parts "
                             "(upgrade osqueue for others)")
        runs = part["seq"]
        if not isinstance(runs, list) or not runs or len(runs) % 2:
            raise ValueError(f"{where} seq part must be runs [first, count, ...], got {runs!r}")
        for i in range(0, len(runs), 2):
            _int(runs[i], f"{where} seq", 1, _FENCE_MAX)
            _int(runs[i + 1], f"{where} seq run count", 1, MAX_CLAIM_JOBS)
        seqs += expand_runs(runs)
    if len(seqs) != n:
        raise ValueError(f"{where} has n {n} but its parts hold {len(seqs)} positions")
    inline = len(seqs) - sum(span[1] for span in segs)
    if len({seq for seq in seqs if seq}) != inline:
        raise ValueError(f"{where} names a job twice")
    record = ClaimRecord(
        fence, worker, round(float(lease_s) * 1000),
        _time(raw.get("expires_at"), f"{where} expires_at"),
        _time(raw.get("heartbeat_at"), f"{where} heartbeat_at"), seqs)
    record.segs = segs or None
    record.spills = spills or None
    if "settled" in raw:
        record.settled = bits_of_runs(_runs(raw["settled"], f"{where} settled", 0, n - 1))
    if "done" in raw:
        record.completions = _done_from(raw["done"], record, where)
    if record.gone:
        raise ValueError(f"{where} has every position settled; such a record leaves "
                         "the head")
    cancel = raw.get("cancel", [])
    if "cancel" in raw and (not isinstance(cancel, list) or not cancel):
        raise ValueError(f"{where} cancel must be a non-empty list of [position, time]")
    for mark in cancel:
        if not isinstance(mark, list) or len(mark) != 2:
            raise ValueError(f"{where} cancel mark {mark!r} is not [position, time]")
        pos = _int(mark[0], f"{where} cancel position", 0, n - 1)
        if record.is_settled(pos) or pos in record.cancel:
            raise ValueError(f"{where} marks position {pos} for cancel, which is settled "
                             "or marked twice")
        record.cancel[pos] = _time(mark[1], f"{where} cancel time")
    return record


def _spill_part(part: dict[str, Any], where: str, seqs: list[int],
                spills: list[tuple[int, int, str, int]]) -> None:
    """Read a spill part (``{"spill": key, "at": runs, "seq": runs}``: positions
    of the spill object ``key`` and their jobs' seqs, as many) onto ``seqs``
    and ``spills``."""
    key = part["spill"]
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where} spill part must name a spill object key, got {key!r}")
    at = _runs(part["at"], f"{where} spill part at", 0, MAX_SPILL_JOBS - 1)
    runs = part["seq"]
    if not isinstance(runs, list) or not runs or len(runs) % 2:
        raise ValueError(f"{where} spill part seq must be runs [first, count, ...], got {runs!r}")
    for i in range(0, len(runs), 2):
        _int(runs[i], f"{where} spill part seq", 1, _FENCE_MAX)
        _int(runs[i + 1], f"{where} spill part seq run count", 1, MAX_CLAIM_JOBS)
    held = expand_runs(runs)
    if len(held) != sum(at[1::2]):
        raise ValueError(f"{where} spill part names {len(held)} seqs for {sum(at[1::2])} "
                         "positions")
    for i in range(0, len(at), 2):
        spills.append((len(seqs), at[i + 1], key, at[i]))
        seqs += held[:at[i + 1]]
        del held[:at[i + 1]]


def _done_from(raw: Any, record: ClaimRecord, where: str) -> list[Done]:
    """A record's ``"done"``: completions of settled segment-part positions, one
    entry a commit, ascending commit seqs, each position at most once."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where} done must be a non-empty list of completions")
    out: list[Done] = []
    seen = 0
    for i, item in enumerate(raw):
        what = f"{where} done[{i}]"
        if not isinstance(item, dict) or set(item) != _DONE_FIELDS:
            raise ValueError(f"{what} must be an object with {sorted(_DONE_FIELDS)}")
        commit_seq = _int(item["commit_seq"], f"{what} commit_seq", 1, _FENCE_MAX)
        if out and commit_seq <= out[-1].commit_seq:
            raise ValueError(f"{what} commit_seq must be above the entry before it")
        commit = item["commit"]
        if not isinstance(commit, str) or not commit:
            raise ValueError(f"{what} commit must be a commit id, got {commit!r}")
        pos = expand_runs(_runs(item["pos"], f"{what} pos", 0, record.n - 1))
        results = item["results"]
        if not isinstance(results, list) or len(results) != len(pos):
            raise ValueError(f"{what} results must be a list of one result a position")
        bits = bits_of_runs(seq_runs(pos))
        if bits & seen or bits & ~record.settled or any(
                record.held_span(p) is None for p in pos):
            raise ValueError(f"{what} names a position twice, one not settled or one "
                             "not held at a segment or spill part")
        seen |= bits
        out.append(Done(commit_seq, commit, _time(item["at"], f"{what} at"), pos,
                        [None if r is None else compact(orjson.dumps(r)) for r in results]))
    return out


def records_from_json(raw: Any, top_fence: int) -> dict[int, ClaimRecord]:
    """The head's ``"claims"``, each checked, fences ascending, disjoint and at
    most ``top_fence`` (``counters.fence``: else new leases would reuse tokens)."""
    if not isinstance(raw, list):
        raise ValueError("claims must be a list")
    records: dict[int, ClaimRecord] = {}
    end = 1
    for i, item in enumerate(raw):
        record = record_from_json(item, f"claims[{i}]")
        if record.fence < end:
            raise ValueError(f"claims[{i}] (fence {record.fence}) overlaps the fences of "
                             f"claims[{i - 1}]: records must be in ascending, disjoint fences")
        end = record.fence + record.n
        if end - 1 > top_fence:
            raise ValueError(f"claims[{i}] (fence {record.fence}) holds lease numbers up to "
                             f"{end - 1} but counters.fence is {top_fence}: new leases would "
                             "reuse tokens")
        records[record.fence] = record
    return records


def link(state: QueueState, records: dict[int, ClaimRecord]) -> None:
    """Tie ``records`` to the state's jobs (each job reads its lease through its
    record, :attr:`broker.model.job.Job.rec`):
    every unsettled position is an inline claimed line naming its record, and
    every claimed line is held by one (``ValueError`` naming the record or job
    otherwise). Sets ``state.claim_records``."""
    jobs = state.jobs
    for i, record in enumerate(records.values()):
        fence = record.fence
        for pos in record.unsettled():
            if (record.segs or record.spills) and record.held_span(pos) is not None:
                continue  # (held at a segment or spill part: no line; see link_segments)
            seq = record.seqs[pos]
            job = jobs.get(seq)
            if job is None or job.status != CLAIMED or job.claim != fence:
                found = "not in the head" if job is None else \
                    f"{job.status}" + (f" in claim {job.claim}" if job.claim else "")
                raise ValueError(f"claims[{i}] (fence {fence}) holds {job_id_for(seq)} at "
                                 f"position {pos}, but that job is {found}")
            if job.lease_token is not None:
                raise ValueError(f"job {job.id} is held by claims[{i}] (fence {fence}) "
                                 "and another record")
            job.lease_token = f"{job.id}.{fence + pos}"
            job.rec = record  # (the lease's numbers: read through the record)
            job.cancel_ms = record.cancel.get(pos)
    for job in jobs.touched():
        if job.status == CLAIMED and job.lease_token is None:
            raise ValueError(f"claimed job {job.id} names claim {job.claim}, which does not "
                             "hold it at an unsettled position of its seq parts")
    state.claim_records = records


def records_from_v4(state: QueueState) -> None:
    """Make the claim records of a version-4 state, whose claimed jobs carry their
    own leases (see the module docstring); each job then names its record."""
    claimed = sorted(((int((job.lease_token or "").rpartition(".")[2]), job.seq), job)
                     for job in state.jobs.touched() if job.status == CLAIMED)
    records: dict[int, ClaimRecord] = {}
    record: ClaimRecord | None = None
    for (fence, _), job in claimed:
        if record is None or fence != record.fence + record.n or record.n == MAX_CLAIM_JOBS or \
                (job.lease_worker, job.lease_ms, job.lease_expires_ms, job.lease_heartbeat_ms) != \
                (record.worker, record.lease_ms, record.expires_ms, record.heartbeat_ms):
            record = ClaimRecord(fence, job.lease_worker, job.lease_ms, job.lease_expires_ms,
                                 job.lease_heartbeat_ms)
            records[fence] = record
        if job.cancel_ms is not None:
            record.cancel[record.n] = job.cancel_ms
        record.seqs.append(job.seq)
        job.claim = record.fence
        job.rec = record  # (the same numbers as the job's own fields)
        job._enc = None
    state.claim_records = records


def link_segments(state: QueueState) -> None:
    """Tie the records' segment parts to the head's segment references (read
    after the records): each names an ungrouped ref of ``"segments"`` at taken
    positions, its jobs' seqs follow from the ref, no job is named twice, and
    no job held there has a line of the head too (``ValueError`` naming the
    record otherwise). Counts the records naming each segment
    (``state.seg_names``: a named ref stays in the head)."""
    refs = {ref.key: ref for ref in state.segment_refs}
    names: dict[str, int] = {}
    jobs = state.jobs.entries
    for i, record in enumerate(state.claim_records.values()):
        if record.spills:
            _link_spills(state, record, f"claims[{i}] (fence {record.fence})", names)
        if not record.segs:
            _link_done(state, record, f"claims[{i}] (fence {record.fence})")
            continue
        where = f"claims[{i}] (fence {record.fence})"
        seqs = record.seqs
        for pos0, count, key, at0 in record.segs:
            ref = refs.get(key)
            if ref is None or ref.groups is not None:
                raise ValueError(f"{where} has a seg part naming segment {key}, which the "
                                 "head does not reference" + (
                                     "" if ref is None else " ungrouped"))
            if at0 + count > ref.taken:
                raise ValueError(f"{where} holds positions {at0}..{at0 + count - 1} of "
                                 f"segment {key}, which has taken only {ref.taken}")
            seqs[pos0:pos0 + count] = range(ref.first_seq + at0, ref.first_seq + at0 + count)
            for pos in range(pos0, pos0 + count):
                if not record.is_settled(pos) and seqs[pos] in jobs:
                    raise ValueError(f"{where} holds {job_id_for(seqs[pos])} at segment "
                                     f"{key}, but the jobs list has it too")
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"{where} names a job twice")
        for key in record.seg_keys():
            names[key] = names.get(key, 0) + 1
        _link_done(state, record, where)
    known = {ref.key for ref in state.segment_refs} | {ref.key for ref in state.spill_refs}
    for key in names:
        if key not in known:
            raise ValueError(f"a claim record names segment {key}, which is not referenced")
    state.seg_names = names


def _link_done(state: QueueState, record: ClaimRecord, where: str) -> None:
    """Index ``record``'s done entries by commit seq (``state.done_commits``);
    ``ValueError`` for one of a commit after this version."""
    for entry in record.completions or ():
        if entry.commit_seq > state.seq:
            raise ValueError(f"{where} has a completion of commit {entry.commit_seq}, "
                             f"after this version ({state.seq})")
        state.done_commits.setdefault(entry.commit_seq, []).append(record.fence)


def _link_spills(state: QueueState, record: ClaimRecord, where: str,
                 names: dict[str, int]) -> None:
    """Tie ``record``'s spill parts to the head's spill refs: each names a
    pending ref of ``"spills"`` at positions its cursor took, and no job held
    there has a line of the head too (``ValueError`` naming the record
    otherwise); counts the record in ``names`` once per object it names."""
    refs = {ref.key: ref for ref in state.spill_refs if isinstance(ref, SpillRef)}
    jobs = state.jobs.entries
    for pos0, count, key, at0 in record.spills or ():
        ref = refs.get(key)
        if ref is None or ref.kind != PENDING:
            raise ValueError(f"{where} has a spill part naming spill object {key}, which the "
                             "head does not reference as pending")
        if at0 + count > ref.taken:
            raise ValueError(f"{where} holds positions {at0}..{at0 + count - 1} of spill "
                             f"object {key}, beyond its cursor")
        for pos in range(pos0, pos0 + count):
            if not record.is_settled(pos) and record.seqs[pos] in jobs:
                raise ValueError(f"{where} holds {job_id_for(record.seqs[pos])} at spill "
                                 f"object {key}, but the jobs list has it too")
    if not record.segs and len(set(record.seqs)) != len(record.seqs):
        raise ValueError(f"{where} names a job twice")  # (with segment parts: link_segments)
    for key in record.spill_keys():
        names[key] = names.get(key, 0) + 1
