"""Archive objects: completed jobs as JSON lines, readable with ``jq`` or ``json``.

Each line is one completed job: the fields of the queue object's job plus
``status: "completed"``, ``worker`` and ``token`` (who completed it),
``commit_seq`` and ``commit`` (the queue object version that recorded the
completion), ``completed_at`` and ``result``.

**Written after the commit.** A commit that completes jobs keeps them in the
queue object, status ``completed``, with their result; the caller is answered
as soon as that one write lands. Then the broker writes one archive object
for that commit, named by it and by the lowest and highest job in it::

    {queue}/archive/{YYYY-MM-DDTHH}/{commit_seq:012d}-{commit}-j{first:010d}-j{last:010d}.jsonl

and a later commit drops those jobs from the queue object. The object's name
and bytes are a function of the committed jobs alone, so a broker that takes
over after a crash (before the archive object, or before the drop) writes
the very same object again. Hence:

* an archive object only ever holds completions that were committed; nothing
  is written before a commit and nothing is ever undone;
* every completed job is in the queue object, or in the archive, or both for
  a moment, never in neither;
* each job appears in exactly one archive object, on exactly one line.

**Objects of earlier versions.** osqueue 0.1 named archive objects
``{seq:012d}-{writer}.jsonl`` (the writer is a broker id ``b-...``, never a
commit id ``c-...``) and wrote them *before* the commit, undoing them when the
commit failed; an undo that failed left an orphan whose jobs were completed
again later. :func:`is_legacy` tells them apart; :func:`read_all` and the
Spark reader keep, for each job id, only the latest completion among legacy
lines (the orphan's is always the earlier one). With ``jq``::

    cat */archive/*/*.jsonl | jq -s 'group_by(.id) | map(max_by(.completed_at))[]'

which is a no-op on archives written by this version. Objects named before
the job range was added (``{commit_seq:012d}-{commit}.jsonl``) read as
before; if a broker of this version rewrote one under its new name (a
takeover between the write and the drop), :func:`list_objects` lists the new
name only.

**The index, for a lookup by id.** Before the archive object, the broker
writes one empty object per seq block of its jobs (:data:`BLOCK_SHIFT`:
65,536 seqs) and hour, ``{queue}/archive-index/b{block:010d}/{hour}``
(:func:`index_keys`); a broker's first archive write of a queue also writes
a start marker, ``{queue}/archive-index/start/{hour}-clean`` when nothing was
archived before it, else ``-legacy`` (:func:`start_key`). All are written
before the object, again identically by a broker that takes over, and the
jobs leave the queue object only after all of them landed. So
:func:`find_job` costs one LIST of the job's block (the hours in which jobs
of it were archived), one LIST per such hour, in order, until the job is
found, and one GET per archive object of those hours whose job range holds
it; never the whole archive. Only when that finds nothing and the queue's
archive began before the index (a ``-legacy`` start marker, or none: an
archive written only by older brokers) does it list the archive and read the
objects named without a range, whatever their hour: the marker's hour is the
first commit this version archived, and an older broker may have archived a
later commit before it (a write that failed for a while keeps an earlier
commit in the queue object).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson

from broker import paths, wire
from broker.model.format.decode import LineSpans, NotOurLayout
from broker.model.job import Job, job_id_for
from broker.model.job_lines import archive_line

#: Seqs ``>>`` this is a job's block in the archive index (65,536 seqs a block).
BLOCK_SHIFT = 16
#: An archive object's name with its job range: commit seq, commit id, first and last seq.
_RANGED = re.compile(r"([0-9]{12})-(c-.+)-j([0-9]{10,15})-j([0-9]{10,15})\.jsonl")


class ArchiveSource(Protocol):
    """What reading an archive needs of a store (an ``ObjectStore`` has both):
    the model does no I/O of its own, its caller passes the store in."""

    def list(self, prefix: str) -> Iterable[str]: ...

    def get(self, key: str) -> bytes: ...


def encode_records(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def decode_records(data: bytes) -> list[dict[str, Any]]:
    """The records of an archive object: one JSON object a line. Lines end at
    ``\n`` only (a payload may hold a ``\r``, which JSON allows as space)."""
    return [wire.loads(line) for line in data.split(b"\n") if line.strip()]  # numbers exact


def records_verbatim(data: bytes) -> Iterator[tuple[dict[str, Any], bytes, bytes]]:
    """(record, payload bytes, result bytes) for each line of an archive object,
    payload and result exactly as written (big integers, number spellings and
    escapes kept); a line laid out by hand falls back to re-encoding them."""
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        rec = orjson.loads(line)
        try:
            spans = LineSpans(line)
            payload, result = spans.payload(rec["payload"]), spans.result(rec.get("result"))
        except NotOurLayout:
            payload = orjson.dumps(rec["payload"])
            result = orjson.dumps(rec.get("result"))
        yield rec, payload, result


class Archived(NamedTuple):
    """Completions of one commit whose archive lines are made already (from
    their segment's lines, see :func:`broker.model.held.done_lines`): their
    seqs and lines, aligned, and the commit, as :func:`commit_object` and
    :func:`index_keys` read them of a completed :class:`Job`."""

    seqs: list[int]
    lines: list[bytes]  # archive_line()'s bytes for each job
    done_ms: int
    done_seq: int
    done_commit: str


def commit_object(queue: str, jobs: Sequence[Job],
                  archived: Sequence[Archived] = ()) -> tuple[str, bytes]:
    """The archive object (key, bytes) of the completed ``jobs`` of one commit,
    and of ``archived``: more of its completions, their lines made already.

    All must carry the same commit (``done_seq``, ``done_commit``); lines are in
    job order, so every broker makes the same bytes. Raises ``ValueError`` for
    no job or jobs of different commits.
    """
    everything: list[Job | Archived] = [*jobs, *archived]
    if not jobs and not any(a.seqs for a in archived):
        raise ValueError("an archive object needs at least one job")
    first = everything[0]
    if first.done_ms is None or first.done_seq is None or first.done_commit is None:
        seq = first.seq if isinstance(first, Job) else first.seqs[0]
        raise ValueError(f"job {job_id_for(seq)} is not a committed completion")
    if any(j.done_seq != first.done_seq or j.done_commit != first.done_commit
           for j in everything):
        raise ValueError("the jobs of one archive object must come from one commit")
    if not archived:
        ordered = sorted(jobs, key=lambda j: j.seq)
        key = paths.archive_key(queue, first.done_ms, first.done_seq, first.done_commit,
                                ordered[0].seq, ordered[-1].seq)
        return key, b"".join(archive_line(j) for j in ordered)
    keyed = [(j.seq, archive_line(j)) for j in jobs]
    for a in archived:
        keyed += zip(a.seqs, a.lines, strict=True)
    keyed.sort(key=itemgetter(0))
    key = paths.archive_key(queue, first.done_ms, first.done_seq, first.done_commit,
                            keyed[0][0], keyed[-1][0])
    return key, b"".join(line for _, line in keyed)


def index_keys(queue: str, jobs: Sequence[Job], archived: Sequence[Archived] = ()) -> list[str]:
    """The index entries of the archive object of ``jobs`` and ``archived`` (one
    commit's, as for :func:`commit_object`): one per seq block among them, in
    the hour of the object."""
    hour = paths.archive_hour((jobs[0] if jobs else archived[0]).done_ms or 0)
    blocks = {j.seq >> BLOCK_SHIFT for j in jobs}
    blocks.update(s >> BLOCK_SHIFT for a in archived for s in a.seqs)
    return [paths.archive_block_key(queue, block, hour) for block in sorted(blocks)]


def start_key(queue: str, now_ms: int, legacy: bool) -> str:
    """The start marker of the index, written before the first indexed object:
    ``legacy`` if jobs may have been archived before it (unindexed)."""
    return (f"{paths.archive_start_prefix(queue)}{paths.archive_hour(now_ms)}-"
            f"{'legacy' if legacy else 'clean'}")


def seq_range(key: str) -> tuple[int, int] | None:
    """The lowest and highest job seq an archive object's name gives, or None
    for a name without them (written before they were added, or by osqueue 0.1)."""
    match = _RANGED.fullmatch(key.rsplit("/", 1)[-1])
    return None if match is None else (int(match.group(3)), int(match.group(4)))


def list_objects(store: ArchiveSource, queue: str, start_hour: str | None = None,
                 end_hour: str | None = None) -> list[str]:
    """Archive object keys of a queue, optionally limited to hours [start, end].
    An object named without its job range is left out when the same commit's
    object is there under its ranged name (the same jobs: see the module
    docstring)."""
    prefix = paths.archive_prefix(queue)
    out = []
    for key in store.list(prefix):
        hour = key[len(prefix):].split("/", 1)[0]
        if start_hour is not None and hour < start_hour:
            continue
        if end_hour is not None and hour > end_hour:
            continue
        out.append(key)
    renamed = {f"{key.rsplit('/', 1)[0]}/{match.group(1)}-{match.group(2)}.jsonl"
               for key in out if (match := _RANGED.fullmatch(key.rsplit("/", 1)[-1]))}
    return [key for key in out if key not in renamed] if renamed else out


def is_legacy(key: str) -> bool:
    """True for an archive object written before its commit (osqueue 0.1)."""
    name = key.rsplit("/", 1)[-1]
    _, dash, tail = name.partition("-")
    return not (dash and tail.startswith("c-"))


R = TypeVar("R")


def latest_per_job(records: Iterable[R],
                   record: Callable[[R], dict[str, Any]] = lambda r: r  # type: ignore[assignment,return-value]
                   ) -> list[R]:
    """One item per job id: the latest completion (see the module docstring).
    ``record`` gives an item's record (the item itself by default)."""
    best: dict[Any, tuple[str, R]] = {}
    for item in records:
        rec = record(item)
        at = str(rec.get("completed_at"))
        seen = best.get(rec.get("id"))
        if seen is None or at >= seen[0]:
            best[rec.get("id")] = (at, item)
    return [item for _, item in best.values()]


def read_all(store: ArchiveSource, queue: str) -> Iterator[dict[str, Any]]:
    """Every completed job of the archive, each once (legacy orphans removed)."""
    legacy: list[dict[str, Any]] = []
    current_ids: set[Any] = set()
    for key in list_objects(store, queue):
        records = decode_records(store.get(key))
        if is_legacy(key):
            legacy += records
            continue
        for rec in records:
            current_ids.add(rec.get("id"))
            yield rec
    yield from (rec for rec in latest_per_job(legacy) if rec.get("id") not in current_ids)


class Found(NamedTuple):
    """A job found in the archive: its record, its payload's and result's bytes
    as written (numbers and escapes kept), and the object it is in."""

    record: dict[str, Any]
    payload: bytes
    result: bytes
    key: str


def find_in(data: bytes, job_id: str) -> tuple[dict[str, Any], bytes, bytes] | None:
    """The record of job ``job_id`` in the archive object ``data``, with its
    payload's and result's exact bytes (see :func:`records_verbatim`), or None."""
    needle = b'"id":"' + job_id.encode() + b'"'
    if needle not in data:
        return None
    for line in data.split(b"\n"):
        if needle in line:
            for rec, payload, result in records_verbatim(line):
                if rec.get("id") == job_id:
                    return rec, payload, result
    return None


def find_job(store: ArchiveSource, queue: str, seq: int) -> Found | None:
    """Job ``seq`` in the archive of ``queue``, or None if it is not there.

    Cost (see the module docstring): one LIST of the job's index block; one
    LIST per hour it names, in order, until the job is found; a GET of each
    object of those hours whose job range holds ``seq``. When that finds
    nothing: one LIST of the start markers and, only if the archive began
    before the index, one LIST of the archive and a GET of each object named
    without a range. Raises the store's errors."""
    job_id = job_id_for(seq)
    block_prefix = paths.archive_block_prefix(queue, seq >> BLOCK_SHIFT)
    hours = sorted({key[len(block_prefix):] for key in store.list(block_prefix)})
    prefix = paths.archive_prefix(queue)
    for hour in hours:
        for key in store.list(f"{prefix}{hour}/"):
            span = seq_range(key)
            if span is not None and span[0] <= seq <= span[1]:
                got = find_in(store.get(key), job_id)
                if got is not None:
                    return Found(*got, key)
    return _find_unindexed(store, queue, job_id)


def _find_unindexed(store: ArchiveSource, queue: str, job_id: str) -> Found | None:
    """Job ``job_id`` among the archive objects named without a job range (none
    if the index's start markers say nothing was archived before it): the
    latest completion among osqueue 0.1's (see the module docstring), and the
    first found among the others."""
    start = paths.archive_start_prefix(queue)
    markers = [key[len(start):] for key in store.list(start)]
    if markers and not any(m.endswith("-legacy") for m in markers):
        return None
    # Every hour, not only up to the marker's: the marker names the first commit
    # this version archived, and an older broker may have archived (and dropped)
    # a later one before it. The LIST is of the whole archive either way.
    best: Found | None = None
    for key in list_objects(store, queue):
        if seq_range(key) is not None:
            continue  # (indexed)
        got = find_in(store.get(key), job_id)
        if got is None:
            continue
        if not is_legacy(key):
            return Found(*got, key)
        if best is None or str(got[0].get("completed_at")) >= \
                str(best.record.get("completed_at")):
            best = Found(*got, key)
    return best
