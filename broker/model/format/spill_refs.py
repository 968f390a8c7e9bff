"""The head's references to spill objects (``"spills"``): their JSON, claim
order, the redrive of a dead object by reference, and the jobs taken out of
one one by one. Pure: values in, values out; the time is passed in.

A spill object holds jobs a commit took out of the head (failed jobs waiting
for their retry, or dead jobs), sorted; its bytes are
:mod:`broker.model.format.spill_format`'s. The head keeps a :class:`SpillRef`
per object, one a line (about 170 bytes)::

    {"key":"q/spills/p-000000000042-5d0e91aa.jsonl","etag":"\\"3f9a\\"","kind":"pending","priority":0,"count":1024,"taken":0,"next":["2026-11-22T03:43:49.000Z",1234],"seqs":[1234,9876],"due_min":"2026-11-22T03:43:49.000Z","created_min":"2026-11-22T03:40:00.000Z"}
    {"key":"q/spills/d-000000000051-0c2b1d4e.jsonl","etag":"\\"9e1c\\"","kind":"dead","count":2048,"first":[0,2001],"seqs":[2001,40960],"created_min":"2026-11-22T03:40:00.000Z"}

- A **pending** object's ref has a cursor, ``taken``, as a segment's: the
  jobs before it have moved into the head (claimed). ``priority`` and
  ``next`` (run-at and seq) are the cursor line's, its key in claim order
  without reading the object (:func:`due_key`); ``due_min`` the earliest due
  time of its untaken jobs as known (stats). ``next`` and ``due_min`` are
  absent once every job is taken (the ref stays while a claim names it).
- A **dead** object's ref has ``first``: line 0's priority and seq (the
  object's lines are by priority, higher first, then seq).
- A **redrive by reference** (:func:`redriven`) turns a dead ref into a
  pending one with ``reset_at``: every job of the object is then pending, with
  no attempts, due at ``reset_at``; nothing is read or copied. Its key still
  names a dead object (``d-``); ``first`` is kept, and ``priority`` and ``next``
  start as line 0's.
- ``out`` (either kind, optional): runs ``[position, length]`` of jobs taken
  out one by one (a cancel or a redrive by id copies the job into the head);
  claims, pages and counts skip them (:func:`live_runs`, :func:`live_count`).
- ``seqs``: the lowest and highest seq in the object (lookups and pages pick
  candidate objects by it); ``created_min``: the earliest creation time.

Errors: every refusal is a ``ValueError`` naming the reference (``where``,
e.g. ``"queue q: spills[3]"``), the object's key and the field.

The state keeps them (``QueueState.spill_refs``); the codec writes them
(:func:`refs_bytes`) and the decoder reads them back (:func:`refs_from`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from broker import timefmt
from broker.errors import shown
from broker.limits import MAX_PRIORITY
from broker.model.format.segment_format import MAX_ETAG_CHARS, check_int, check_time
from broker.model.format.spill_format import KINDS, MAX_SPILL_JOBS, EncodedSpill
from broker.model.indexes import SEQ_MASK, TIME_MASK, ready_key
from broker.model.job import DEAD, PENDING
from broker.paths import parse_spill_key
from broker.wire import compact

#: The fields a ref of each shape has, and those it may have.
_ALWAYS = frozenset({"key", "etag", "kind", "count", "seqs", "created_min"})
_FIELDS = {
    "dead": (_ALWAYS | {"first"}, frozenset({"out"})),
    "pending": (_ALWAYS | {"priority", "taken"}, frozenset({"out", "next", "due_min"})),
    "redriven": (_ALWAYS | {"priority", "taken", "reset_at", "first"},
                 frozenset({"out", "next", "due_min"})),
}


@dataclass(frozen=True, slots=True)
class SpillRef:
    """What the head keeps per spill object (module docstring): times in ms
    since the epoch, ``seqs`` the lowest and highest seq in the object, ``out``
    runs ``(position, length)``, ascending, apart. A pending ref's
    ``priority``, ``next`` and ``due_min`` are None once every job is taken
    (``priority`` stays); a dead ref has no ``priority``, ``taken`` 0."""

    key: str
    etag: str
    kind: str
    count: int
    seqs: tuple[int, int]
    created_min: int
    priority: int | None = None
    taken: int = 0
    next: tuple[int, int] | None = None
    due_min: int | None = None
    first: tuple[int, int] | None = None
    reset_ms: int | None = None
    out: tuple[tuple[int, int], ...] = ()
    #: its line in the head once spelled out (:func:`ref_bytes`; never compared)
    line: bytes | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def queue(self) -> str:
        """The queue the key names."""
        parsed = parse_spill_key(self.key)
        if parsed is None:
            raise ValueError(f"spill key {shown(self.key)} is not a spill object key")
        return parsed[0]

    @property
    def live(self) -> int:
        """How many jobs the ref still holds (:func:`live_count`)."""
        return live_count(self)

    @property
    def exhausted(self) -> bool:
        """Whether a pending ref's jobs have all been taken (false for a dead ref)."""
        return self.kind == PENDING and self.taken == self.count


def new_ref(obj: EncodedSpill, key: str, etag: str) -> SpillRef:
    """The ref to ``obj`` once written under ``key`` at ``etag``, nothing taken;
    ``ValueError`` if ``key`` is not a spill object key of ``obj``'s kind."""
    parsed = parse_spill_key(key)
    if parsed is None or parsed[1] != obj.kind:
        raise ValueError(f"{shown(key)} is not the key of a {obj.kind} spill object")
    if obj.kind == DEAD:
        return SpillRef(key, etag, DEAD, obj.count, obj.seqs, obj.created_min,
                        first=obj.first)
    return SpillRef(key, etag, PENDING, obj.count, obj.seqs, obj.created_min,
                    priority=obj.priority, next=obj.next, due_min=obj.due_min)


# -- JSON -----------------------------------------------------------------------------


def ref_to_json(ref: SpillRef) -> dict[str, Any]:
    """The ref as the head's ``"spills"`` list holds it (times as text, for jq;
    a field with nothing to say left out)."""
    out: dict[str, Any] = {"key": ref.key, "etag": ref.etag, "kind": ref.kind}
    if ref.kind == PENDING:
        out["priority"] = ref.priority
        if ref.reset_ms is not None:
            out["reset_at"] = timefmt.fmt(ref.reset_ms)
    out["count"] = ref.count
    if ref.kind == PENDING:
        out["taken"] = ref.taken
        if ref.next is not None:
            out["next"] = [timefmt.fmt(ref.next[0]), ref.next[1]]
    if ref.first is not None:
        out["first"] = list(ref.first)
    out["seqs"] = list(ref.seqs)
    if ref.out:
        out["out"] = [list(run) for run in ref.out]
    if ref.due_min is not None:
        out["due_min"] = timefmt.fmt(ref.due_min)
    out["created_min"] = timefmt.fmt(ref.created_min)
    return out


def ref_bytes(ref: SpillRef) -> bytes:
    """The ref's line in the head: :func:`ref_to_json`, compact. Kept on the
    ref (a frozen value; a changed ref is a new one): every commit writes
    every ref, and 500 of them took 1.5 ms a commit to spell out again."""
    line = ref.line
    if line is None:
        line = compact(orjson.dumps(ref_to_json(ref)))  # (kept: not orjson's 4 KB buffer)
        object.__setattr__(ref, "line", line)
    return line


def _pair(raw: Any, what: str, first: tuple[int, int], second: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise ValueError(f"{what} must be a list of two integers")
    return (check_int(raw[0], f"{what}[0]", *first), check_int(raw[1], f"{what}[1]", *second))


def ref_from_json(raw: Any, where: str) -> SpillRef:
    """A ref from its JSON (:func:`ref_to_json`), checked: exactly the fields of
    its shape (dead, pending, or pending by redrive), a key
    :func:`broker.paths.spill_key` makes of the object's kind, a short
    printable etag, counts and seqs in range (``taken <= count``; ``next`` and
    ``first`` within ``seqs``; a redriven ref due at its ``reset_at``), ``out``
    runs ascending, apart and within ``[0, count)``. ``ValueError`` naming
    ``where`` (e.g. ``"queue q: spills[3]"``), the key and the field otherwise."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a spill reference must be an object")
    key, kind = raw.get("key"), raw.get("kind")
    parsed = parse_spill_key(key) if isinstance(key, str) else None
    if parsed is None:
        raise ValueError(f"{where}: {shown(key)} is not a spill object key")
    at = f"{where}: spill {key}"
    if kind not in KINDS:
        raise ValueError(f"{at}: kind {shown(kind)} is not one of {list(KINDS)}")
    shape = "redriven" if kind == PENDING and "reset_at" in raw else kind
    required, optional = _FIELDS[shape]
    if not required <= raw.keys() or not raw.keys() - required <= optional:
        odd = sorted((raw.keys() ^ required) - optional)
        raise ValueError(f"{at}: fields {shown(odd)} missing or unknown for a {shape} reference")
    if parsed[1] != (DEAD if shape != PENDING else PENDING):
        raise ValueError(f"{at}: its key names a {parsed[1]} object, the reference is "
                         f"{shape}")
    etag = raw["etag"]
    if not isinstance(etag, str) or not 0 < len(etag) <= MAX_ETAG_CHARS or \
            not etag.isprintable():
        raise ValueError(f"{at}: etag {shown(etag)}; it must be 1-{MAX_ETAG_CHARS} "
                         "printable characters")
    count = check_int(raw["count"], f"{at}: count", 1, MAX_SPILL_JOBS)
    seqs = _pair(raw["seqs"], f"{at}: seqs", (1, SEQ_MASK), (1, SEQ_MASK))
    if seqs[1] - seqs[0] + 1 < count:
        raise ValueError(f"{at}: seqs {list(seqs)} cannot hold {count} jobs")
    ref = SpillRef(key=str(key), etag=etag, kind=kind, count=count, seqs=seqs,
                   created_min=check_time(raw["created_min"], f"{at}: created_min"),
                   out=_out_from(raw.get("out"), count, at) if "out" in raw else ())
    if "first" in raw:
        first = _pair(raw["first"], f"{at}: first", (-MAX_PRIORITY, MAX_PRIORITY), seqs)
        ref = replace(ref, first=first)
    if kind == DEAD:
        return ref
    taken = check_int(raw["taken"], f"{at}: taken", 0, count)
    ref = replace(ref, taken=taken, priority=check_int(
        raw["priority"], f"{at}: priority", -MAX_PRIORITY, MAX_PRIORITY))
    if shape == "redriven":
        ref = replace(ref, reset_ms=check_time(raw["reset_at"], f"{at}: reset_at"))
    if ("next" in raw) != (taken < count) or ("due_min" in raw) != (taken < count):
        raise ValueError(f"{at}: next and due_min must be there exactly while jobs are "
                         f"untaken (taken {taken} of {count})")
    if taken == count:
        return ref
    if not isinstance(raw["next"], list) or len(raw["next"]) != 2:
        raise ValueError(f"{at}: next must be [run_at, seq]")
    next_ = (check_time(raw["next"][0], f"{at}: next[0]"),
             check_int(raw["next"][1], f"{at}: next[1]", *seqs))
    due_min = check_time(raw["due_min"], f"{at}: due_min")
    if due_min > next_[0]:
        raise ValueError(f"{at}: due_min is after the next job's run_at")
    if ref.reset_ms is not None:
        assert ref.first is not None and ref.priority is not None
        if next_[0] != ref.reset_ms:
            raise ValueError(f"{at}: next must be due at reset_at (every job of a redriven "
                             "object is)")
        if ref.priority > ref.first[0]:
            raise ValueError(f"{at}: priority is above the first job's (a dead object's "
                             "lines are by priority, higher first)")
    return replace(ref, next=next_, due_min=due_min)


def _out_from(raw: Any, count: int, at: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{at}: out must be a non-empty list of [position, length] runs")
    runs = []
    end = -1  # (one past the previous run; runs are apart: a gap between them)
    for i, item in enumerate(raw):
        start, length = _pair(item, f"{at}: out[{i}]", (0, count - 1), (1, count))
        if start <= end or start + length > count:
            raise ValueError(f"{at}: out[{i}] overlaps or touches the run before it, or "
                             f"passes the object's {count} jobs")
        runs.append((start, length))
        end = start + length
    return tuple(runs)


# -- claim order ----------------------------------------------------------------------


def claim_key(ref: SpillRef) -> int | None:
    """The ready-heap key (:func:`broker.model.indexes.ready_key`: priority,
    then run-at, then seq) of a pending ref's next job, or None for a dead or
    exhausted ref. The key of the cursor line, which may be a position taken
    ``out`` (claims skip it): the source then comes up in claim order no later
    than its next live job."""
    if ref.kind != PENDING or ref.next is None or ref.priority is None:
        return None
    return ready_key(ref.priority, ref.next[0], ref.next[1])


def due_key(ref: SpillRef, now_ms: int) -> int | None:
    """:func:`claim_key` if the ref's next job is due at ``now_ms``, else None."""
    if ref.next is None or ref.next[0] > now_ms:
        return None
    return claim_key(ref)


# -- redrive by reference -------------------------------------------------------------


def redriven(ref: SpillRef, now_ms: int) -> SpillRef:
    """Dead ref ``ref`` redriven at ``now_ms``: a pending ref to the same object
    whose jobs are all pending, with no attempts, due now, in the object's
    order (its lines are by priority, higher first, then seq: claim order),
    errors kept; ``out`` kept (those jobs are elsewhere). One edit of the
    head; nothing read or copied. ``ValueError`` naming the key for a ref that
    is not dead, or a time out of range."""
    if ref.kind != DEAD or ref.first is None:
        raise ValueError(f"spill {ref.key}: only a dead spill reference can be redriven "
                         f"by reference (this one is {ref.kind})")
    check_int(now_ms, f"spill {ref.key}: redrive time", 0, TIME_MASK)
    return replace(ref, kind=PENDING, priority=ref.first[0], taken=0,
                   next=(now_ms, ref.first[1]), due_min=now_ms, reset_ms=now_ms)


# -- jobs taken out one by one --------------------------------------------------------


def is_out(ref: SpillRef, position: int) -> bool:
    """Whether the job at ``position`` was taken out of the object."""
    at = bisect.bisect_right(ref.out, (position, MAX_SPILL_JOBS + 1)) - 1
    return at >= 0 and ref.out[at][0] <= position < ref.out[at][0] + ref.out[at][1]


def with_out(ref: SpillRef, position: int) -> SpillRef:
    """The ref with the job at ``position`` taken out (runs merged with their
    neighbours). ``ValueError`` naming the key for a position outside the
    object, already out, or (pending) already taken by the cursor."""
    lo = ref.taken if ref.kind == PENDING else 0
    check_int(position, f"spill {ref.key}: position", lo, ref.count - 1)
    if is_out(ref, position):
        raise ValueError(f"spill {ref.key}: position {position} is already out")
    runs = [*ref.out, (position, 1)]
    runs.sort()
    merged: list[tuple[int, int]] = []
    for start, length in runs:
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1] = (merged[-1][0], merged[-1][1] + length)
        else:
            merged.append((start, length))
    return replace(ref, out=tuple(merged))


def live_runs(ref: SpillRef, start: int, stop: int) -> list[tuple[int, int]]:
    """The positions in ``[start, stop)`` not taken out, as runs ``(position,
    length)`` in order (what a claim or page of that window takes)."""
    out: list[tuple[int, int]] = []
    at = start
    for run_start, length in ref.out:
        if run_start + length <= at:
            continue
        if run_start >= stop:
            break
        if run_start > at:
            out.append((at, run_start - at))
        at = max(at, run_start + length)
    if at < stop:
        out.append((at, stop - at))
    return out


def out_count(ref: SpillRef, start: int = 0, stop: int | None = None) -> int:
    """How many positions in ``[start, stop)`` (default: all) are taken out."""
    hi = ref.count if stop is None else stop
    return sum(max(0, min(s + n, hi) - max(s, start)) for s, n in ref.out)


def live_count(ref: SpillRef) -> int:
    """How many jobs the ref still holds: a pending ref's untaken jobs, a dead
    ref's jobs, less those taken out (what stats count, and a redrive of all
    dead jobs answers for this ref)."""
    lo = ref.taken if ref.kind == PENDING else 0
    return ref.count - lo - out_count(ref, lo)


# -- the head's list ------------------------------------------------------------------


def refs_bytes(refs: Sequence[SpillRef]) -> bytes:
    """The head's ``"spills"`` field, one ref a line (``[]`` for none: the field
    is always there, for jq recipes), with its leading ``,\\n``."""
    if not refs:
        return b',\n"spills":[]'
    return b',\n"spills":[\n' + b",\n".join([ref_bytes(ref) for ref in refs]) + b"\n]"


def refs_from(raw: Any) -> list[SpillRef]:
    """The head's ``"spills"`` list read back (:func:`ref_from_json` each),
    each object referenced once. ``ValueError`` naming the position
    (``spills[i]``) and the key otherwise."""
    if not isinstance(raw, list):
        raise ValueError("spills must be a list")
    refs = [ref_from_json(item, f"spills[{i}]") for i, item in enumerate(raw)]
    seen: set[str] = set()
    for i, ref in enumerate(refs):
        if ref.key in seen:
            raise ValueError(f"spills[{i}] references {ref.key} again (each spill "
                             "object is referenced once)")
        seen.add(ref.key)
    return refs
