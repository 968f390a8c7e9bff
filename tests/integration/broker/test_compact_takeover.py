"""Bytes the broker keeps as compact copies (broker.wire.compact: payloads of
jobs with options, completion results) across a lost reply and a takeover: a
complete whose head write landed but whose reply was lost (LOST_REPLY), the
broker killed, its successor reads the head back (payloads and results copied
out of the decoded lines), completes the rest; every job is archived exactly
once with the payload pushed and the result completed, nothing is left in
the head or stranded in the store."""

from __future__ import annotations

from pathlib import Path

from broker import paths
from broker.http import routes
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, Clock, FaultyStore
from tests.support.inprocess import (
    archive_lines,
    archived_and_dropped,
    crash,
    run,
    segment_objects,
    started,
    stored,
    successor,
)

N = 40


def test_kept_payloads_and_results_survive_a_lost_reply_and_a_takeover(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)
    clock = Clock()
    jobs = [{"payload": {"n": i, "big": 2**70 + i}, "priority": i % 3,
             **({"key": f"k{i}"} if i % 2 else {})} for i in range(N)]
    no_key = (None, None)

    async def main() -> None:
        a = await started(store, "http://a", clock)
        status, pushed = await routes.push(a, "q", {"jobs": jobs}, no_key)
        assert status == 200 and len(pushed["ids"]) == N
        status, claimed = await routes.claim(a, "q", {"worker": "w", "max_jobs": N,
                                                      "lease_s": 600}, no_key)
        assert status == 200 and len(claimed["jobs"]) == N
        tokens = {j["id"]: j["token"] for j in claimed["jobs"]}
        ids = sorted(tokens)
        first = {"items": [{"token": tokens[i], "result": {"r": i, "x": 1.5}}
                           for i in ids[:N // 2]]}
        store.inject("write_if_match", LOST_REPLY, key_contains="queue.json")
        await routes.complete(a, "q", first, no_key)
        assert store.injected == [("write_if_match", LOST_REPLY, paths.state_key("q"))]
        await crash(a)  # (whether it answered or not, the head has the completions)

        b = await successor(inner, clock)
        again = {"items": [{"token": tokens[i], "result": {"r": i, "x": 1.5}} for i in ids]}
        status, done = await routes.complete(b, "q", again, no_key)
        assert status == 200, done
        await archived_and_dropped(b, inner, clock)
        await b.stop(drain_s=5)

    run(main())
    records = archive_lines(inner)
    by_id = {r["id"]: r for r in records}
    assert len(records) == len(by_id) == N  # (lost 0, duplicated 0)
    for i, job_id in enumerate(sorted(by_id)):
        assert by_id[job_id]["payload"] == {"n": i, "big": 2**70 + i}
        assert by_id[job_id]["result"] == {"r": job_id, "x": 1.5}
    state = stored(inner)
    assert not list(state.jobs.values()) and not state.claim_records
    assert segment_objects(inner) == []
