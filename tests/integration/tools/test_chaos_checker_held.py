"""The chaos runner's store check (tools/chaos/checker.py) on claims held in claim
records (``held_in_records``): jobs a record holds at a segment part, and those
completed in its done entries awaiting their archive object, have no line of the
head; the check reads them from their segment, so none is lost or duplicated,
and dropping the record from the head loses exactly its held jobs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from broker import paths
from broker.storage import store_from_url
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tools.chaos.checker import FAILURES, check_store
from tools.chaos.clients import Recorder
from tools.chaos.store import QUEUE


def failures(check: dict[str, Any]) -> dict[str, int]:
    return {name: check[name] for name in FAILURES if check[name]}


def test_held_and_done_segment_jobs_are_neither_lost_nor_duplicated(tmp_path: Path) -> None:
    t0 = time.monotonic()
    rec = Recorder(lambda: time.monotonic() - t0)
    url = f"file://{tmp_path}"
    store = store_from_url(url)
    with BrokerProcess(url, "--segment-push-jobs", "10", "--lease-s", "3600",
                       env={"OSQUEUE_HELD_IN_RECORDS": "true"}) as broker:
        client = QueueClient(broker.url, QUEUE, timeout_s=10, retry_s=10)
        keys = [f"0:{n}" for n in range(12)]
        started = rec.clock()
        ids = client.push_many([{"payload": {"p": 0, "n": n}} for n in range(12)])
        rec.pushed(keys, list(ids), started)
        started = rec.clock()
        jobs = client.claim("w0", max_jobs=8, lease_s=3600)
        rec.claimed(jobs, "w0", started, 3600)
        started = rec.clock()
        done = [(j.token, {"by": "w0", "token": j.token}) for j in jobs[:3]]
        answers = client.complete_many(done)
        rec.completed([(j.token, j.id) for j in jobs[:3]], answers, "w0", started)
        client.close()
    raw = orjson.loads(store.get(paths.state_key(QUEUE)))
    assert raw["jobs"] == [] and "seg" in raw["claims"][0]["parts"][0]
    check = check_store(store, rec)
    assert failures(check) == {"claim_records_left": 1}  # (held: the run is not drained)
    # the record gone from the head (a broken write): its 5 held jobs are lost
    raw["claims"] = []
    head = store.read(paths.state_key(QUEUE))
    store.write_if_match(paths.state_key(QUEUE), orjson.dumps(raw), head.etag)
    check = check_store(store, rec)
    assert failures(check) == {"lost": 5}
    assert sorted(s["id"] for s in check["samples"]["lost"]) == sorted(j.id for j in jobs[3:])
