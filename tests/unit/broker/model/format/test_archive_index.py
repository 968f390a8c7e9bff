"""The archive's index and job ranges (broker.model.format.archive: index_keys,
seq_range, find_job, list_objects): a lookup by id lists the hours of its
job's block and reads only the objects whose range holds it; objects named
before ranges existed are still found (and a commit written under both names
is listed once)."""

from __future__ import annotations

from pathlib import Path

from broker import paths
from broker.model import transitions as T
from broker.model.format import archive, codec
from broker.model.job import Job
from broker.model.ops import Claim, Complete, CompleteItem, Push, Reserve
from broker.model.ops import NewJob as N
from broker.service.archiver import write_commit
from broker.storage import FileStore
from tests.support.faults import FaultyStore
from tests.support.states import new_queue

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR = 3_600_000


def _finished(hours: int) -> tuple[list[list[Job]], list[int], list[int]]:
    """Commits of finished jobs, one an hour for ``hours`` hours in each of two
    seq blocks (0 and 1): the jobs of each commit, and the seqs of each block."""
    state = new_queue(T0)
    low = list(T.apply(state, Push(tuple(N(b'{"low":%d}' % i) for i in range(hours))), T0).ids)
    T.apply(state, Reserve(70_000, 10), T0)
    high = list(T.apply(state, Push(tuple(N(b'{"high":%d}' % i) for i in range(hours))),
                        T0).ids)
    claimed = {j.id: j.token for j in T.apply(state, Claim("w", 2 * hours, 10 * HOUR), T0).jobs}
    commits = []
    for h in range(hours):
        for i, job_id in enumerate((low[h], high[h])):
            now = T0 + h * HOUR + i
            T.apply(state, Complete((CompleteItem(claimed[job_id], b'"ok"'),)), now)
            codec.stamp(state, "b-1", now, f"c-{h:04d}{i}")
            commits.append([state.jobs[s] for s in state.completed[state.seq]])
    seq = [int(i[1:]) for i in low], [int(i[1:]) for i in high]
    return commits, *seq


def _counted(root: Path) -> tuple[FaultyStore, list[str], list[str]]:
    store = FaultyStore(FileStore(root))
    lists: list[str] = []
    gets: list[str] = []
    store.inject("list", None, times=None, before=lists.append)
    store.inject("get", None, times=None, before=gets.append)
    return store, lists, gets


def test_a_lookup_reads_only_the_objects_whose_range_holds_its_job(tmp_path: Path) -> None:
    """Six hours of archive in two seq blocks: finding a job of block 1 finished
    in the fourth hour lists block 1's hours up to the fourth and reads one
    object; today's main has no index and no ranges to narrow by."""
    commits, low, high = _finished(6)
    for jobs in commits:
        write_commit(FileStore(tmp_path), "q", jobs)
    store, lists, gets = _counted(tmp_path)
    found = archive.find_job(store, "q", high[3])
    assert found is not None and found.record["id"] == f"j{high[3]:010d}"
    assert found.payload == b'{"high":3}' and found.result == b'"ok"'
    assert gets == [found.key]
    hours = [paths.archive_hour(T0 + h * HOUR) for h in range(4)]
    assert lists == [paths.archive_block_prefix("q", 1)] + [
        f"{paths.archive_prefix('q')}{hour}/" for hour in hours]
    assert archive.seq_range(found.key) == (high[3], high[3])
    # block 0's index names its own hours; a job it never finished is found in none
    assert archive.find_job(store, "q", low[5]) is not None
    assert archive.find_job(store, "q", high[-1] + 1) is None  # (no start marker: legacy
    assert all(archive.seq_range(k) is not None for k in gets)  # searched: none unranged)


def test_index_entries_name_each_block_and_hour_once(tmp_path: Path) -> None:
    commits, _, _ = _finished(3)
    store = FileStore(tmp_path)
    for jobs in commits:
        write_commit(store, "q", jobs)
    entries = store.list(paths.archive_index_prefix("q"))
    assert entries == sorted(
        paths.archive_block_key("q", block, paths.archive_hour(T0 + h * HOUR))
        for block in (0, 1) for h in range(3))
    assert all(store.get(key) == b"" for key in entries)


def test_objects_named_before_ranges_are_found_as_the_start_marker_says(tmp_path: Path) -> None:
    """An object named ``{commit_seq}-{commit}.jsonl`` (no range, no index entry):
    found with no start marker (an archive of older brokers only) or a
    ``-legacy`` one of any hour; not looked for after a ``-clean`` one."""
    commits, low, _ = _finished(2)
    store = FileStore(tmp_path)
    key, data = archive.commit_object("q", commits[0])
    old = key.rsplit("-j", 2)[0] + ".jsonl"
    store.put(old, data)
    assert archive.seq_range(old) is None
    found = archive.find_job(store, "q", low[0])
    assert found is not None and found.key == old
    start = paths.archive_start_prefix("q")
    store.put(f"{start}{paths.archive_hour(T0)}-clean", b"")
    assert archive.find_job(store, "q", low[0]) is None
    store.delete(f"{start}{paths.archive_hour(T0)}-clean")
    store.put(f"{start}{paths.archive_hour(T0 - HOUR)}-legacy", b"")
    found = archive.find_job(store, "q", low[0])  # (after the marker's hour: an older
    assert found is not None and found.key == old  # broker's later object, still found)
    store.put(f"{start}{paths.archive_hour(T0)}-legacy", b"")
    found = archive.find_job(store, "q", low[0])
    assert found is not None and found.key == old


def test_a_commit_under_its_old_and_new_names_is_listed_once(tmp_path: Path) -> None:
    """A broker from before ranges wrote the object, one of this version wrote it
    again after a takeover: the same jobs, listed (and read by Spark) once."""
    commits, _, _ = _finished(2)
    store = FileStore(tmp_path)
    for jobs in commits:
        write_commit(store, "q", jobs)
    key, data = archive.commit_object("q", commits[0])
    store.put(key.rsplit("-j", 2)[0] + ".jsonl", data)
    assert len(store.list(paths.archive_prefix("q"))) == 5
    listed = archive.list_objects(store, "q")
    assert len(listed) == 4 and key in listed
    ids = [rec["id"] for rec in archive.read_all(store, "q")]
    assert len(ids) == len(set(ids)) == 4


def test_osqueue_0_1_objects_give_the_latest_completion(tmp_path: Path) -> None:
    """Two completions of one job under osqueue 0.1's names (``{seq}-{writer}``,
    written before their commit; the earlier an orphan): the later one."""
    commits, low, _ = _finished(1)
    store = FileStore(tmp_path)
    _, data = archive.commit_object("q", commits[0])
    hour = paths.archive_hour(T0)
    later = data.replace(b'"completed_at":"2026-01-01T00:00:00.000Z"',
                         b'"completed_at":"2026-01-01T00:30:00.000Z"')
    assert later != data
    store.put(f"{paths.archive_prefix('q')}{hour}/000000000007-b-2.jsonl", later)
    store.put(f"{paths.archive_prefix('q')}{hour}/000000000003-b-1.jsonl", data)
    found = archive.find_job(store, "q", low[0])
    assert found is not None and found.record["completed_at"] == "2026-01-01T00:30:00.000Z"
