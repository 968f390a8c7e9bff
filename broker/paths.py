"""Where a queue's objects live in a store, and what a valid queue name is.

* ``{queue}/queue.json``: the state (a CAS object);
* ``{queue}/archive/{YYYY-MM-DDTHH}/{seq:012d}-{commit}-{first id}-{last id}.jsonl``:
  finished jobs, one object per commit that finished any, named with the
  lowest and highest job id in it (see :mod:`broker.model.format.archive`);
* ``{queue}/archive-index/b{block:010d}/{YYYY-MM-DDTHH}`` (empty objects): the
  hours in which jobs of each block of 65,536 seqs were archived, and
  ``{queue}/archive-index/start/{YYYY-MM-DDTHH}-{clean|legacy}``: when the
  queue's archive began to be indexed (what a lookup by id reads first:
  :func:`broker.model.format.archive.find_job`);
* ``{queue}/segments/seg-{first seq:010d}-{8 hex}.jsonl``: immutable objects of
  pending jobs (see :mod:`broker.model.segments`), written by pushes and
  publishes by reference (:mod:`broker.service.by_reference`);
* ``{queue}/spills/{p|d}-{commit seq:012d}-{8 hex}.jsonl``: immutable objects of
  pending (``p``) or dead (``d``) jobs taken out of the head by the commit that
  first references them (so that failed and dead jobs do not grow the head;
  written through the commit loop's ``before_write`` hook), swept and deleted
  as segments are (:mod:`broker.service.segment_store`).

Beside the queues, under ``_osqueue/`` (no queue name starts with ``_``): the
dashboard's signed-out sessions (:data:`SIGNED_OUT_KEY`) and the store
self-test's probe objects.
"""

from __future__ import annotations

import re
import time

from broker.errors import InvalidRequest, shown
from broker.limits import (
    MAX_PREFIX_CHARS,
    MAX_QUEUE_NAME_CHARS,
    MAX_WRITE_ID_CHARS,
    QUEUE_NAME_PATTERN,
)

_NAME = re.compile(QUEUE_NAME_PATTERN)


def check_queue_name(name: str) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``InvalidRequest``.

    Every name check here is a ``fullmatch``: ``re.match`` with ``$`` lets a
    trailing line break through (``"docs\\n"``).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidRequest(
            f"invalid queue name {shown(name)}: use 1-{MAX_QUEUE_NAME_CHARS} letters, digits, "
            "'.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def state_key(queue: str) -> str:
    return f"{queue}/queue.json"


def archive_prefix(queue: str) -> str:
    return f"{queue}/archive/"


def archive_hour(now_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H", time.gmtime(now_ms // 1000))


def archive_key(queue: str, done_ms: int, commit_seq: int, commit: str, first_seq: int,
                last_seq: int) -> str:
    """The archive object of the jobs finished by commit ``commit_seq`` (id
    ``commit``), whose lowest and highest job seqs are ``first_seq`` and
    ``last_seq``: ``{hour}/{commit_seq:012d}-{commit}-j{first:010d}-j{last:010d}.jsonl``
    (a lookup by id reads only the objects whose range holds it)."""
    return (f"{archive_prefix(queue)}{archive_hour(done_ms)}/{commit_seq:012d}-{commit}"
            f"-j{first_seq:010d}-j{last_seq:010d}.jsonl")


def archive_index_prefix(queue: str) -> str:
    """Where a queue's archive index lives (see :mod:`broker.model.format.archive`)."""
    return f"{queue}/archive-index/"


def archive_block_prefix(queue: str, block: int) -> str:
    """The index entries of seq block ``block``: one empty object per hour in
    which jobs of it were archived."""
    return f"{archive_index_prefix(queue)}b{block:010d}/"


def archive_block_key(queue: str, block: int, hour: str) -> str:
    """The index entry saying that jobs of seq block ``block`` were archived in
    ``hour`` (``YYYY-MM-DDTHH``, as :func:`archive_hour` spells it)."""
    return f"{archive_block_prefix(queue, block)}{hour}"


def archive_start_prefix(queue: str) -> str:
    """The index's start markers: ``{hour}-clean`` (nothing was archived before
    the index) or ``{hour}-legacy`` (objects archived before may be unindexed;
    the hour is that of the first commit archived with an index entry)."""
    return f"{archive_index_prefix(queue)}start/"


def queue_from_state_key(key: str) -> str | None:
    head, sep, tail = key.rpartition("/")
    return head if sep and tail == "queue.json" and "/" not in head else None


def staging_prefix(queue: str) -> str:
    """Where Spark tasks stage jobs: ``{queue}/staging/{write_id}.jsonl``."""
    return f"{queue}/staging/"


def staging_key(queue: str, write_id: str) -> str:
    """The staging object of ``write_id``: staging it again replaces it (one put)."""
    return f"{staging_prefix(queue)}{write_id}.jsonl"


def parse_staging_key(queue: str, key: str) -> str | None:
    """The write id of a staging object key, or None if it is not one. (Keys of
    osqueue 0.1, ``{write_id}~{ms}.jsonl``, name their write id too.)"""
    prefix = staging_prefix(queue)
    if not key.startswith(prefix) or not key.endswith(".jsonl"):
        return None
    write_id = key[len(prefix):-len(".jsonl")]
    head, sep, tail = write_id.rpartition("~")
    if sep and tail.isdigit():
        write_id = head
    return write_id or None


_WRITE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._/-]{{0,{MAX_WRITE_ID_CHARS - 1}}}")
_WRITE_PREFIX = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._/-]{{0,{MAX_PREFIX_CHARS - 1}}}")


def _dot_part(name: str) -> bool:
    """Whether a ``/``-separated part of ``name`` is ``.`` (no store key may hold
    one: see :func:`broker.storage.base.check_key`)."""
    return "/." in name and "." in name.split("/")


def check_write_id(write_id: str) -> str:
    """Return ``write_id`` (a staging object's name below its queue's staging
    directory) if valid, else raise ``InvalidRequest``: a letter or digit, then
    letters, digits, ``._-/``; no ``..``, no empty or ``.`` part, no trailing ``/``."""
    if not isinstance(write_id, str) or not _WRITE_ID.fullmatch(write_id) \
            or ".." in write_id or "//" in write_id or write_id.endswith("/") \
            or _dot_part(write_id):
        raise InvalidRequest(
            f"invalid write id {shown(write_id)}: use letters, digits, '.', '_', '-', '/'")
    return write_id


def check_write_prefix(prefix: str) -> str:
    """Return ``prefix`` (the start of write ids, as a publish names the writes it
    drops) if valid, else raise ``InvalidRequest``: what a write id may hold, and
    it may end with ``/``. Nothing else is listed: a ``..`` part or a leading
    ``/`` would list (and drop) objects outside the queue's staging directory."""
    if not isinstance(prefix, str) or not _WRITE_PREFIX.fullmatch(prefix) \
            or ".." in prefix or "//" in prefix or _dot_part(prefix):
        raise InvalidRequest(
            f"invalid write prefix {shown(prefix)}: use letters, digits, '.', '_', '-', '/', "
            "starting with a letter or digit, with no '..' or '//'")
    return prefix


def check_publish(queue: str, prefix: str, keep: list[str]) -> None:
    """Check a publish's names: queue, write prefix and the write ids to keep
    (``InvalidRequest`` naming the first bad one)."""
    check_queue_name(queue)
    check_write_prefix(prefix)
    for write_id in keep:
        check_write_id(write_id)



def segments_prefix(queue: str) -> str:
    """Where a queue's segment objects live (what a sweep of them lists)."""
    return f"{queue}/segments/"


_SALT = re.compile(r"[0-9a-f]{8}")
_SEGMENT_NAME = re.compile(r"seg-([1-9][0-9]{10,14}|[0-9]{10})-[0-9a-f]{8}\.jsonl")


def segment_name(first_seq: int, salt: str) -> str:
    """The name of a segment whose first job has seq ``first_seq``:
    ``seg-{first_seq:010d}-{salt}.jsonl``. ``salt`` is 8 lowercase hex digits,
    random per write, so a segment written again (a retry after a lost reply)
    never replaces one an earlier commit may reference. ``ValueError`` for a
    seq outside 1..10**15-1 or another salt."""
    if isinstance(first_seq, bool) or not isinstance(first_seq, int) \
            or not 1 <= first_seq < 10**15:
        raise ValueError(f"segment first seq {shown(first_seq)} is not within 1..10**15-1")
    if not isinstance(salt, str) or not _SALT.fullmatch(salt):
        raise ValueError(f"segment salt {shown(salt)} is not 8 lowercase hex digits")
    return f"seg-{first_seq:010d}-{salt}.jsonl"


def segment_key(queue: str, name: str) -> str:
    """The key of segment ``name`` (from :func:`segment_name`) of ``queue``;
    ``ValueError`` if ``name`` is not one :func:`segment_name` makes."""
    if not isinstance(name, str) or not _SEGMENT_NAME.fullmatch(name):
        raise ValueError(f"invalid segment name {shown(name)}")
    return f"{segments_prefix(queue)}{name}"


def parse_segment_key(key: str) -> tuple[str, int] | None:
    """``(queue, first seq)`` of a key :func:`segment_key` makes, or None if
    ``key`` is not one (another spelling of the seq, a bad queue name, a
    nested directory, another suffix)."""
    if not isinstance(key, str):
        return None
    queue, sep, name = key.rpartition("/segments/")
    match = _SEGMENT_NAME.fullmatch(name)
    if not sep or match is None or not _NAME.fullmatch(queue) or ".." in queue:
        return None
    first_seq = int(match.group(1))
    return (queue, first_seq) if first_seq >= 1 else None


def spills_prefix(queue: str) -> str:
    """Where a queue's spill objects live (what a sweep of them lists)."""
    return f"{queue}/spills/"


#: A spill object's kind and the letter its name starts with.
SPILL_KINDS = {"pending": "p", "dead": "d"}
_SPILL_KIND_OF = {letter: kind for kind, letter in SPILL_KINDS.items()}
_SPILL_NAME = re.compile(r"([pd])-([1-9][0-9]{12,14}|[0-9]{12})-[0-9a-f]{8}\.jsonl")


def spill_name(kind: str, commit_seq: int, salt: str) -> str:
    """The name of a spill object of ``kind`` (``"pending"`` or ``"dead"``) first
    referenced by version ``commit_seq`` of its queue's head (for people: the
    object's key never changes):
    ``{p|d}-{commit_seq:012d}-{salt}.jsonl``. ``salt`` is 8 lowercase hex
    digits, random per write, so an object written again (the same batch
    re-applied after a CAS conflict) never replaces one a landed head may
    reference. ``ValueError`` for another kind, a seq outside 1..10**15-1 or
    another salt."""
    letter = SPILL_KINDS.get(kind) if isinstance(kind, str) else None
    if letter is None:
        raise ValueError(f"spill kind {shown(kind)} is not one of {sorted(SPILL_KINDS)}")
    if isinstance(commit_seq, bool) or not isinstance(commit_seq, int) \
            or not 1 <= commit_seq < 10**15:
        raise ValueError(f"spill commit seq {shown(commit_seq)} is not within 1..10**15-1")
    if not isinstance(salt, str) or not _SALT.fullmatch(salt):
        raise ValueError(f"spill salt {shown(salt)} is not 8 lowercase hex digits")
    return f"{letter}-{commit_seq:012d}-{salt}.jsonl"


def spill_key(queue: str, name: str) -> str:
    """The key of spill object ``name`` (from :func:`spill_name`) of ``queue``;
    ``ValueError`` if ``name`` is not one :func:`spill_name` makes."""
    match = _SPILL_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None or int(match.group(2)) < 1:
        raise ValueError(f"invalid spill name {shown(name)}")
    return f"{spills_prefix(queue)}{name}"


def parse_spill_key(key: str) -> tuple[str, str, int] | None:
    """``(queue, kind, commit seq)`` of a key :func:`spill_key` makes, or None if
    ``key`` is not one (another spelling of the seq, another kind letter, a bad
    queue name, a nested directory, another suffix)."""
    if not isinstance(key, str):
        return None
    queue, sep, name = key.rpartition("/spills/")
    match = _SPILL_NAME.fullmatch(name)
    if not sep or match is None or not _NAME.fullmatch(queue) or ".." in queue:
        return None
    commit_seq = int(match.group(2))
    return (queue, _SPILL_KIND_OF[match.group(1)], commit_seq) if commit_seq >= 1 else None


def job_object_queue(key: str) -> str | None:
    """The queue whose immutable job object (a segment or a spill object) ``key``
    names, or None if it names neither (what the sweep lists)."""
    segment = parse_segment_key(key)
    if segment is not None:
        return segment[0]
    spill = parse_spill_key(key)
    return spill[0] if spill is not None else None


#: The dashboard's list of signed-out sessions (see :mod:`broker.service.signouts`):
#: a CAS object no queue can take (queue names start with a letter or digit).
SIGNED_OUT_KEY = "_osqueue/ui/signed-out.json"
