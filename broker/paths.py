"""Where a queue's objects live in a store, and what a valid queue name is.

* ``{queue}/queue.json``: the state (a CAS object);
* ``{queue}/archive/{YYYY-MM-DDTHH}/{seq:012d}-{commit}.jsonl``: completed
  jobs, one object per commit that completed any (see :mod:`broker.model.archive`).
"""

from __future__ import annotations

import re
import time

from broker.errors import InvalidRequest, shown
from broker.limits import MAX_QUEUE_NAME_CHARS, QUEUE_NAME_PATTERN

_NAME = re.compile(QUEUE_NAME_PATTERN)


def check_queue_name(name: str) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``InvalidRequest``."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
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


_WRITE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,299}$")


def check_write_id(write_id: str) -> str:
    if not isinstance(write_id, str) or not _WRITE_ID.match(write_id) or ".." in write_id \
            or "//" in write_id or write_id.endswith("/"):
        raise InvalidRequest(
            f"invalid write id {shown(write_id)}: use letters, digits, '.', '_', '-', '/'")
    return write_id
