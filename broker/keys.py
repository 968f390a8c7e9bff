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
