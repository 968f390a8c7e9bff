"""Spark rows -> jobs, and jobs -> rows, shared by the data source and the sinks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from broker import timefmt, wire
from broker.errors import InvalidRequest
from osqueue_spark.args import job_options
from osqueue_spark.client import job_staged_line

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
                payload = wire.loads(payload)  # numbers exact (orjson alone rounds long ones)
            except orjson.JSONDecodeError as exc:
                raise InvalidRequest(
                    f"column 'payload' must hold JSON text (or be a struct or map); "
                    f"got {payload[:60]!r}: {exc}") from None
        job["payload"] = payload
    else:
        job["payload"] = data
    return job


def arrow_staged_lines(batches: Iterator[Any]) -> Iterator[bytes]:
    """Staged lines (see :mod:`broker.http.parsers`) from Arrow record batches
    (``DataSourceArrowWriter``), one a row.

    A string ``payload`` column is checked to be JSON and passed through as
    text (no decode and re-encode); struct and map payloads, or rows without a
    payload column, go through :func:`row_to_job`. Raises ``InvalidRequest``
    naming the row for a null or non-JSON payload, and naming the column for an
    option out of range or a NaN or infinity (which JSON lacks) in an option or
    a payload (:mod:`osqueue_spark.args`).
    """
    import pyarrow as pa

    loads, dumps = orjson.loads, orjson.dumps
    for batch in batches:
        names = batch.schema.names
        if "payload" in names and (pa.types.is_string(batch.schema.field("payload").type)
                                   or pa.types.is_large_string(batch.schema.field("payload").type)):
            options = [(n, batch.column(n).to_pylist()) for n in names if n in OPTION_COLUMNS]
            for i, text in enumerate(batch.column("payload").to_pylist()):
                if text is None:
                    raise InvalidRequest(f"column 'payload' is null in row {i} of a batch")
                try:
                    loads(text)
                except orjson.JSONDecodeError as exc:
                    raise InvalidRequest(
                        f"column 'payload' must hold JSON text (or be a struct or map); "
                        f"got {text[:60]!r}: {exc}") from None
                if "\n" in text:  # a staged payload is one line (its numbers exact)
                    text = wire.dumps(wire.loads(text)).decode()
                head = ""
                if options:
                    set_ = {n: values[i] for n, values in options if values[i] is not None}
                    head = dumps(job_options(set_)).decode() if set_ else ""
                # broker.wire.encode_staged_line's format, inlined: a quarter of its cost
                yield f"{head}\t{text}\n".encode()
        else:
            maps = {n for n in names if pa.types.is_map(batch.schema.field(n).type)}
            for row in batch.to_pylist():
                for n in maps:  # Arrow gives maps as lists of (key, value) pairs
                    if row[n] is not None:
                        row[n] = dict(row[n])
                yield job_staged_line(row_to_job(row))


def ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def ts_text(text: str | None) -> datetime | None:
    return None if not text else ts(timefmt.parse(text))
