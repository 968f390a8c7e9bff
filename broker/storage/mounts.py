"""Which mount a directory lives on, and whether the file store may run there.

The file store's compare-and-set rests on two things a local disk gives: an
atomic ``rename`` over an existing name, and ``flock`` locks that exclude
every other holder. FUSE mounts of object storage (Databricks ``/Volumes``,
``/dbfs`` and ``/Workspace``, s3fs, gcsfuse, blobfuse, mountpoint-s3) and network
filesystems (NFS, SMB/CIFS, 9p, ...) give neither reliably: a rename may be a
copy and a delete, and a lock may hold only on one machine or not at all.
Running the queue there loses or duplicates jobs, so :func:`check_store_dir`
refuses such a directory with :class:`~broker.errors.UnsafeStore`, naming the
object-store URL to use instead.

The mount is found from ``/proc/self/mountinfo``: the longest mount point
that is a prefix of the directory's resolved path (symbolic links followed),
and that mount's filesystem type. The path alone decides nothing: a
directory called ``/Volumes/x`` on a local disk is fine. Where there is no
mount table (not Linux) the check passes and only the store's start-up
self-test (:meth:`broker.storage.files.FileStore.self_test`) judges.

Escape hatch: ``trust_mount=<fstype>`` (``file:///dir?trust_mount=fuse.fuse-overlayfs``)
accepts one named filesystem type the operator knows to be a local disk
behind FUSE (a rootless container's ``fuse-overlayfs``, say). It logs a
warning every time a store opens on it, and the self-test still runs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from broker.errors import UnsafeStore

log = logging.getLogger("osqueue.storage")

MOUNTINFO = "/proc/self/mountinfo"

#: Network and cluster filesystems: rename and locks are the server's, and
#: caching clients see them late or not at all.
NETWORK_FSTYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "lustre",
    "gpfs", "beegfs", "davfs", "ncpfs", "coda", "orangefs", "pvfs2",
})
#: Object storage mounted by its own tool (when it does not say ``fuse.<name>``).
OBJECT_FSTYPES = frozenset({"s3fs", "gcsfuse", "blobfuse", "blobfuse2", "goofys"})

_CLOUD_URLS = ("s3://bucket/prefix, abfss://container@account.dfs.core.windows.net/prefix "
               "or gs://bucket/prefix")


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of the mount table: where, what filesystem type, from what source."""

    point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    r"""Undo mountinfo's octal escapes (``\040`` is a space, ``\134`` a backslash)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and all(c in "01234567" for c in field[i + 1:i + 4]) \
                and i + 4 <= len(field):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` text, in its order (later stacks on earlier).

    A line is ``id parent major:minor root point options [optional...] - fstype source
    superoptions``; lines that do not have that shape are skipped.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        try:
            dash = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < dash + 3:
            continue
        mounts.append(Mount(_unescape(fields[4]), fields[dash + 1], _unescape(fields[dash + 2])))
    return mounts


def read_mounts(path: str = MOUNTINFO) -> list[Mount] | None:
    """This process's mounts, or None where there is no mount table to read."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return parse_mountinfo(f.read())
    except OSError:
        return None


def mount_of(path: str | os.PathLike[str], mounts: Sequence[Mount]) -> Mount | None:
    """The mount holding absolute ``path``: the longest mount point that is ``path`` or
    one of its parents (of equal points, the last mounted, which hides the others)."""
    target = PurePosixPath(path)
    best: Mount | None = None
    for m in mounts:
        point = PurePosixPath(m.point)
        if (target == point or point in target.parents) and (
                best is None or len(point.parts) >= len(PurePosixPath(best.point).parts)):
            best = m
    return best


def unsafe_kind(fstype: str) -> str | None:
    """Why a filesystem type cannot hold the file store ("a FUSE mount", ...), or None."""
    if fstype in ("fuse", "fuseblk") or fstype.startswith("fuse."):
        return "a FUSE mount"
    if fstype in NETWORK_FSTYPES or fstype.startswith("nfs"):
        return "a network filesystem"
    if fstype in OBJECT_FSTYPES:
        return "an object-storage mount"
    return None


def _databricks(path: PurePosixPath) -> str | None:
    parts = path.parts
    if len(parts) > 1 and parts[1] == "Volumes":
        return "a Databricks Unity Catalog volume"
    if len(parts) > 1 and parts[1] == "dbfs":
        return "the Databricks DBFS mount"
    if len(parts) > 1 and parts[1] == "Workspace":
        return "the Databricks workspace files"
    return None


def check_store_dir(path: str | os.PathLike[str], *, mounts: Sequence[Mount] | None = None,
                    trust_mount: str | None = None) -> None:
    """Refuse a file-store directory on a mount without atomic rename and working locks.

    ``path``: the directory (need not exist yet); symbolic links in it are
    followed. ``mounts``: the mount table (default: :func:`read_mounts`; no
    table, no check). ``trust_mount``: one filesystem type to accept anyway,
    with a warning. Raises :class:`UnsafeStore` naming the mount, its type and
    the URL to use instead; touches nothing.
    """
    resolved = PurePosixPath(os.path.realpath(path))
    table = read_mounts() if mounts is None else mounts
    if not table:
        return
    mount = mount_of(resolved, table)
    if mount is None:
        return
    kind = unsafe_kind(mount.fstype)
    if kind is None:
        return
    if trust_mount is not None and trust_mount == mount.fstype:
        log.warning(
            "file store %s is on %s (%s at %s), which does not promise atomic rename or "
            "working locks; running there anyway because trust_mount=%s was given. Jobs "
            "may be lost or run twice if this is not a local disk.",
            resolved, kind, mount.fstype, mount.point, trust_mount)
        return
    where = _databricks(resolved) or _databricks(PurePosixPath(os.path.abspath(path)))
    label = kind if where is None else f"{where}, {kind}"
    if where is not None:
        instead = (f"use the cloud storage directly instead: {_CLOUD_URLS} (for a volume, "
                   "the bucket or container of its external location)")
    else:
        instead = (f"use the object store directly instead ({_CLOUD_URLS}), or a directory "
                   "on a local disk; if this mount is a local disk behind FUSE, "
                   f"file://{resolved}?trust_mount={mount.fstype} accepts it (loudly)")
    raise UnsafeStore(
        # The mount's source is left out: some (davfs URLs) carry credentials.
        f"file store {resolved} is on {label} ({mount.fstype} mounted at "
        f"{mount.point}), without atomic rename or working locks: the "
        f"queue would lose or duplicate jobs there; {instead}")
