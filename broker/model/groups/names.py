"""Group names: the one check of a name, and names interned as small ints.

A job's group is a string of 1..:data:`~broker.limits.MAX_GROUP_CHARS`
characters (code points) without control characters (U+0000-U+001F, U+007F)
and without lone surrogates (which no UTF-8 object can hold); null or absent
is "no group". The rule is :func:`broker.fields.group` (the client's too);
:func:`check_group` applies it in the model (push bodies, staged lines, the
keys of the settings' maps; the decoder turns its refusal into ``CorruptState``).

:class:`GroupNames` maps names to small ints (gids) and back, in memory only:
gid 0 is "no group", ids of released names are reused, so the table is as
large as the groups the caller still references (up to twice that, once past
:data:`SWEEP_FLOOR`: :mod:`broker.model.groups.sweep`), not every group ever seen.

Pure: no I/O; imports the broker's errors and fields only.
"""

from __future__ import annotations

from typing import Any

from broker import fields
from broker.errors import InvalidRequest, OsqueueError

#: The gid of "no group" (a job without a group: its own group in the rotation).
NO_GROUP = 0
#: A table's first :attr:`GroupNames.cap` (:data:`broker.model.groups.sweep.FLOOR`).
SWEEP_FLOOR = 4096


def valid_group(raw: Any) -> bool:
    """Whether ``raw`` is a group name (a string, see the module's rule)."""
    try:
        fields.group("group", raw)
    except InvalidRequest:
        return False
    return True


def check_group(raw: Any, where: str,
                error: type[OsqueueError] = InvalidRequest) -> str | None:
    """``raw`` as a job's group: None for None (no group), the string itself
    for a valid name. Anything else raises ``error`` (``InvalidRequest``: 422
    ``invalid_request``), naming ``where`` (the field as the caller spells it,
    e.g. ``"jobs[3]"`` or ``"group_limits"``) and quoting the value only by its
    short prefix (:func:`broker.errors.shown`)."""
    return None if raw is None else fields.group(where, raw, error)


class GroupNames:
    """Group name <-> small int id (gid); gid 0 (:data:`NO_GROUP`) is "no group".

    Ids live in memory only (the head stores names). :meth:`release` frees an
    id when nothing the caller keeps refers to it any more (no pending, held
    or dead job of the group, no bucket, no dispatch record); the next new
    name takes the freed id. The caller of a queue's groups releases by mark
    and sweep (:func:`broker.model.groups.sweep.release_unused`), once the table
    has grown past :attr:`cap`: so the table holds at most about twice the
    names still referenced (and at least the floor), never every group ever seen.
    """

    __slots__ = ("_free", "_gids", "_names", "cap", "ids", "spelt")

    def __init__(self) -> None:
        self._gids: dict[str, int] = {}
        #: The names interned now -> their ids (read only: :meth:`find` without
        #: its call, where every settled job asks it: ``bench/groups_cpu_bench.py``).
        self.ids = self._gids
        self._names: list[str | None] = [None]  # gid -> name; None at 0 and at freed ids
        self._free: list[int] = []
        #: Names interned past which the owner sweeps the unreferenced ones
        #: (:func:`broker.model.groups.sweep.release_unused` sets it again after).
        self.cap = SWEEP_FLOOR
        #: A name as a job's line spells it (its JSON string) -> its gid, for the
        #: names met lately (None -> 0): read it; :meth:`gid_spelt` fills it. A
        #: grouped claim finds its new jobs' groups so (``bench/groups_cpu_bench.py``).
        self.spelt: dict[bytes | None, int] = {None: NO_GROUP}

    def gid_spelt(self, spelt: bytes, name: str) -> int:
        """:meth:`gid` of ``name``, which a line spells ``spelt``, kept in
        :attr:`spelt` (emptied past 16,384 spellings, and when an id is released)."""
        gid = self.gid(name)
        if len(self.spelt) >= 16_384:
            self.spelt.clear()
            self.spelt[None] = NO_GROUP
        self.spelt[spelt] = gid
        return gid

    def gid(self, name: str | None) -> int:
        """The id of ``name`` (a checked name, or None: 0), interning it if new."""
        if name is None:
            return NO_GROUP
        gid = self._gids.get(name)
        if gid is None:
            if self._free:
                gid = self._free.pop()
                self._names[gid] = name
            else:
                gid = len(self._names)
                self._names.append(name)
            self._gids[name] = gid
        return gid

    def find(self, name: str | None) -> int | None:
        """The id of ``name`` if it is interned (0 for None), else None; interns nothing."""
        return NO_GROUP if name is None else self._gids.get(name)

    def name(self, gid: int) -> str | None:
        """The name of ``gid`` (None for 0); ``KeyError`` for an id not in use."""
        if gid == NO_GROUP:
            return None
        name = self._names[gid] if 0 < gid < len(self._names) else None
        if name is None:
            raise KeyError(f"group id {gid} is not in use")
        return name

    def release(self, gid: int) -> None:
        """Free ``gid`` for reuse (0 is never freed: a no-op). ``KeyError`` for
        an id not in use (released twice: the caller's count is wrong)."""
        self.release_all([gid])

    def release_all(self, gids: list[int]) -> None:
        """:meth:`release` of each of ``gids`` (distinct; 0 skipped), with :attr:`spelt`
        emptied once, not once an id. ``KeyError`` for an id not in use (the ids
        before it are released)."""
        spelt = self.spelt
        try:
            for gid in gids:
                if gid == NO_GROUP:
                    continue
                name = self.name(gid)
                assert name is not None  # (gid is not 0)
                del self._gids[name]
                self._names[gid] = None
                self._free.append(gid)
        finally:
            spelt.clear()  # (a spelling of a released name would find its id, reused)
            spelt[None] = NO_GROUP

    def __len__(self) -> int:
        """Names interned now (gid 0 not counted)."""
        return len(self._gids)

    def __contains__(self, name: object) -> bool:
        return name in self._gids
