"""The jq recipe of docs/architecture.md that lists a queue's dead jobs across
the head and its spill objects, run as written against a store a real broker
process wrote with ``OSQUEUE_SPILL_JOBS`` (dead jobs inline and in two spill
objects, one job taken out by a redrive by id): it lists exactly the jobs the
broker calls dead, field for field."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.doc_blocks import sh_block

pytestmark = pytest.mark.skipif(shutil.which("jq") is None, reason="needs the jq command")


def test_the_docs_jq_recipe_lists_every_dead_job_inline_and_spilled(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", env={"OSQUEUE_SPILL_JOBS": "10"}) as broker:
        client = QueueClient(broker.url, "q")
        client.create(max_attempts=1)
        for n in (15, 12, 4):  # two spills, then 4 dead left inline
            client.push_many([{"n": i, "big": 2 ** 40 + i} for i in range(n)])
            jobs = client.claim("w", max_jobs=n)
            client.fail_many([(j.token, f"boom {j.id}" if n > 4 else "", None) for j in jobs])
        first = client.jobs("dead", 1)[0]["id"]
        assert client.redrive([first]) == 1
        want = list(client.iter_jobs("dead"))
    raw = orjson.loads((tmp_path / "q" / "queue.json").read_bytes())
    assert len(raw["spills"]) == 2 and raw["spills"][0]["out"]
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + sh_block(
        "The dead jobs of a queue, inline and spilled")], cwd=tmp_path,
        capture_output=True, text=True, check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 15 + 12 + 4 - 1
    assert sorted(got, key=lambda job: job["seq"]) == want


def test_the_docs_jq_recipe_lists_the_pending_jobs_of_redriven_spill_objects(
        tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", env={"OSQUEUE_SPILL_JOBS": "10"}) as broker:
        client = QueueClient(broker.url, "q")
        client.create(max_attempts=1)
        for n in (15, 12):  # two spill objects
            client.push_many([{"n": i, "big": 2 ** 40 + i} for i in range(n)])
            jobs = client.claim("w", max_jobs=n)
            client.fail_many([(j.token, f"boom {j.id}", None) for j in jobs])
        out_id = client.jobs("dead", 20)[17]["id"]  # (in the second object)
        assert client.redrive([out_id]) == 1
        assert client.redrive() == 26
        # (the job redriven by id first: due earliest, in the head; then 3 of the first
        # object, held at the claim's spill part)
        client.claim("w", max_jobs=4)
        pending = list(client.iter_jobs("pending"))
    raw = orjson.loads((tmp_path / "q" / "queue.json").read_bytes())
    assert [(r["kind"], r["taken"]) for r in raw["spills"]] == [("pending", 3), ("pending", 0)]
    assert raw["spills"][1]["out"]
    inline = {line["id"] for line in raw["jobs"]}  # (listed by the head's recipe)
    want = [job for job in pending if job["id"] not in inline]
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + sh_block(
        "The pending jobs of spill objects (retry-waiting jobs")], cwd=tmp_path,
        capture_output=True, text=True, check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 15 + 12 - 1 - 3 and len(pending) == len(want)
    assert sorted(got, key=lambda job: job["seq"]) == want


def test_the_docs_jq_recipe_lists_the_retry_waiting_jobs_of_pending_spill_objects(
        tmp_path: Path) -> None:
    env = {"OSQUEUE_SPILL_JOBS": "10", "OSQUEUE_SPILL_PENDING": "true"}
    with BrokerProcess(f"file://{tmp_path}", env=env) as broker:
        client = QueueClient(broker.url, "q")
        client.create(max_attempts=3)
        client.push_many([{"n": i} for i in range(15)])
        jobs = client.claim("w", max_jobs=15)
        client.fail_many([(j.token, f"boom {j.id}", 0.0) for j in jobs])
        client.claim("w", max_jobs=4)
        pending = list(client.iter_jobs("pending"))
    raw = orjson.loads((tmp_path / "q" / "queue.json").read_bytes())
    assert [(r["kind"], r["taken"], "reset_at" in r) for r in raw["spills"]] == [
        ("pending", 4, False)]
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + sh_block(
        "The pending jobs of spill objects (retry-waiting jobs")], cwd=tmp_path,
        capture_output=True, text=True, check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(pending) == 11 and all(job["attempts"] == 1 for job in got)
    assert sorted(got, key=lambda job: job["seq"]) == pending
