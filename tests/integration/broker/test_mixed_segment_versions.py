"""A queue whose head references version-1 segment objects (the old format,
among them the golden object a broker of that version wrote) and version-2
ones, served end to end by a real broker process over a file
store: pages of jobs (answered from the stored objects, then by the owner),
claims in order across both formats, fails (each job's max_attempts and
created_at as its format holds them), redrives, completions; the archive
holds each job once with its fields, and the segment objects are deleted
once drained. The queue: :mod:`tests.support.mixed_segments`."""

from __future__ import annotations

import itertools
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from broker import paths, timefmt, wire
from broker.model.format import archive
from broker.storage import FileStore
from osqueue_spark import QueueClient
from osqueue_spark.bodies import ClaimedJob
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.inprocess import stored
from tests.support.mixed_segments import Mixed, Pending, write_mixed


def _pages(url: str, limit: int, status: str | None = None) -> Iterator[dict[str, Any]]:
    """Every job of queue ``q`` (of ``status``), following ``next_after`` over
    GET /v1/queues/q/jobs pages of ``limit``."""
    after = None
    while True:
        qs = urllib.parse.urlencode({k: v for k, v in (
            ("limit", limit), ("status", status), ("after", after)) if v is not None})
        with urllib.request.urlopen(f"{url}/v1/queues/q/jobs?{qs}", timeout=30) as answer:
            page = wire.loads(answer.read())  # (numbers exact)
        yield from page["jobs"]
        after = page["next_after"]
        if after is None:
            return


def _kept(row: dict[str, Any], job: Pending) -> None:
    """``row`` (a listing's, or an archive record) keeps what ``job``'s format
    said of it: seq, priority, max_attempts, creation time, payload."""
    assert (row["id"], row["seq"], row["priority"], row["max_attempts"],
            timefmt.parse(row["created_at"]), row["payload"]) == (
        job.id, job.seq, job.priority, job.max_attempts, job.created_ms,
        wire.loads(job.payload)), row


def _claim_each(client: QueueClient, n: int) -> list[ClaimedJob]:
    """``n`` jobs claimed one at a time (so their order is the claim order)."""
    got = []
    for _ in range(n):
        (job,) = client.claim("w", max_jobs=1, lease_s=3600)
        got.append(job)
    return got


def _segment_keys(files: FileStore) -> list[str]:
    return files.list(paths.segments_prefix("q"))


def test_a_queue_of_version_1_and_version_2_segments_lists_claims_fails_and_archives_each_job(
        tmp_path: Path) -> None:
    files = FileStore(tmp_path)
    mixed: Mixed = write_mixed(files, timefmt.now_ms())
    jobs = mixed.jobs
    assert len(_segment_keys(files)) == 5
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        # (a broker takes over a queue no broker serves)
        eventually(lambda: stored(files).broker is not None, what="the queue taken over")
        with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as standby:
            # pages served by the owner and read from the stored objects by the
            # other broker, of 4 (across segment and format boundaries) and whole
            for url, limit in itertools.product((broker.url, standby.url), (4, 1000)):
                rows = list(_pages(url, limit))
                assert [row["id"] for row in rows] == list(jobs)
                for row in rows:
                    job = jobs[row["id"]]
                    _kept(row, job)
                    assert (row["status"], row["attempts"],
                            timefmt.parse(row["run_at"])) == ("pending", 0, job.run_ms)
            for url, served in ((broker.url, True), (standby.url, False)):
                stats = QueueClient(url, "q").stats()
                assert (stats["served_by_this_broker"], stats["counts"]["pending"],
                        stats["total"]) == (served, 21, 21)

        # claims take the jobs in (priority, due time, seq) order across both formats
        first = _claim_each(client, len(jobs))
        assert [job.id for job in first] == mixed.claim_order()
        assert [job.payload for job in first] == [
            wire.loads(jobs[job.id].payload) for job in first]
        assert {job.attempt for job in first} == {1}
        assert client.stats()["served_by_this_broker"] is True
        # every segment drained: each ref that stays is exhausted and named by a
        # claim record (its jobs held there: the broker's held_in_records); those
        # moved in or held by none are dropped, then their objects deleted
        state = stored(files)
        assert all(r.taken == r.count and r.key in state.seg_names
                   for r in state.segment_refs), state.segment_refs
        eventually(lambda: sorted(_segment_keys(files)) == sorted(
            r.key for r in stored(files).segment_refs), what="the drained segments deleted")
        claimed = list(_pages(broker.url, 4, "claimed"))
        assert [row["id"] for row in claimed] == list(jobs)
        for row in claimed:
            _kept(row, jobs[row["id"]])

        # fails: each job's own max_attempts decides (A's v1 lines say 2, D's v2
        # header 1, C's golden v1 lines 5, B's v2 header 3, E's 4)
        token = {job.id: job.token for job in first}
        failed = ["j0000000001", "j0000000003", "j0000000006", "j0000001002",
                  "j0000001006", "j0000001010"]
        answers = client.fail_many([(token[i], "boom", 0.0) for i in failed])
        assert [(a.ok, a.status) for a in answers] == [
            (True, "pending")] * 4 + [(True, "dead"), (True, "pending")]
        again = _claim_each(client, 5)
        assert [job.id for job in again] == [  # priority, then (all due now) seq
            "j0000001002", "j0000000001", "j0000000003", "j0000000006", "j0000001010"]
        assert {job.attempt for job in again} == {2}
        token.update((job.id, job.token) for job in again)
        (last,) = client.fail_many([(token["j0000000001"], "boom again", 0.0)])
        assert (last.ok, last.status) == (True, "dead")
        dead = list(_pages(broker.url, 4, "dead"))
        assert [(row["id"], row["attempts"], row["last_error"]) for row in dead] == [
            ("j0000000001", 2, "boom again"), ("j0000001006", 1, "boom")]
        for row in dead:
            _kept(row, jobs[row["id"]])

        # complete every claimed job; redrive the dead, claim and complete them
        alive = [i for i in jobs if i not in ("j0000000001", "j0000001006")]
        done = client.complete_many([(token[i], {"done": i}) for i in alive])
        assert all(a.ok for a in done)
        assert client.redrive(["j0000000001", "j0000001006"]) == 2
        revived = _claim_each(client, 2)
        assert [job.id for job in revived] == ["j0000001006", "j0000000001"]
        assert all(a.ok for a in client.complete_many(
            [(job.token, {"done": job.id}) for job in revived]))
        assert client.claim("w", max_jobs=10) == []

        # the archive: each job once, as its format made it, with its attempts
        def archived() -> list[tuple[dict[str, Any], bytes]]:
            out = [(rec, payload) for key in archive.list_objects(files, "q")
                   for rec, payload, _ in archive.records_verbatim(files.get(key))]
            return out if len(out) >= len(jobs) else []

        records = eventually(archived, what="every job archived")
        assert sorted(rec["id"] for rec, _ in records) == list(jobs)
        attempts = {i: 1 for i in jobs} | {i: 2 for i in failed} | {
            "j0000000001": 1, "j0000001006": 1}  # (a redrive starts over)
        for rec, payload in records:
            job = jobs[rec["id"]]
            _kept(rec, job)
            assert payload == job.payload  # byte for byte
            assert (rec["status"], rec["attempts"], rec["result"], rec["worker"]) == (
                "completed", attempts[job.id], {"done": job.id}, "w")
            if job.id not in failed:
                assert timefmt.parse(rec["run_at"]) == job.run_ms
        eventually(lambda: client.stats()["total"] == 0, what="the archived jobs dropped")
        # no record names a segment any more: every ref dropped, every object deleted
        eventually(lambda: not stored(files).segment_refs and _segment_keys(files) == [],
                   what="the segments dropped and deleted")
        stats = client.stats()
        assert (stats["completed_total"], stats["failed_total"], stats["dead_total"]) == (
            21, 7, 2)
    assert _segment_keys(files) == [] and stored(files).segment_refs == []
    assert orjson.loads(files.get(paths.state_key("q")))["segments"] == []
