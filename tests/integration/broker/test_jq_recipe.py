"""The jq recipe of docs/architecture.md that lists a queue's pending jobs
across the head and its segment objects, run as written against a store a
real broker process wrote (inline jobs, a segment partly claimed): it lists
exactly the jobs the broker calls pending, field for field. The recipe for
claimed jobs (their lease read from their claim record) lists exactly the
broker's claimed jobs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess
from tests.support.inprocess import stored

DOC = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"

pytestmark = pytest.mark.skipif(shutil.which("jq") is None, reason="needs the jq command")


def recipe(heading: str = "The pending jobs of a queue, across the head and its segments"
           ) -> str:
    """The sh block after the recipe's heading, its ``cd`` dropped (run in the store)."""
    text = DOC.read_text()
    at = text.index(heading)
    block = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert block is not None
    return "\n".join(line for line in block.group(1).splitlines()
                     if not line.startswith("cd "))


def test_the_docs_jq_recipe_lists_every_pending_job_of_the_head_and_its_segments(
        tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "20",
                       "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        client.push_many([{"inline": 1}, {"inline": 2}])
        client.push_many([{"seg": i, "n": 2 ** 40 + i} for i in range(20)])
        client.push_many([{"seg2": i} for i in range(25)])
        client.push({"late": True}, priority=3)
        client.claim("w", max_jobs=4, lease_s=3600)  # the late one, two inline, one of a segment
        refs = stored(FileStore(tmp_path)).segment_refs
        assert len(refs) == 2 and refs[0].taken == 1  # (a segment partly claimed)
        want = list(client.iter_jobs("pending"))
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + recipe()], cwd=tmp_path,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 2 + 20 + 25 + 1 - 4
    assert sorted(got, key=lambda job: job["seq"]) == want


def test_the_docs_jq_recipe_lists_every_claimed_job_with_its_claims_lease(
        tmp_path: Path) -> None:
    """The claimed jobs of the head (format version 5: their lease in their claim
    record) with their lease, as the API lists them without tokens."""
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        client.push_many([{"n": i} for i in range(6)])
        client.claim("w-1", max_jobs=3, lease_s=3600)
        client.claim("w-2", max_jobs=2, lease_s=600)
        want = list(client.iter_jobs("claimed"))
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + recipe(
        "The claimed jobs with their")], cwd=tmp_path, capture_output=True, text=True,
        check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 5
    assert {j["lease"]["worker"] for j in got} == {"w-1", "w-2"}
    assert sorted(got, key=lambda job: job["seq"]) == want


def test_the_docs_jq_recipe_skips_a_grouped_segments_taken_positions(tmp_path: Path) -> None:
    """A grouped segment (format 3) partly claimed by group: its taken jobs are
    positions in ``taken_at``, not a prefix; the recipe lists the others, each
    with its group from the segment's directory."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "20",
                       "--grouped-segments", "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        client.create(group_limit=2)
        client.push_many([{"payload": {"n": i}, "group": f"g{i % 3}" if i % 5 else None}
                          for i in range(30)])
        client.claim("w", max_jobs=8, lease_s=3600)  # (fair turns: two of each group)
        [ref] = stored(FileStore(tmp_path)).segment_refs
        assert ref.groups == 4 and len(ref.taken_at) > 2  # (holes, not a prefix)
        want = list(client.iter_jobs("pending"))
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + recipe()], cwd=tmp_path,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 30 - ref.taken
    assert {job.get("group") for job in got} == {"g0", "g1", "g2", None}
    assert sorted(got, key=lambda job: job["seq"]) == want


def test_the_docs_jq_recipe_lists_claimed_jobs_held_in_claim_records(tmp_path: Path) -> None:
    """With ``held_in_records``, claims from a segment write no job line: the
    recipe's second half reads them from the segment through their record's
    ``seg`` part (a completed one, in a done entry, is left out)."""
    with BrokerProcess(f"file://{tmp_path}", "--segment-push-jobs", "20", "--lease-s", "3600",
                       env={"OSQUEUE_HELD_IN_RECORDS": "true"}) as broker:
        client = QueueClient(broker.url, "q")
        client.push_many([{"inline": 1}])
        client.push_many([{"seg": i, "n": 2 ** 40 + i} for i in range(20)])
        jobs = client.claim("w-1", max_jobs=6, lease_s=3600)  # the inline one, 5 of the segment
        client.claim("w-2", max_jobs=3, lease_s=600)
        assert client.complete(jobs[2].token).ok  # (a done entry: not claimed any more)
        head = orjson.loads((tmp_path / "q" / "queue.json").read_bytes())
        assert any("seg" in part for c in head["claims"] for part in c["parts"])
        want = list(client.iter_jobs("claimed"))
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + recipe(
        "The claimed jobs with their")], cwd=tmp_path, capture_output=True, text=True,
        check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 8
    assert sorted(got, key=lambda job: job["seq"]) == want


def test_the_docs_jq_recipe_lists_claimed_jobs_held_at_spill_parts(tmp_path: Path) -> None:
    """Claims from pending spill objects (retry-waiting jobs; a dead object
    redriven by reference) write no job line: the recipe for spill parts reads
    them from their objects through their records (a settled one is left out),
    field for field as the API lists them."""
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600",
                       env={"OSQUEUE_SPILL_JOBS": "10", "OSQUEUE_HELD_IN_RECORDS": "true"}
                       ) as broker:
        client = QueueClient(broker.url, "q")
        client.create(max_attempts=3)
        client.push_many([{"n": i, "big": 2 ** 40 + i} for i in range(15)])
        jobs = client.claim("w", max_jobs=15)
        client.fail_many([(j.token, f"boom {j.id}", 0) for j in jobs])  # (spilled, pending)
        held = client.claim("w-1", max_jobs=8, lease_s=3600)
        client.claim("w-2", max_jobs=4, lease_s=600)
        assert client.complete(held[2].token).ok  # (settled: not claimed any more)
        head = orjson.loads((tmp_path / "q" / "queue.json").read_bytes())
        assert any("spill" in part for c in head["claims"] for part in c["parts"])
        want = list(client.iter_jobs("claimed"))
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + recipe(
        "The third part\nof the recipe above lists them")], cwd=tmp_path, capture_output=True,
        text=True, check=True, timeout=60).stdout
    got = [orjson.loads(line) for line in out.splitlines()]
    assert len(got) == len(want) == 11
    assert sorted(got, key=lambda job: job["seq"]) == want
