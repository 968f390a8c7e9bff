"""The runs of grouped objects: a segment's jobs by group, in memory.

A grouped segment (format 3, :mod:`broker.model.format.segment_format`) holds
its jobs group-major: each group's jobs are one run of consecutive positions,
in push order, and its header's directory lists the runs as ``(group or
None, count)`` in position order. In memory a directory is two ``array('I')``
(:class:`Directory`: 8 bytes a run, the names interned as gids by
:class:`~broker.model.groups.names.GroupNames`), and the group of a position
is a binary search (:func:`run_at`, :func:`group_at`), never a scan.

:func:`group_major` is the other side: the order a push by reference writes
a chunk's jobs in, and its directory.

Not yet used (claims do not yet take grouped jobs from segments): nothing
builds a grouped segment or loads a directory yet (the broker writes format 2
only); this is the pure part the push by reference and the directory loads
will use. Pure: values in, values out.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from broker.model.format.segment_format import MAX_SEGMENT_JOBS, Runs
from broker.model.groups.names import GroupNames


@dataclass(frozen=True, slots=True)
class Directory:
    """A grouped object's runs: run ``r`` holds positions ``starts[r]`` to
    ``starts[r + 1]`` (exclusive) and is group ``gids[r]`` (0: no group).
    ``starts`` has one entry more than ``gids``: the last is the job count.
    Made by :func:`directory_of`; never changed (the arrays are not to be
    written to)."""

    starts: array  # array('I'), len = runs + 1, ascending, starts[0] == 0
    gids: array  # array('I'), len = runs

    @property
    def count(self) -> int:
        """How many jobs (positions) the object holds."""
        return self.starts[-1]

    @property
    def runs(self) -> int:
        """How many runs (groups, with "no group" one of them) it has."""
        return len(self.gids)


def directory_of(runs: Iterable[tuple[str | None, int]], names: GroupNames) -> Directory:
    """The :class:`Directory` of a checked directory ``runs`` (from
    :func:`~broker.model.format.segment_format.read_header` or
    :func:`~broker.model.format.segment_format.read_directory`, or made by
    :func:`group_major`), its names interned in ``names``. O(runs)."""
    starts, gids = array("I", [0]), array("I")
    at = 0
    for name, n in runs:
        at += n
        starts.append(at)
        gids.append(names.gid(name))
    return Directory(starts, gids)


def run_at(d: Directory, pos: int) -> int:
    """The index of the run holding position ``pos``. O(log runs); ``IndexError``
    for a position outside ``[0, d.count)``."""
    if not 0 <= pos < d.starts[-1]:
        raise IndexError(f"position {pos} is outside [0, {d.starts[-1]})")
    return bisect_right(d.starts, pos) - 1


def group_at(d: Directory, pos: int) -> int:
    """The gid of the job at position ``pos`` (0: no group). O(log runs)."""
    return d.gids[run_at(d, pos)]


class GroupMajor(NamedTuple):
    """A chunk of a push in the order a grouped segment holds it (see :func:`group_major`)."""

    #: The payloads in position order (the list given, not a copy, when it
    #: was already group-major).
    payloads: Sequence[bytes]
    #: Position -> index in the request: ``range(n)`` when nothing moved, else
    #: an ``array('I')`` (the push's answer maps ids back to request order).
    order: Sequence[int]
    #: The directory for :func:`~broker.model.format.segment_format.encode_segment`,
    #: or None when no job has a group (the segment is written as version 2).
    runs: Runs | None


def group_major(payloads: Sequence[bytes], groups: Sequence[str | None]) -> GroupMajor:
    """The jobs of one segment (``payloads[i]`` in group ``groups[i]``, names
    checked, None for no group) in group-major order: each group's jobs
    together, in request order (stable), the groups in the order of their
    first job.

    A chunk whose groups are already contiguous (what the Spark writer stages:
    rows sorted by group, nulls first or last) is recognised in one pass and
    neither copied nor reordered. Otherwise one more pass over the jobs (a
    bucket per group; no comparison sort). ``ValueError`` for lengths that differ
    or more than :data:`~broker.model.format.segment_format.MAX_SEGMENT_JOBS` jobs.
    """
    n = len(payloads)
    if len(groups) != n:
        raise ValueError(f"{n} payloads but {len(groups)} groups")
    if n > MAX_SEGMENT_JOBS:
        raise ValueError(f"{n} jobs are more than a segment holds ({MAX_SEGMENT_JOBS})")
    runs: list[tuple[str | None, int]] = []
    ended: set[str | None] = set()
    current: str | None = None
    count = 0
    for group in groups:
        if count and group == current:
            count += 1
            continue
        if count:
            runs.append((current, count))
            ended.add(current)
        if group in ended:
            return _bucketed(payloads, groups)
        current, count = group, 1
    if count:
        runs.append((current, count))
    if not runs or runs == [(None, n)]:
        return GroupMajor(payloads, range(n), None)
    return GroupMajor(payloads, range(n), tuple(runs))


def _bucketed(payloads: Sequence[bytes], groups: Sequence[str | None]) -> GroupMajor:
    """:func:`group_major` of a chunk whose groups are not contiguous."""
    buckets: dict[str | None, array] = {}
    for i, group in enumerate(groups):
        bucket = buckets.get(group)
        if bucket is None:
            bucket = buckets[group] = array("I")
        bucket.append(i)
    order = array("I")
    for bucket in buckets.values():
        order.extend(bucket)
    runs = tuple((group, len(bucket)) for group, bucket in buckets.items())
    return GroupMajor([payloads[i] for i in order], order, runs)
