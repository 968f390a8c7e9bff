"""Where a queue's objects live in a store, and what a valid queue name is.

* ``{queue}/queue.json``: the state (a CAS object);
* ``{queue}/archive/{YYYY-MM-DDTHH}/{seq:012d}-{writer}.jsonl``: completed
  jobs, one new immutable object per commit that completed any.
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


def archive_key(queue: str, now_ms: int, seq: int, writer: str) -> str:
    return f"{archive_prefix(queue)}{archive_hour(now_ms)}/{seq:012d}-{writer}.jsonl"


def queue_from_state_key(key: str) -> str | None:
    head, sep, tail = key.rpartition("/")
    return head if sep and tail == "queue.json" and "/" not in head else None


def staging_prefix(queue: str) -> str:
    """Where Spark tasks stage jobs: ``{queue}/staging/{write_id}~{ms}.jsonl``."""
    return f"{queue}/staging/"


def staging_key(queue: str, write_id: str, now_ms: int) -> str:
    return f"{staging_prefix(queue)}{write_id}~{now_ms}.jsonl"


def parse_staging_key(queue: str, key: str) -> tuple[str, int] | None:
    """(write id, staged at ms) of a staging object key, or None if it is not one."""
    rest = key[len(staging_prefix(queue)):]
    write_id, sep, tail = rest.rpartition("~")
    if not key.startswith(staging_prefix(queue)) or not sep or not tail.endswith(".jsonl"):
        return None
    try:
        return write_id, int(tail[: -len(".jsonl")])
    except ValueError:
        return None


_WRITE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,299}$")


def check_write_id(write_id: str) -> str:
    if not isinstance(write_id, str) or not _WRITE_ID.match(write_id) or ".." in write_id \
            or "//" in write_id or write_id.endswith("/"):
        raise InvalidRequest(
            f"invalid write id {write_id!r}: use letters, digits, '.', '_', '-', '/'")
    return write_id


def takeover_key(queue: str) -> str:
    """A broker that keeps losing the race to take a queue over asks for it here."""
    return f"{queue}/takeover.json"
