"""Stores as a chaos run leaves them, to test the runner's checker
(:func:`tools.chaos.checker.check_store`) on copies broken on purpose.

:func:`chaos_store` drives a real broker (the embedded one, over HTTP, on a file
store) as the runner's clients do and tells a recorder (the runner's own
:class:`tools.chaos.clients.Recorder`, given by the test: nothing here imports the
tools) what they were told: producer 0 pushes
``{"p": 0, "n": i}``, worker ``w0`` claims the jobs one at a time and completes
each with the result ``{"by": "w0", "token": token}``. The broker stops at the end
(its archive objects written). What a test then breaks, it breaks with the
broker's own encodings (archive lines, segment objects) or with bytes the broker
wrote earlier (a queue object rolled back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from broker import paths
from broker.model.format import archive, segment_format
from broker.storage import ObjectStore, store_from_url
from osqueue_spark import QueueClient, start_broker

#: the queue every chaos run uses (tools.chaos.store.QUEUE)
QUEUE = "chaos"


class Recorder(Protocol):
    """What :func:`chaos_store` tells (the methods of the runner's Recorder it calls)."""

    clock: Callable[[], float]

    def pushed(self, keys_: list[str], ids: list[str], started: float) -> None: ...

    def claimed(self, jobs: list[Any], worker: str, started: float, lease_s: float) -> None: ...

    def completed(self, items: list[tuple[str, str]], results: list[Any], worker: str,
                  started: float, late: bool = False) -> None: ...


@dataclass
class ChaosStore:
    """A store after a healthy run and what the clients were told.

    ``ids``: the acknowledged ids in push order (payload ``0:n`` is ``ids[n]``);
    ``tokens``: job id -> the token its complete was answered ok for;
    ``heads``: job id -> the queue object's bytes right after that job was claimed
    (before its complete); ``url``: the store's URL."""

    store: ObjectStore
    rec: Recorder
    url: str
    ids: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    heads: dict[str, bytes] = field(default_factory=dict)

    # -- breaking it -------------------------------------------------------------------
    def archive_keys(self) -> list[str]:
        return archive.list_objects(self.store, QUEUE)

    def archived(self, job_id: str) -> tuple[str, list[dict[str, Any]]]:
        """The archive object holding ``job_id`` and all its records."""
        for key in self.archive_keys():
            records = archive.decode_records(self.store.get(key))
            if any(r["id"] == job_id for r in records):
                return key, records
        raise AssertionError(f"{job_id} is in no archive object")

    def rewrite_archive(self, key: str, records: list[dict[str, Any]]) -> None:
        """Replace the archive object ``key`` with ``records`` (the broker's encoding)."""
        self.store.put(key, archive.encode_records(records))

    def roll_back_head(self, data: bytes) -> None:
        """Write ``data`` (bytes the broker wrote earlier) over the queue object."""
        key = paths.state_key(QUEUE)
        self.store.write_if_match(key, data, self.store.read(key).etag)

    def push_unrecorded(self, payload: Any) -> str:
        """A job the store holds and no producer pushed (its broker started and stopped
        again); its id."""
        with start_broker(self.url, port=0) as broker:
            client = QueueClient(broker.url, QUEUE, timeout_s=10, retry_s=10)
            try:
                [job_id] = client.push_many([{"payload": payload}])
            finally:
                client.close()
        return job_id

    def drop_from_head(self, job_id: str) -> None:
        """Delete ``job_id``'s line from the queue object (nothing else changes)."""
        key = paths.state_key(QUEUE)
        got = self.store.read(key)
        raw = orjson.loads(got.data)
        kept = [j for j in raw["jobs"] if j.get("id") != job_id]
        assert len(kept) == len(raw["jobs"]) - 1, f"{job_id} is not in the queue object"
        self.store.write_if_match(key, orjson.dumps({**raw, "jobs": kept}), got.etag)

    def die(self, n: int) -> str:
        """A job of payload ``{"p": 0, "n": n}`` that died: pushed to the queue set to
        ``max_attempts`` 1, claimed by ``w0`` and failed (the recorder hears the push
        and the claim, as the runner's clients tell it; the death is the test's to
        record); its id."""
        with start_broker(self.url, port=0) as broker:
            client = QueueClient(broker.url, QUEUE, timeout_s=10, retry_s=10)
            try:
                client.create(max_attempts=1)
                started = self.rec.clock()
                [job_id] = client.push_many([{"payload": {"p": 0, "n": n}}])
                self.rec.pushed([f"0:{n}"], [job_id], started)
                [job] = client.claim("w0", max_jobs=1, lease_s=60)
                self.rec.claimed([job], "w0", started, 60)
                [answer] = client.fail_many([(job.token, "chaos: doomed", 0.0)])
                assert answer.ok and answer.status == "dead", answer
            finally:
                client.close()
        return job_id

    def redrive_and_complete(self, job_id: str) -> str:
        """Redrive the dead ``job_id`` by id, claim it and complete it as ``w0`` does
        (the recorder hears the claim and the complete); its token."""
        with start_broker(self.url, port=0) as broker:
            client = QueueClient(broker.url, QUEUE, timeout_s=10, retry_s=10)
            try:
                assert client.redrive([job_id]) == 1
                started = self.rec.clock()
                [job] = client.claim("w0", max_jobs=1, lease_s=60)
                assert job.id == job_id, job
                self.rec.claimed([job], "w0", started, 60)
                [answer] = client.complete_many([(job.token, {"by": "w0", "token": job.token})])
                assert answer.ok, answer
                self.rec.completed([(job.token, job.id)], [answer], "w0", started)
            finally:
                client.close()
        self.tokens[job_id] = job.token
        return job.token

    def leave_spill(self) -> str:
        """An object under the queue's spills prefix (a spill object's name, one job
        line) that the queue object does not reference; its key."""
        key = paths.spill_key(QUEUE, paths.spill_name("dead", 9_000, "0badc0de"))
        self.store.create_if_absent(key, b'{"id":"j0000009000","payload":{"p":0,"n":9000}}\n')
        return key

    def leave_segment(self) -> str:
        """A segment object (the broker's format) that the queue object does not
        reference, as a push whose commit never landed leaves one; its key."""
        key = paths.segment_key(QUEUE, paths.segment_name(9_000, "0badc0de"))
        self.store.create_if_absent(key, segment_format.encode_segment(
            QUEUE, 9_000, 0, 1_000, [b'{"p":0,"n":9000}'], max_attempts=3))
        return key


def chaos_store(root: Path, rec: Recorder, jobs: int = 4) -> ChaosStore:
    """A file store under ``root`` after ``jobs`` jobs were pushed, claimed and
    completed through a real broker; ``rec`` is told what its clients were told."""
    url = f"file://{root}"
    out = ChaosStore(store_from_url(url), rec, url)
    with start_broker(url, port=0) as broker:
        client = QueueClient(broker.url, QUEUE, timeout_s=10, retry_s=10)
        try:
            keys = [f"0:{n}" for n in range(jobs)]
            started = rec.clock()
            out.ids = client.push_many([{"payload": {"p": 0, "n": n}} for n in range(jobs)])
            rec.pushed(keys, list(out.ids), started)
            for _ in range(jobs):
                started = rec.clock()
                [job] = client.claim("w0", max_jobs=1, lease_s=60)
                rec.claimed([job], "w0", started, 60)
                out.heads[job.id] = out.store.read(paths.state_key(QUEUE)).data
                started = rec.clock()
                [answer] = client.complete_many([(job.token, {"by": "w0", "token": job.token})])
                assert answer.ok, answer
                rec.completed([(job.token, job.id)], [answer], "w0", started)
                out.tokens[job.id] = job.token
        finally:
            client.close()
    return out
