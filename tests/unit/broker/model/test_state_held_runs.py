"""broker.model.state.HeldRuns and SegmentWindows.put_directory: a grouped
segment's directory held compactly (names interned across segments, counts
in an array), iterating as the runs it was made of, in a fraction of the
memory of a tuple a run."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

from broker.model.groups.directories import directory_of
from broker.model.groups.names import GroupNames
from broker.model.state import HeldRuns, SegmentRef, SegmentWindows


def runs_of(n: int) -> tuple[tuple[str | None, int], ...]:
    # (names built at run time, as a parsed header's are: distinct objects per segment)
    return tuple((None if i == n - 1 else "".join(["g", str(i)]), 1 + i % 7) for i in range(n))


def _allocated(snapshot: tracemalloc.Snapshot, *where: str) -> int:
    """Bytes live in ``snapshot`` that were allocated in files under ``where``
    (paths, or a top-level package's name)."""
    paths = [str(Path(w).resolve()) if w.endswith(".py") else
             str(Path(__file__).resolve().parents[4] / w) for w in where]
    return sum(stat.size for stat in snapshot.statistics("filename")
               if any(stat.traceback[0].filename.startswith(p) for p in paths))


def test_held_runs_iterate_as_the_runs_and_make_the_same_directory() -> None:
    runs = runs_of(100)
    held = HeldRuns.of(runs)
    assert tuple(held) == runs and len(held) == 100
    a, b = directory_of(runs, GroupNames()), directory_of(held, GroupNames())
    assert (list(a.starts), list(a.gids)) == (list(b.starts), list(b.gids))


def test_directories_of_segments_share_their_names_and_take_a_fraction_of_the_memory() -> None:
    windows = SegmentWindows()  # (8 segments of 10,000 runs; the more, the smaller the share)
    refs = [SegmentRef(f"q/segments/seg-{i:010d}-0123abcd.jsonl", f'"e{i}"', 1 + i * 10_000,
                       10_000, 0, 0, groups=10_000) for i in range(8)]
    # (only what this test's lines and the broker's allocate is counted: the traces of
    # other threads a process of the suite may still run are not this test's)
    # (and as differences: tracing may have begun before this test, with what an
    # earlier test left behind still live)
    # (the names interned before: interning 10,000 new names may grow the
    # interpreter's table of interned strings, by how much depends on what the
    # process interned before; that table is not the directories')
    names = [sys.intern(name) for name, _ in runs_of(10_000) if name is not None]
    tracemalloc.start()
    try:
        start = tracemalloc.take_snapshot()
        plain = [runs_of(10_000) for _ in refs]
        as_tuples = _allocated(tracemalloc.take_snapshot(), __file__) \
            - _allocated(start, __file__)
        for ref, runs in zip(refs, plain, strict=True):
            windows.put_directory(ref, runs)
        del plain, runs
        held = _allocated(tracemalloc.take_snapshot(), __file__, "broker") \
            - _allocated(start, __file__, "broker")
    finally:
        tracemalloc.stop()
    first, second = (windows.runs[(r.key, r.etag)] for r in refs[:2])
    assert isinstance(first, HeldRuns) and isinstance(second, HeldRuns)
    assert all(x is y for x, y in zip(first.names, second.names, strict=True))  # (interned)
    # (held: a tuple of names and an array a segment, the names shared)
    assert 0 < held < as_tuples / 3, (held, as_tuples)
    assert len(names) == 9_999
