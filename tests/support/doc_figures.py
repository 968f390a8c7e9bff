"""Figures of a markdown page against the results files it names (the benchmarks page's
test, tests/repo/test_benchmarks_doc.py). Reads markdown and JSON only: no benchmark is
imported.

The page is cut into sections at its ``## `` headings (the text before the first is a
section too). A section names its results files as ``bench/results/NAME.json``
(anywhere in it, code spans included). Its *figures* are the numbers of its prose,
tables and headings outside code spans and fenced code blocks (those hold commands
and options): a number not part of a word (``p50``, ``1k`` and ``6c6d5fb`` hold none),
``1,234.5`` and ``1.12x`` included, and version numbers such as ``3.11.7``.

A figure *appears* in a results file when some number of the file (its JSON numbers,
and the numbers written inside its strings), times one of :data:`SCALES` (units:
seconds and milliseconds, bytes and MB, fractions and percents), rounds to the figure
as written: to its decimals, and a whole number of 1,000 or more to its significant
digits (``592,500`` for 592,450.5). A version appears when the file's text holds it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: what a file's number is multiplied by before it is compared with a figure
SCALES = (1.0, 100.0, 1e3, 1e6, 1e-3, 1e-6, 1 / 1024, 1 / 1024**2)

_RESULTS_FILE = re.compile(r"bench/results/[\w.-]+\.json")
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?![\w.])")
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?=x?(?![\w.]))")
_IN_STRING = re.compile(r"\d+(?:\.\d+)?")


@dataclass
class Section:
    """One ``##`` section: its heading, the results files it names, its figures."""

    heading: str
    files: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (the commands) and code spans."""
    return _CODE_SPAN.sub(" ", _FENCE.sub(" ", text))


def sections(markdown: str) -> list[Section]:
    """The page's sections, each with the results files it names and its figures."""
    out = []
    for part in re.split(r"^(?=## )", markdown, flags=re.M):
        heading = part.splitlines()[0] if part.strip() else ""
        text = prose(part)
        versions = _VERSION.findall(text)
        numbers = _VERSION.sub(" ", text)
        out.append(Section(heading, sorted(set(_RESULTS_FILE.findall(part))),
                           [whole + (dec or "") for whole, dec in _NUMBER.findall(numbers)],
                           versions))
    return out


def numbers_of(value: Any) -> list[float]:
    """Every number of a decoded JSON value, those written inside its strings too."""
    out: list[float] = []
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int | float):
            out.append(float(item))
        elif isinstance(item, str):
            out += [float(n) for n in _IN_STRING.findall(item)]
        elif isinstance(item, dict):
            todo += list(item.keys()) + list(item.values())
        elif isinstance(item, list):
            todo += item
    return [x for x in out if math.isfinite(x)]


def tolerance(figure: str) -> tuple[float, float]:
    """(the figure's value, how far from it a number may be and still round to it)."""
    text = figure.replace(",", "")
    value = float(text)
    if "." in text:
        return value, 0.5 * 10 ** -len(text.split(".")[1])
    if value >= 1000:  # trailing zeros of a large whole number are not significant
        return value, 0.5 * 10 ** (len(text) - len(text.rstrip("0")))
    return value, 0.5


def appears(figure: str, numbers: list[float]) -> bool:
    """Whether ``figure`` is one of ``numbers`` (scaled by one of :data:`SCALES`), as
    rounded for the page."""
    value, tol = tolerance(figure)
    slack = tol * (1 + 1e-9) + 1e-12
    return any(abs(n * s - value) <= slack for n in numbers for s in SCALES)


def unsourced(page: Path, root: Path) -> list[str]:
    """Every problem of ``page``: a section with figures that names no results file (or
    one that does not exist, or lacks its command or machine), a results file whose
    command's script the section does not name, and each figure or version that
    appears in none of the files its section names."""
    problems = []
    for sec in sections(page.read_text()):
        where = sec.heading or "(the text before the first heading)"
        if not sec.figures and not sec.versions:
            continue
        if not sec.files:
            problems.append(f"{where}: figures {sec.figures[:5]} but no bench/results file")
            continue
        numbers: list[float] = []
        texts = []
        for name in sec.files:
            path = root / name
            if not path.exists():
                problems.append(f"{where}: {name} does not exist")
                continue
            data = json.loads(path.read_text())
            script = str(data.get("command", "")).split(" ")[1:2]
            if not script or script[0] not in page.read_text():
                problems.append(f"{where}: {name} names no command the page shows "
                                f"({data.get('command')!r})")
            machine = data.get("machine") or {}
            missing = [k for k in ("cores", "cpu_model", "python", "pyspark") if k not in machine]
            if missing or "load" not in data:
                problems.append(f"{where}: {name} does not record {missing or ['load']}")
            numbers += numbers_of(data)
            texts.append(path.read_text())
        problems += [f"{where}: {f} appears in none of {sec.files}"
                     for f in sec.figures if not appears(f, numbers)]
        problems += [f"{where}: version {v} appears in none of {sec.files}"
                     for v in sec.versions if not any(v in t for t in texts)]
    return problems
