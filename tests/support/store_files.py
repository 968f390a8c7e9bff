"""The objects of a store as its users see them, for "changes nothing" checks.

The file store keeps each object's versions as hidden files (``.name.v-<etag>``,
:mod:`broker.storage.files`) and removes old ones some time after a write, so a
byte-identical check that read them would flake on that cleanup: they are skipped.
"""

from __future__ import annotations

from pathlib import Path

from broker.storage import FileStore, ObjectStore


def snapshot(store: ObjectStore) -> dict[str, tuple[str, bytes]]:
    """Every object of ``store``: key -> (etag, bytes). Equal before and after a
    refused request means nothing was written, not even the same bytes again."""
    out = {}
    for key in store.list(""):
        got = store.read(key)
        out[key] = (got.etag, bytes(got.data))
    return out


def snapshot_dir(root: Path) -> dict[str, tuple[str, bytes]]:
    """:func:`snapshot` of the file store at ``root`` (a broker process's store)."""
    return snapshot(FileStore(str(root)))


def store_files(root: Path) -> dict[str, bytes]:
    """Every object under ``root`` (a file store's directory): relative path -> bytes,
    hidden files and directories (the store's own) left out."""
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out[str(rel)] = p.read_bytes()
    return out
