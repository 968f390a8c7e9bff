"""Where a queue's objects live in a store, and what a valid queue name is.

* ``{queue}/queue.json``: the state (a CAS object);
* ``{queue}/archive/{YYYY-MM-DDTHH}/{seq:012d}-{commit}.jsonl``: completed
  jobs, one object per commit that completed any (see :mod:`broker.archive`).
"""

from __future__ import annotations

import re
import time

from broker.errors import InvalidRequest

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_queue_name(name: str) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``InvalidRequest``."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise InvalidRequest(
            f"invalid queue name {name!r}: use 1-128 letters, digits, '.', '_' or '-', "
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
    """Where Spark tasks stage jobs: ``{queue}/staging/{write_id}~{ms}{n}.jsonl``."""
    return f"{queue}/staging/"


def staging_key(queue: str, write_id: str, now_ms: int, n: int = 0) -> str:
    """A staging object of ``write_id`` staged at ``now_ms`` (``n``: a counter that
    orders stagings of one broker within a millisecond)."""
    return f"{staging_prefix(queue)}{write_id}~{now_ms:013d}{n % 1_000_000:06d}.jsonl"


def parse_staging_key(queue: str, key: str) -> tuple[str, int, int] | None:
    """(write id, staged at ms, order: later stagings sort higher) of a staging
    object key, or None if it is not one."""
    if not key.startswith(staging_prefix(queue)):
        return None
    rest = key[len(staging_prefix(queue)):]
    write_id, sep, tail = rest.rpartition("~")
    digits = tail[: -len(".jsonl")]
    if not sep or not tail.endswith(".jsonl") or not digits.isdigit() or not digits.isascii():
        return None
    if len(digits) > 13:  # this version: ms and a counter
        return write_id, int(digits[:-6]), int(digits)
    return write_id, int(digits), int(digits) * 1_000_000


_WRITE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,299}$")


def check_write_id(write_id: str) -> str:
    if not isinstance(write_id, str) or not _WRITE_ID.match(write_id) or ".." in write_id \
            or "//" in write_id or write_id.endswith("/"):
        raise InvalidRequest(
            f"invalid write id {write_id!r}: use letters, digits, '.', '_', '-', '/'")
    return write_id
