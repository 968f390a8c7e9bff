"""broker.model.format.spill_refs: the head's references to spill objects: their
JSON and its checked parse, claim-order keys, the redrive of a dead object by
reference, and jobs taken out one by one (``out``). Pure."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import timefmt
from broker.model.format import spill_refs as sp
from broker.model.format.spill_format import read_checked
from broker.model.format.spill_refs import SpillRef
from broker.model.indexes import ready_key
from broker.model.job import DEAD, PENDING
from tests.support.spill_objects import ETAG, STORE, T0, spill_key, spilled, written

WHERE = "queue q: spills[3]"


def _pending(**fields: Any) -> SpillRef:
    [(_, ref)] = written(PENDING, [spilled(seq) for seq in range(10, 20)])
    return replace(ref, **fields)


def _dead(**fields: Any) -> SpillRef:
    [(_, ref)] = written(DEAD, [spilled(seq, attempts=3, priority=seq % 2)
                                for seq in range(10, 20)])
    return replace(ref, **fields)


# -- a new ref, and its JSON ----------------------------------------------------------


def test_a_pending_objects_ref_names_its_next_job_and_reads_with_jq() -> None:
    ref = _pending()
    assert sp.ref_to_json(ref) == {
        "key": spill_key(PENDING), "etag": ETAG, "kind": "pending", "priority": 0,
        "count": 10, "taken": 0, "next": [timefmt.fmt(T0 + 10), 10], "seqs": [10, 19],
        "due_min": timefmt.fmt(T0 + 10), "created_min": timefmt.fmt(T0)}
    assert orjson.loads(sp.ref_bytes(ref)) == sp.ref_to_json(ref)
    assert len(sp.ref_bytes(ref)) < 256  # (one a line in the head: about 170 bytes)
    assert ref.queue == "q" and not ref.exhausted


def test_a_dead_objects_ref_names_its_first_job() -> None:
    ref = _dead()
    assert sp.ref_to_json(ref) == {
        "key": spill_key(DEAD), "etag": ETAG, "kind": "dead", "count": 10, "first": [1, 11],
        "seqs": [10, 19], "created_min": timefmt.fmt(T0)}
    assert not ref.exhausted


def test_new_ref_refuses_a_key_of_the_other_kind() -> None:
    [(obj, _)] = written(DEAD, [spilled(1, attempts=3)])
    with pytest.raises(ValueError, match="not the key of a dead spill object"):
        sp.new_ref(obj, spill_key(PENDING), ETAG)


_TIMES = st.integers(0, 2**44)


@st.composite
def _refs(draw: st.DrawFn) -> SpillRef:
    """Any ref the broker may hold: dead, pending or redriven, partly taken,
    with jobs out."""
    count = draw(st.integers(1, 200))
    low = draw(st.integers(1, 10**9))
    seqs = (low, low + count - 1 + draw(st.integers(0, 1000)))
    seq = st.integers(*seqs)
    ref = SpillRef(key=spill_key(draw(st.sampled_from([PENDING, DEAD])),
                                 draw(st.integers(1, 10**6))),
                   etag=draw(st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                     min_size=1, max_size=20)),
                   kind=DEAD, count=count, seqs=seqs, created_min=draw(_TIMES))
    for position in draw(st.sets(st.integers(0, count - 1), max_size=20)):
        ref = sp.with_out(ref, position)
    if ref.key.rpartition("/")[2].startswith("d-"):
        ref = replace(ref, first=(draw(st.integers(-5, 5)), draw(seq)))
        if draw(st.booleans()):
            ref = sp.redriven(ref, draw(_TIMES))
    else:
        run_at = draw(_TIMES)
        ref = replace(ref, kind=PENDING, priority=draw(st.integers(-5, 5)),
                      next=(run_at, draw(seq)), due_min=run_at - draw(st.integers(0, run_at)))
    if ref.kind == PENDING:
        taken = draw(st.integers(0, count))
        ref = replace(ref, taken=taken)
        if taken == count:
            ref = replace(ref, next=None, due_min=None)
    return ref


@settings(max_examples=200, deadline=None)
@given(ref=_refs())
def test_any_ref_reads_back_from_its_json_and_bytes(ref: SpillRef) -> None:
    assert sp.ref_from_json(sp.ref_to_json(ref), WHERE) == ref
    assert sp.ref_from_json(orjson.loads(sp.ref_bytes(ref)), WHERE) == ref


def _json(ref: SpillRef, **fields: Any) -> dict[str, Any]:
    raw = sp.ref_to_json(ref)
    for name, value in fields.items():
        if value is None:
            raw.pop(name)
        else:
            raw[name] = value
    return raw


REFUSALS: list[tuple[str, Any, str]] = [
    ("not an object", lambda: [], "must be an object"),
    ("not a spill key", lambda: _json(_pending(), key="q/segments/x.jsonl"),
     "is not a spill object key"),
    ("no key", lambda: _json(_pending(), key=None), "None is not a spill object key"),
    ("an unknown kind", lambda: _json(_pending(), kind="retrying"), "kind 'retrying'"),
    ("an unknown field", lambda: _json(_pending(), extra=1), r"fields \['extra'\]"),
    ("a missing field", lambda: _json(_pending(), taken=None), r"fields \['taken'\]"),
    ("a pending field on a dead ref", lambda: _json(_dead(), taken=0), r"fields \['taken'\]"),
    ("a dead ref under a pending key", lambda: _json(_dead(), key=spill_key(PENDING)),
     "its key names a pending object, the reference is dead"),
    ("a pending ref under a dead key", lambda: _json(_pending(), key=spill_key(DEAD)),
     "its key names a dead object, the reference is pending"),
    ("a redriven ref under a pending key", lambda: _json(
        sp.redriven(_dead(), T0), key=spill_key(PENDING)),
     "its key names a pending object, the reference is redriven"),
    ("an empty etag", lambda: _json(_pending(), etag=""), "etag ''"),
    ("an unprintable etag", lambda: _json(_pending(), etag="a\nb"), "etag 'a\\\\nb'"),
    ("no jobs", lambda: _json(_pending(), count=0), "count must be"),
    ("too many jobs", lambda: _json(_pending(), count=65_537), "count must be"),
    ("seqs inverted", lambda: _json(_pending(), seqs=[19, 10]), "cannot hold 10 jobs"),
    ("seqs too narrow", lambda: _json(_pending(), seqs=[10, 15]), "cannot hold 10 jobs"),
    ("seqs not a pair", lambda: _json(_pending(), seqs=[10]), "seqs must be a list of two"),
    ("taken past count", lambda: _json(_pending(), taken=11), "taken must be"),
    ("a priority out of range", lambda: _json(_pending(), priority=10**7), "priority must be"),
    ("no next while untaken", lambda: _json(_pending(), next=None), "next and due_min"),
    ("a next once exhausted", lambda: _json(_pending(), taken=10, due_min=None),
     "next and due_min"),
    ("a next outside seqs", lambda: _json(_pending(), next=[timefmt.fmt(T0), 25]),
     r"next\[1\] must be"),
    ("a next not a time", lambda: _json(_pending(), next=["soon", 10]), r"next\[0\]"),
    ("due_min after next", lambda: _json(_pending(), due_min=timefmt.fmt(T0 + 99)),
     "due_min is after"),
    ("a first outside seqs", lambda: _json(_dead(), first=[0, 9]), r"first\[1\] must be"),
    ("a redriven next not at the reset", lambda: _json(
        sp.redriven(_dead(), T0), next=[timefmt.fmt(T0 + 1), 11]), "due at reset_at"),
    ("a redriven priority above the first's", lambda: _json(
        sp.redriven(_dead(), T0), priority=2), "above the first job's"),
    ("out empty", lambda: _json(_dead(), out=[]), "out must be a non-empty list"),
    ("out overlapping", lambda: _json(_dead(), out=[[1, 3], [2, 1]]), r"out\[1\] overlaps"),
    ("out touching", lambda: _json(_dead(), out=[[1, 1], [2, 1]]), r"out\[1\] overlaps"),
    ("out past the count", lambda: _json(_dead(), out=[[8, 3]]), r"out\[0\] overlaps"),
    ("out of length 0", lambda: _json(_dead(), out=[[8, 0]]), r"out\[0\]\[1\] must be"),
    ("a bad created_min", lambda: _json(_dead(), created_min=5), "created_min must be a time"),
]


@pytest.mark.parametrize(("what", "make", "match"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_ref_from_json_refuses_naming_the_ref_and_the_field(what: str, make: Any,
                                                           match: str) -> None:
    raw = make()
    with pytest.raises(ValueError, match=match) as info:
        sp.ref_from_json(raw, WHERE)
    message = str(info.value)
    assert message.startswith(WHERE)
    if isinstance(raw, dict) and isinstance(raw.get("key"), str) and "spills/" in raw["key"]:
        assert f"spill {raw['key']}" in message


# -- claim order -----------------------------------------------------------------------


def test_a_pending_refs_claim_key_is_its_next_jobs_place_in_claim_order() -> None:
    ref = _pending(priority=3, next=(T0 + 50, 12))
    assert sp.claim_key(ref) == ready_key(3, T0 + 50, 12)
    assert sp.due_key(ref, T0 + 50) == ready_key(3, T0 + 50, 12)
    assert sp.due_key(ref, T0 + 49) is None  # not due yet
    assert sp.claim_key(_dead()) is None
    done = _pending(taken=10, next=None, due_min=None)
    assert done.exhausted and sp.claim_key(done) is None and sp.due_key(done, T0 * 2) is None


def test_refs_sorted_by_claim_key_are_in_claim_order() -> None:
    refs = [_pending(priority=0, next=(T0 + 5, 30)), _pending(priority=2, next=(T0 + 9, 40)),
            _pending(priority=0, next=(T0 + 5, 20)), _pending(priority=0, next=(T0 + 1, 50))]
    ordered = sorted(refs, key=lambda ref: sp.claim_key(ref) or 0)
    assert [(r.priority, r.next) for r in ordered] == [
        (2, (T0 + 9, 40)), (0, (T0 + 1, 50)), (0, (T0 + 5, 20)), (0, (T0 + 5, 30))]


# -- redrive by reference -------------------------------------------------------------


def test_a_dead_ref_redriven_is_a_pending_ref_to_the_same_object() -> None:
    dead = _dead()
    ref = sp.redriven(dead, T0 + 1000)
    assert (ref.key, ref.etag, ref.count, ref.seqs, ref.first) == (
        dead.key, dead.etag, dead.count, dead.seqs, dead.first)
    assert (ref.kind, ref.reset_ms, ref.taken, ref.priority, ref.next, ref.due_min) == (
        PENDING, T0 + 1000, 0, 1, (T0 + 1000, 11), T0 + 1000)
    raw = sp.ref_to_json(ref)
    assert raw["reset_at"] == timefmt.fmt(T0 + 1000) and raw["kind"] == "pending"
    assert sp.ref_from_json(raw, WHERE) == ref
    assert len(sp.ref_bytes(ref)) - len(sp.ref_bytes(dead)) < 150  # one small edit
    assert sp.due_key(ref, T0 + 1000) == ready_key(1, T0 + 1000, 11)


def test_a_redriven_objects_jobs_come_in_claim_order_from_one_cursor() -> None:
    jobs = [spilled(seq, attempts=3, priority=(seq * 7) % 5) for seq in range(1, 40)]
    [(obj, dead)] = written(DEAD, jobs)
    ref = sp.redriven(dead, T0 + 10**6)
    back = read_checked(ref, obj.data, ref.etag, STORE)
    keys = [ready_key(job.priority, job.run_at_ms, job.seq) for job in back]
    assert keys == sorted(keys) and len(back) == 39
    assert sp.claim_key(ref) == keys[0]
    assert all(job.attempts == 0 and job.run_at_ms == T0 + 10**6 for job in back)


def test_only_a_dead_ref_is_redriven_by_reference() -> None:
    with pytest.raises(ValueError, match=r"only a dead spill reference .* pending"):
        sp.redriven(_pending(), T0)
    with pytest.raises(ValueError, match="only a dead"):
        sp.redriven(sp.redriven(_dead(), T0), T0 + 1)


def test_a_redrive_keeps_the_jobs_taken_out() -> None:
    dead = sp.with_out(sp.with_out(_dead(), 0), 4)
    ref = sp.redriven(dead, T0)
    assert ref.out == ((0, 1), (4, 1))
    assert sp.live_count(dead) == sp.live_count(ref) == 8


# -- jobs taken out one by one ---------------------------------------------------------


def test_with_out_merges_runs_and_refuses_what_cannot_be_out() -> None:
    ref = _dead()
    for position in (3, 5, 4, 9):
        ref = sp.with_out(ref, position)
    assert ref.out == ((3, 3), (9, 1))
    assert [p for p in range(10) if sp.is_out(ref, p)] == [3, 4, 5, 9]
    with pytest.raises(ValueError, match="position 4 is already out"):
        sp.with_out(ref, 4)
    with pytest.raises(ValueError, match="position must be"):
        sp.with_out(ref, 10)
    with pytest.raises(ValueError, match="position must be an integer within \\[6, 9\\]"):
        sp.with_out(_pending(taken=6), 5)  # (already claimed: in the head)


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 60), data=st.data())
def test_out_runs_are_the_positions_taken_out(count: int, data: st.DataObject) -> None:
    positions = data.draw(st.lists(st.integers(0, count - 1), unique=True))
    ref = _dead(count=count, seqs=(10, 10 + count), first=(0, 10))
    for position in positions:
        ref = sp.with_out(ref, position)
    out = set(positions)
    assert {p for p in range(count) if sp.is_out(ref, p)} == out
    starts = [start for start, _ in ref.out]
    assert starts == sorted(starts) and all(  # apart: never two touching runs
        a + n < b for (a, n), (b, _) in pairwise(ref.out))
    lo = data.draw(st.integers(0, count))
    hi = data.draw(st.integers(lo, count))
    live = [p for start, n in sp.live_runs(ref, lo, hi) for p in range(start, start + n)]
    assert live == [p for p in range(lo, hi) if p not in out]
    assert sp.out_count(ref, lo, hi) == len([p for p in out if lo <= p < hi])
    assert sp.live_count(ref) == count - len(out)
    assert sp.ref_from_json(sp.ref_to_json(ref), WHERE) == ref
    taken = data.draw(st.integers(0, count))
    pending = sp.redriven(ref, T0)
    moved = replace(pending, taken=taken, next=None if taken == count else pending.next)
    assert sp.live_count(moved) == len([p for p in range(taken, count) if p not in out])
