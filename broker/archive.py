"""Archive objects: completed jobs as JSON lines, readable with ``jq`` or ``json``.

Each line is one completed job (the fields of the queue object's job plus
``status: "completed"``, ``worker``, ``completed_at`` and ``result``).
Archive objects are written once and never modified. A broker that crashes
between writing an archive object and committing the state may archive a job
twice; readers that need exactly one row per job keep the last by ``id``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from broker import keys
from broker.storage import ObjectStore


def encode_records(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def decode_records(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def write(store: ObjectStore, queue: str, lines: list[bytes], now_ms: int,
          seq: int, writer: str) -> str:
    """Write one archive object for a commit from its lines (each ending in a
    newline, see :meth:`broker.state.Job.archive_line`); return its key."""
    key = keys.archive_key(queue, now_ms, seq, writer)
    store.put(key, b"".join(lines))
    return key


def list_objects(store: ObjectStore, queue: str, start_hour: str | None = None,
                 end_hour: str | None = None) -> list[str]:
    """Archive object keys of a queue, optionally limited to hours [start, end]."""
    prefix = keys.archive_prefix(queue)
    out = []
    for key in store.list(prefix):
        hour = key[len(prefix):].split("/", 1)[0]
        if start_hour is not None and hour < start_hour:
            continue
        if end_hour is not None and hour > end_hour:
            continue
        out.append(key)
    return out


def read_all(store: ObjectStore, queue: str) -> Iterator[dict[str, Any]]:
    for key in list_objects(store, queue):
        yield from decode_records(store.get(key))
