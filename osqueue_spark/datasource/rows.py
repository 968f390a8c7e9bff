"""Spark rows -> jobs, and jobs -> rows, shared by the data source and the sinks."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from broker import fields, timefmt, wire
from broker.errors import InvalidRequest
from osqueue_spark.args import job_options
from osqueue_spark.client import job_staged_line

OPTION_COLUMNS = ("priority", "delay_s", "max_attempts", "key")


def group_of(value: Any, column: str, row: int | None = None) -> str | None:
    """A row's group (``value``, of the ``groupColumn`` ``column``), checked
    (:func:`broker.fields.group`): ``InvalidRequest`` naming the column and row."""
    if value is None:
        return None
    where = f"column {column!r}" + ("" if row is None else f" in row {row} of a batch")
    return fields.group(where, value)


def row_to_job(row: Any, group_column: str | None = None,
               index: int | None = None) -> dict[str, Any]:
    """A job body from a Row: its ``payload`` column (JSON text, struct or map),
    or else all its columns but the option columns as a JSON object; its group
    from the column ``group_column`` (which stays in the payload) if given
    (a bad one refused naming the row's ``index`` in its batch, if given)."""
    data = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
    job: dict[str, Any] = {}
    if group_column is not None:
        group = group_of(data.get(group_column), group_column, index)
        if group is not None:
            job["group"] = group
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


def arrow_staged_lines(batches: Iterator[Any],
                       group_column: str | None = None) -> Iterator[bytes]:
    """Staged lines (the format: :mod:`broker.wire`) from Arrow record batches
    (``DataSourceArrowWriter``), one a row; each row's group from the string
    column ``group_column`` if given (:func:`row_to_job`).

    A string ``payload`` column is checked to be JSON and passed through as
    text (no decode and re-encode); struct and map payloads, or rows without a
    payload column, go through :func:`row_to_job`. Raises ``InvalidRequest``
    naming the row for a null or non-JSON payload, and naming the column for an
    option out of range or a NaN or infinity (which JSON lacks) in an option or
    a payload (:mod:`osqueue_spark.args`).
    """
    import pyarrow as pa

    loads, dumps = orjson.loads, orjson.dumps
    sep, end = wire.STAGED_SEP_TEXT, wire.STAGED_END_TEXT
    for batch in batches:
        names = batch.schema.names
        if "payload" in names and (pa.types.is_string(batch.schema.field("payload").type)
                                   or pa.types.is_large_string(batch.schema.field("payload").type)):
            options = [(n, batch.column(n).to_pylist()) for n in names if n in OPTION_COLUMNS]
            groups = None if group_column is None else batch.column(group_column).to_pylist()
            for i, text in enumerate(batch.column("payload").to_pylist()):
                if text is None:
                    raise InvalidRequest(f"column 'payload' is null in row {i} of a batch")
                try:
                    loads(text)
                except orjson.JSONDecodeError as exc:
                    raise InvalidRequest(
                        f"column 'payload' must hold JSON text (or be a struct or map); "
                        f"got {text[:60]!r}: {exc}") from None
                if end in text:  # a staged payload is one line (its numbers exact)
                    text = wire.staged_payload(text.encode()).decode()
                head = ""
                if options or groups is not None:
                    set_ = {n: values[i] for n, values in options if values[i] is not None}
                    if groups is not None and groups[i] is not None:
                        set_["group"] = group_of(groups[i], group_column or "", i)
                    head = dumps(job_options(set_)).decode() if set_ else ""
                # broker.wire.encode_staged_line, inlined: a quarter of its cost
                yield f"{head}{sep}{text}{end}".encode()
        else:
            maps = {n for n in names if pa.types.is_map(batch.schema.field(n).type)}
            for i, row in enumerate(batch.to_pylist()):
                for n in maps:  # Arrow gives maps as lists of (key, value) pairs
                    if row[n] is not None:
                        row[n] = dict(row[n])
                yield job_staged_line(row_to_job(row, group_column, i))


def arrow_staged_chunks(batches: Iterator[Any], max_rows: int, max_bytes: int,
                        group_column: str | None = None) -> Iterator[tuple[bytes, int]]:
    """The staged lines of :func:`arrow_staged_lines` for the same batches, in
    pieces of at most ``max_rows`` rows and (but for a single larger line)
    ``max_bytes`` bytes: ``(lines, rows)``, in row order.

    A batch whose only column is a string ``payload`` without nulls or line
    breaks (a Spark write of ``to_json(...)``, say) is joined by Arrow, with
    no Python step a row and no JSON parse here: the broker checks every
    staged payload and refuses a chunk holding one that is not JSON, naming
    its line (about 15 times faster than a row at a time, which parsed each
    payload: ``bench/spark_bench.py``, the write row). Any other batch goes a
    row at a time, and raises as :func:`arrow_staged_lines` does.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        if group_column is not None:
            # each group's rows together, in row order (a stable sort): the broker
            # writes them group-major as they come (broker.model.groups.directories)
            order = pc.sort_indices(batch, sort_keys=[(group_column, "ascending")],
                                    null_placement="at_end")
            yield from _row_pieces(batch.take(order), max_rows, max_bytes, group_column)
            continue
        if not _plain_payloads(batch, pa):
            yield from _row_pieces(batch, max_rows, max_bytes, group_column)
            continue
        kind = batch.schema.field(0).type
        none, tab, eol = (pa.scalar(text, kind)
                          for text in ("", wire.STAGED_SEP_TEXT, wire.STAGED_END_TEXT))
        joined = pc.binary_join_element_wise(  # tab + text + line break, each row
            pc.binary_join_element_wise(none, batch.column(0), tab), none, eol)
        offsets = memoryview(joined.buffers()[1]).cast(
            "q" if pa.types.is_large_string(joined.type) else "i")[
                joined.offset:joined.offset + len(joined) + 1]
        start = offsets[0]
        data = joined.buffers()[2].slice(start, offsets[-1] - start).to_pybytes()
        if data.count(wire.STAGED_END) != len(joined):  # a text spans lines: a row at a time
            yield from _row_pieces(batch, max_rows, max_bytes, group_column)
            continue
        for lo, hi in _pieces(offsets[1:], start, max_rows, max_bytes):
            yield data[offsets[lo] - start:offsets[hi] - start], hi - lo


def _row_pieces(batch: Any, max_rows: int, max_bytes: int,
                group_column: str | None = None) -> Iterator[tuple[bytes, int]]:
    lines = list(arrow_staged_lines(iter([batch]), group_column))
    ends = list(itertools.accumulate(map(len, lines)))
    for lo, hi in _pieces(ends, 0, max_rows, max_bytes):
        yield b"".join(lines[lo:hi]), hi - lo


def _plain_payloads(batch: Any, pa: Any) -> bool:
    """Whether ``batch`` holds a string ``payload`` column only, with no null
    (else the row-at-a-time path names the null row)."""
    if batch.schema.names != ["payload"]:
        return False
    kind = batch.schema.field(0).type
    return bool((pa.types.is_string(kind) or pa.types.is_large_string(kind))
                and not batch.column(0).null_count)


def _pieces(ends: Sequence[int], start: int, max_rows: int,
            max_bytes: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` runs of items of at most ``max_rows`` items and ``max_bytes``
    bytes (but at least one item each), item ``i`` ending at byte ``ends[i]``
    of a run of bytes from ``start`` on."""
    out: list[tuple[int, int]] = []
    lo, base = 0, start
    while lo < len(ends):
        hi = bisect.bisect_right(ends, base + max_bytes, lo + 1, len(ends))
        hi = min(max(hi, lo + 1), lo + max_rows)
        out.append((lo, hi))
        base, lo = ends[hi - 1], hi
    return out


def ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def ts_text(text: str | None) -> datetime | None:
    return None if not text else ts(timefmt.parse(text))
