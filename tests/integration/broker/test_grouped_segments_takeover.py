"""Grouped segments (``--grouped-segments``) through real broker processes over
HTTP: a bulk push of grouped jobs goes into a grouped segment object (format
3); claims under ``group_limit`` drain it half-way; the owner is killed with
``SIGKILL`` and the second broker takes the queue over, rebuilding the held
counts from the claim records and the runs from ``taken_at``: the limit holds,
``taken_at`` is the one the old owner landed, and the survivor drains the
rest; every job is claimed and completed once, and the store ends with no
segment object."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from broker import paths
from broker.model.format.decode import decode_state
from broker.model.groups.counts import held_by_group
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually

LEASE_S = 2.0
GROUPS = 7
LIMIT = 2


def _head(root: Path):  # type: ignore[no-untyped-def]
    return decode_state(FileStore(root).read(paths.state_key("q")).data)


def _group(job) -> str:  # type: ignore[no-untyped-def]
    return job.group


def test_grouped_segments_half_drained_survive_a_kill_and_takeover(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    args = ("--lease-s", str(LEASE_S), "--segment-push-jobs", "50", "--grouped-segments")
    first = BrokerProcess(store, *args).start()
    second = BrokerProcess(store, *args).start()
    try:
        client = QueueClient([first.url, second.url], "q", retry_s=60)
        client.create(group_limit=LIMIT)
        ids = client.push_many([{"payload": {"n": i}, "group": f"g{i % GROUPS}"}
                                for i in range(140)])
        [ref] = _head(tmp_path).segment_refs
        assert ref.groups == GROUPS and not _head(tmp_path).jobs  # (all in the segment)
        done: list[str] = []
        while len(done) < 70:
            jobs = client.claim("w", 10, lease_s=300)
            assert max(Counter(map(_group, jobs)).values()) <= LIMIT
            for job in jobs:
                assert client.complete(job.token).ok
            done += [job.id for job in jobs]
        held = client.claim("w", 100, lease_s=300)
        assert Counter(map(_group, held)) == {f"g{g}": LIMIT for g in range(GROUPS)}
        landed = _head(tmp_path)
        [before] = landed.segment_refs
        assert before.taken == 70 + len(held) and len(before.taken_at) >= 2

        owner = landed.broker.url
        (first if first.url == owner else second).stop(signal.SIGKILL)
        survivor = second if first.url == owner else first

        def taken_over() -> bool:
            client.stats()  # (a call: the survivor takes the queue over once its lease ran out)
            record = _head(tmp_path).broker
            return record is not None and record.url == survivor.url

        eventually(taken_over, 60, "the takeover")
        head = _head(tmp_path)
        assert head.segment_refs[0].taken_at == before.taken_at  # (exact: nothing lost)
        assert held_by_group(head.claim_records.values(), head.jobs) == {
            f"g{g}": LIMIT for g in range(GROUPS)}
        assert client.claim("w", 100, lease_s=300) == []  # counts rebuilt: all at the limit

        for job in held:  # tokens from before the takeover
            assert client.complete(job.token).ok
        done += [job.id for job in held]
        while jobs := client.claim("w", 16, lease_s=300):
            assert max(Counter(map(_group, jobs)).values()) <= LIMIT
            for job in jobs:
                assert client.complete(job.token).ok
            done += [job.id for job in jobs]
        assert len(done) == len(set(done)) == len(ids) and set(done) == set(ids)

        def deleted() -> bool:
            return FileStore(tmp_path).list(paths.segments_prefix("q")) == []

        eventually(deleted, 30, "the drained segment's deletion")
        assert _head(tmp_path).segment_refs == []
    finally:
        for proc in (first, second):
            proc.stop(signal.SIGKILL)
