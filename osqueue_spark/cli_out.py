"""What the ``osqueue`` command prints and how it reads its arguments: one-line
messages and JSON with control characters escaped, tables, and the argument
types (:mod:`osqueue_spark.cli`, :mod:`osqueue_spark.cli_jobs`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

import orjson
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from broker import wire
from broker.display import printable


class UsageError(Exception):
    """A bad argument: said in one line, exit status 2."""


def say(text: str, file: IO[str] | None = None) -> None:
    """Print one human-readable line (stdout), control characters escaped."""
    print(printable(text), file=file or sys.stdout)


def dump(value: Any) -> None:
    """Print ``value`` as JSON (``--json``): control characters escaped by the
    encoder, payload numbers exact (a long decimal or an integer past 64 bits as
    the broker holds it: :func:`broker.wire.dumps`)."""
    text = wire.dumps(value, option=orjson.OPT_INDENT_2).decode()
    print(NON_ASCII.sub(json_escape, text))  # (C1 controls, bidi overrides: as escapes)


NON_ASCII = re.compile(r"[^\x00-\x7e]")  # (DEL too)


def json_escape(match: re.Match[str]) -> str:
    """A character outside ASCII (only ever inside a JSON string) as its \\u escape,
    as a surrogate pair past U+FFFF."""
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def console(file: IO[str] | None = None) -> Console:
    """A rich console on ``file`` (stdout): plain text, no markup read from data,
    and lines never wrapped when the output is not a terminal (a pipe, a file)."""
    out = file or sys.stdout
    return Console(file=out, highlight=False, width=None if out.isatty() else 100_000)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> Table:
    """Rows under a header line, columns aligned; cells shown as plain text."""
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in headers:
        grid.add_column(header, no_wrap=True)
    for row in rows:
        grid.add_row(*(Text("" if c is None else printable(str(c))) for c in row))
    return grid


def spill_rows(stats: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The ``osqueue stats`` row of the jobs in spill objects (none while there
    are none: a broker with spills off, or nothing spilled)."""
    objects = stats.get("spill_objects") or {}
    if not sum(objects.values()):
        return []
    jobs = stats.get("in_spills") or {}
    return [("in spill objects", f"{jobs.get('dead', 0)} dead, {jobs.get('pending', 0)} "
             f"redriven, in {sum(objects.values())} object(s)")]


def group_rows(groups: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """``osqueue stats`` rows of the stats' ``groups`` block (none without it:
    the queue uses no groups): what the limits hold back, the busiest groups."""
    if groups is None:
        return []
    held = groups["held_back"]
    rows: list[tuple[str, Any]] = [
        ("groups (ready or claimed jobs)", groups["known"]),
        ("held back by group limits", held["jobs"]),
        ("groups at their limit", held["groups_at_limit"])]
    for row in groups["busiest"]:
        limit = "none" if row["limit"] is None else row["limit"]
        rows.append((f"group {'(none)' if row['group'] is None else row['group']}",
                     f"{row['claimed']} claimed / limit {limit}, {row['pending']} pending"))
    return rows


def error_rows(errors: Sequence[Mapping[str, Any]] | None) -> list[tuple[Any, Any, str]]:
    """``osqueue job`` rows of a job's error history (the job view's ``errors``,
    oldest first, so the newest is last): ``(attempt, failed_at, error)``, the
    error its text's first line that is not blank (a traceback's
    ``Type: message`` in a text of ``process()``), with how many lines follow;
    ``""`` for a failure that gave no text. None (an archived job, one that
    never failed): no rows."""
    rows = []
    for entry in errors or ():
        lines = [line for line in str(entry.get("error") or "").splitlines() if line.strip()]
        first = lines[0].rstrip() if lines else ""
        more = f" (+{len(lines) - 1} more line{'s' if len(lines) > 2 else ''})" \
            if len(lines) > 1 else ""
        rows.append((entry.get("attempt"), entry.get("failed_at"), first + more))
    return rows


def json_arg(text: str, what: str, command: str = "push") -> Any:
    try:
        return wire.loads(text)  # numbers exact; NaN and Infinity refused, as JSON has none
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UsageError(f"osqueue {command}: {what} is not JSON ({exc.msg}): {shown!r}"
                         ) from None


def json_line(value: Any) -> str:
    """``value`` as one line of JSON, escaped as :func:`dump` escapes it."""
    return NON_ASCII.sub(json_escape, wire.dumps(value).decode())


def positive(text: str) -> int:
    """An argparse type: a whole number > 0."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:20]!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {n}")
    return n
