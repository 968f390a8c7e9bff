"""Archive objects: completed jobs as JSON lines, readable with ``jq`` or ``json``.

Each line is one completed job: the fields of the queue object's job plus
``status: "completed"``, ``worker`` and ``token`` (who completed it),
``commit_seq`` and ``commit`` (the queue object version that recorded the
completion), ``completed_at`` and ``result``.

**Written after the commit.** A commit that completes jobs keeps them in the
queue object, status ``completed``, with their result; the caller is answered
as soon as that one write lands. Then the broker writes one archive object
for that commit, named by it::

    {queue}/archive/{YYYY-MM-DDTHH}/{commit_seq:012d}-{commit}.jsonl

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

which is a no-op on archives written by this version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import orjson

from broker import paths, wire
from broker.model.decode import LineSpans, NotOurLayout
from broker.model.job import Job
from broker.model.lines import archive_line


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


def commit_object(queue: str, jobs: Sequence[Job]) -> tuple[str, bytes]:
    """The archive object (key, bytes) of the completed ``jobs`` of one commit.

    ``jobs`` must all carry the same commit (``done_seq``, ``done_commit``);
    lines are in job order, so every broker makes the same bytes. Raises
    ``ValueError`` for an empty list or jobs of different commits.
    """
    if not jobs:
        raise ValueError("an archive object needs at least one job")
    first = jobs[0]
    if first.done_ms is None or first.done_seq is None or first.done_commit is None:
        raise ValueError(f"job {first.id} is not a committed completion")
    if any(j.done_seq != first.done_seq or j.done_commit != first.done_commit for j in jobs):
        raise ValueError("the jobs of one archive object must come from one commit")
    ordered = sorted(jobs, key=lambda j: j.seq)
    key = paths.archive_key(queue, first.done_ms, first.done_seq, first.done_commit)
    return key, b"".join(archive_line(j) for j in ordered)


def list_objects(store: ArchiveSource, queue: str, start_hour: str | None = None,
                 end_hour: str | None = None) -> list[str]:
    """Archive object keys of a queue, optionally limited to hours [start, end]."""
    prefix = paths.archive_prefix(queue)
    out = []
    for key in store.list(prefix):
        hour = key[len(prefix):].split("/", 1)[0]
        if start_hour is not None and hour < start_hour:
            continue
        if end_hour is not None and hour > end_hour:
            continue
        out.append(key)
    return out


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
