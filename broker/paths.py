"""Where a queue's objects live in a store, and what a valid queue name is.

* ``{queue}/queue.json``: the state (a CAS object);
* ``{queue}/archive/{YYYY-MM-DDTHH}/{seq:012d}-{commit}.jsonl``: completed
  jobs, one object per commit that completed any (see :mod:`broker.model.archive`).
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


def archive_key(queue: str, done_ms: int, commit_seq: int, commit: str) -> str:
    """The archive object of the completions of commit ``commit_seq`` (id ``commit``)."""
    return f"{archive_prefix(queue)}{archive_hour(done_ms)}/{commit_seq:012d}-{commit}.jsonl"


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

