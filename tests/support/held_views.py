"""What the stored-view tests of claims held in records (the broker's default
``held_in_records``) check of a file store an owner process writes: which
records name a segment, that a segment object goes only after the landed
commit that dropped its last reference, and that each job is archived once."""

from __future__ import annotations

from collections import Counter

from broker import paths
from broker.storage import FileStore
from tests.support.broker_process import eventually
from tests.support.inprocess import archive_lines, stored


def naming(files: FileStore, key: str, queue: str = "q") -> list[int]:
    """The fences of the claim records of ``queue``'s stored head with jobs held
    at a part of segment ``key``."""
    records = stored(files, queue).claim_records
    return [fence for fence, record in records.items()
            if any(span[2] == key for span in record.segs or ())]


def present(files: FileStore, key: str, queue: str = "q") -> bool:
    """Whether the object of segment ``key`` is in the store."""
    return key in files.list(paths.segments_prefix(queue))


def await_deleted(files: FileStore, key: str, queue: str = "q", timeout_s: float = 30.0) -> None:
    """Wait until segment ``key``'s object is gone, and check it went only after
    its reference left the stored head: the head is read after the listing that
    lacks the object, so a head that still references it (or a record that
    still names it) means the object was deleted before the commit dropping it
    had landed. Fails after ``timeout_s``."""

    def gone() -> bool:
        if present(files, key, queue):
            return False
        head = stored(files, queue)
        assert key not in {ref.key for ref in head.segment_refs}, \
            f"segment {key} deleted while the stored head references it"
        assert not naming(files, key, queue), f"segment {key} deleted while a record names it"
        return True

    eventually(gone, timeout_s, what=f"the owner deleting {key}")


def await_archived_once(files: FileStore, ids: list[str], queue: str = "q",
                        timeout_s: float = 30.0) -> list[dict]:  # type: ignore[type-arg]
    """Wait until every job ``ids`` names has an archive line, then check each
    has exactly one (every line of every archive object, none de-duplicated)
    and that the archive holds no other job. The lines."""

    def lines() -> list[dict] | None:  # type: ignore[type-arg]
        got = archive_lines(files, queue)
        return got if {line["id"] for line in got} >= set(ids) else None

    got = eventually(lines, timeout_s, what="every settled job archived")
    counts = Counter(line["id"] for line in got)
    assert sorted(counts) == sorted(ids), "the archive holds jobs never settled"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:5]
    return got
