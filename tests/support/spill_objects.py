"""Spilled jobs, spill objects and their references for the pure tests of spill
objects (tests/unit/broker/model/format/test_spill_format.py,
tests/unit/broker/model/segments/test_spills.py)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

from broker import paths
from broker.limits import MAX_ERROR_CHARS
from broker.model.format.spill_format import EncodedSpill, ErrorEntry, SpilledJob, encode_spills
from broker.model.format.spill_refs import SpillRef, new_ref

#: A time (ms): 2023-11-14T22:13:20.123Z.
T0 = 1_700_000_000_123
#: Where the readers say the objects are (a store URL without credentials).
STORE = "s3://bucket/prefix"
ETAG = '"etag-1"'


def spill_key(kind: str, commit_seq: int = 42, queue: str = "q",
              salt: str = "5d0e91aa") -> str:
    """The key of a spill object of ``kind`` (``salt`` as the broker's)."""
    return paths.spill_key(queue, paths.spill_name(kind, commit_seq, salt))


def spilled(seq: int, **fields: Any) -> SpilledJob:
    """A spilled job of seq ``seq`` (payload ``{"n":seq}``, one failure at
    attempt 1), ``fields`` replacing any of its defaults."""
    values: dict[str, Any] = {
        "payload": b'{"n":%d}' % seq, "priority": 0, "run_at_ms": T0 + seq,
        "attempts": 1, "max_attempts": 3, "created_ms": T0,
        "errors": (ErrorEntry(1, T0, "ValueError: boom"),)}
    values.update(fields)
    return SpilledJob(seq=seq, **values)


def written(kind: str, jobs: list[SpilledJob], queue: str = "q",
            **bounds: int) -> list[tuple[EncodedSpill, SpillRef]]:
    """Each object :func:`encode_spills` makes of ``jobs``, with its ref as the
    broker would make it after writing it (keys of successive commit seqs)."""
    return [(obj, new_ref(obj, spill_key(kind, 42 + i, queue), ETAG))
            for i, obj in enumerate(encode_spills(queue, kind, jobs, **bounds))]


# -- hypothesis ---------------------------------------------------------------------

_TEXTS = st.sampled_from(["", "ValueError: boom", "KeyError: 'doc'\n  at line 3",
                          "x" * (MAX_ERROR_CHARS + 10), "é\u2028\"quoted\"\\"])
_ERRORS = st.lists(st.builds(ErrorEntry, st.integers(1, 5), st.integers(0, 2**44), _TEXTS),
                   max_size=11)
# JSON payloads as the broker keeps them: compact bytes, big integers spelled out
_PAYLOADS = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6,
).map(orjson.dumps) | st.integers(2**64, 2**70).map(lambda n: b'{"big":%d}' % n)


@st.composite
def spilled_jobs(draw: st.DrawFn, kind: str, max_size: int = 30) -> list[SpilledJob]:
    """Jobs of distinct seqs that may be spilled into a ``kind`` object: any
    priority (among a few), times, attempts (a pending job with one left),
    key, error history (up to 11 entries, texts repeated, some too long) and
    JSON payload (compact, big integers spelled out)."""
    seqs = draw(st.lists(st.integers(1, 10**12), unique=True, max_size=max_size, min_size=1))
    jobs = []
    for seq in seqs:
        left = 1 if kind == "pending" else 0  # (a pending job has an attempt left)
        max_attempts = draw(st.integers(1 + left, 5))
        attempts = draw(st.integers(0, max_attempts - left))
        jobs.append(SpilledJob(
            seq=seq, payload=draw(_PAYLOADS),
            priority=draw(st.integers(-2, 2)), run_at_ms=draw(st.integers(0, 2**44)),
            attempts=attempts, max_attempts=max_attempts,
            created_ms=draw(st.integers(0, 2**44)),
            key=draw(st.none() | st.text(min_size=1, max_size=6)),
            errors=tuple(draw(_ERRORS))))
    return jobs
