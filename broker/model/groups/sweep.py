"""Releasing the group names nothing refers to any more: mark and sweep.

A queue's :class:`~broker.model.groups.counts.GroupState` interns every group
it meets as a gid (:class:`~broker.model.groups.names.GroupNames`) and lives
in the broker's memory between commits until a takeover or a settings change.
A queue grouped by customer, API key or run id meets new groups for as long as
it runs: without releasing, the names table (and its ``spelt`` cache) grows
with every group ever seen.

**When a gid is referenced.** Each owner of per-group pieces says which gids
it holds: dispatch (a record: a head, held or dead jobs; and the ready and
parked sets), the token buckets (a bucket short of full: a full one equals
none, and :meth:`~broker.model.groups.buckets.GroupBuckets.sweep` drops it),
the group heaps (a heap with an entry, stale or not), the fifo ``dead``
counts (``group_dead: "hold"``), the groups a bulk push filled not yet told
to dispatch (``untold``) and the directories of the grouped segments still
referenced by the head (a run's gid is read again for as long as its segment
is: by a cancel taking a position out, by stats, by a due segment's group 0
runs). A gid none of them holds has no job, count, pass, bucket or run left:
the next group to take it starts as a newcomer would, so its reuse can make
no group's jobs, held count, pass, dead count, bucket or run count another's.

**Why a sweep, not a count.** The claim's fast paths (dispatch's inlined
state changes, the heaps' bulk takes: ``bench/groups_model_bench.py``) drop
records and heaps in a dozen places; a reference count told by each would
cost every grouped job a call and be one forgotten place away from a reused
gid still referenced. Marking asks each owner once, at a point where no call
holds a gid in a local (the start of a claim), and only when the table has
grown past its :attr:`~broker.model.groups.names.GroupNames.cap` (then set to
twice the names kept, at least :data:`FLOOR`): amortized O(1) per name
interned, nothing on the happy path but one comparison a claim. Unlike a
rebuild of the groups (a takeover's), it keeps every pass: fairness and
turns run on as if nothing happened.

Directories of segments the head no longer references are dropped here too
(nothing reads them again; the next claim would register a segment that came
back from its directory, as it stands).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection

from broker.model.groups.counts import GroupState
from broker.model.groups.names import NO_GROUP, SWEEP_FLOOR

#: The fewest names a table holds before a sweep (its first
#: :attr:`~broker.model.groups.names.GroupNames.cap`).
FLOOR = SWEEP_FLOOR


def referenced(groups: GroupState) -> set[int]:
    """The gids ``groups`` refers to (see the module's docstring); O(those
    references, the directories' runs included)."""
    used = groups.dispatch.in_use()
    used.update(gid for gid, heap in groups.heaps.items() if heap)
    used.update(groups.dead)
    used.update(groups.untold)
    for d in groups.dirs.values():
        used.update(d.gids)
    used.add(NO_GROUP)
    return used


def release_unused(groups: GroupState, live_dirs: Collection[tuple[str, str]],
                   floor: int = FLOOR) -> int:
    """Release every gid of ``groups.names`` that ``groups`` no longer refers to,
    after dropping the directories of segments not in ``live_dirs`` (the head's
    grouped refs, as ``(key, etag)``) and empty heaps; set the table's next
    :attr:`~broker.model.groups.names.GroupNames.cap` to ``max(floor, 2 *
    names kept)``. How many were released. Call it only where no caller holds a
    gid it has not stored in ``groups`` (e.g. at the start of a claim)."""
    for key in [key for key in groups.dirs if key not in live_dirs]:
        del groups.dirs[key]
        groups.early.discard(key)
    heaps = groups.heaps
    for gid in [gid for gid, heap in heaps.items() if not heap and gid != NO_GROUP
                and gid not in groups.untold]:
        del heaps[gid]  # (an empty heap is as no heap: every reader asks .get() and its truth)
    names = groups.names
    used = referenced(groups)
    free = [gid for gid in names.ids.values() if gid not in used]
    names.release_all(free)
    names.cap = max(floor, 2 * len(names))
    return len(free)


__all__ = ["FLOOR", "referenced", "release_unused"]
