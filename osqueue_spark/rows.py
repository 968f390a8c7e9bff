"""Spark rows -> jobs, and jobs -> rows, shared by the data source and the sinks."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson

from broker import timefmt
from broker.errors import InvalidRequest

OPTION_COLUMNS = ("priority", "delay_s", "max_attempts", "key")


def row_to_job(row: Any) -> dict[str, Any]:
    """A job body from a Row: its ``payload`` column (JSON text, struct or map),
    or else all its columns but the option columns as a JSON object."""
    data = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
    job: dict[str, Any] = {}
    for name in OPTION_COLUMNS:
        value = data.pop(name, None)
        if value is not None:
            job[name] = value
    if "payload" in data:
        payload = data["payload"]
        if isinstance(payload, str):
            try:
                payload = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                raise InvalidRequest(
                    f"column 'payload' must hold JSON text (or be a struct or map); "
                    f"got {payload[:60]!r}: {exc}") from None
        job["payload"] = payload
    else:
        job["payload"] = data
    return job


def ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def ts_text(text: str | None) -> datetime | None:
    return None if not text else ts(timefmt.parse(text))
