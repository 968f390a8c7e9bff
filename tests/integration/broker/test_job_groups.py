"""Job groups through a real broker process over HTTP: a JSON push and a
client's staged push carry groups, the claim answers them, GET jobs and GET
jobs/ID show them, the head is format version 6 while they are in it, the
archive keeps them once done; a bad group is refused with 422
``invalid_request`` (the value cut short) and leaves the store byte for byte
as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import urllib3

from broker.errors import InvalidRequest
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess, eventually
from tests.support.inprocess import archive_lines, stored
from tests.support.store_files import store_files


def _post(url: str, body: bytes) -> urllib3.BaseHTTPResponse:
    return urllib3.request("POST", url, body=body, retries=False,
                           headers={"content-type": "application/json"})


@pytest.fixture()
def broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as proc:
        yield proc


def test_groups_are_pushed_claimed_shown_and_archived(broker: BrokerProcess,
                                                      tmp_path: Path) -> None:
    client = QueueClient(broker.url, "q")
    r = _post(f"{broker.url}/v1/queues/q/push", orjson.dumps({"jobs": [
        {"payload": {"n": 0}, "group": "tenant-a"}, {"payload": {"n": 1}},
        {"payload": {"n": 2}, "group": None}, {"payload": {"n": 3}, "group": 'b"\u00e9'}]}))
    assert r.status == 200, r.data
    ids = r.json()["ids"]
    ids += client.push_many([{"payload": {"n": 4}, "group": "tenant-a"}, {"n": 5}])
    ids.append(client.push({"n": 6}, group="tenant-c", priority=0))
    want = {ids[0]: "tenant-a", ids[3]: 'b"\u00e9', ids[4]: "tenant-a", ids[6]: "tenant-c"}

    head = (tmp_path / "q" / "queue.json").read_bytes()
    assert head.startswith(b'{"format":"osqueue","version":6,')
    assert {j.id: j.group for j in stored(FileStore(tmp_path)).jobs.values()
            if j.group is not None} == want
    listed = {j["id"]: j.get("group") for j in client.iter_jobs("pending")}
    assert listed == {i: want.get(i) for i in ids}
    assert client.job(ids[3])["group"] == 'b"\u00e9' and "group" not in client.job(ids[1])

    claimed = client.claim("w", max_jobs=10, lease_s=3600)
    assert sorted(j.id for j in claimed) == ids  # (in turns between the groups)
    assert {j.id: j.group for j in claimed} == {i: want.get(i) for i in ids}
    raw = _post(f"{broker.url}/v1/queues/q/claim", b'{"worker":"w2"}').json()
    assert raw == {"jobs": []}

    for job in claimed:
        client.complete(job.token, {"done": job.id})
    lines = eventually(lambda: len(archive_lines(FileStore(tmp_path))) == len(ids)
                       and archive_lines(FileStore(tmp_path)), what="the archive objects")
    assert {rec["id"]: rec.get("group") for rec in lines} == {i: want.get(i) for i in ids}
    eventually(lambda: client.job(ids[0])["location"] == "archive", what="the drop")
    assert client.job(ids[0])["group"] == "tenant-a"
    assert "group" not in client.job(ids[1])
    eventually(lambda: (tmp_path / "q" / "queue.json").read_bytes().startswith(
        b'{"format":"osqueue","version":5,'), what="the head back at version 5")


@pytest.mark.parametrize("group", ["", "x" * 129, "a\u0000b", "\u007f", "\n", 7, ["a"],
                                   "long and bad " * 40 + "\u0001"])
def test_a_bad_group_is_refused_and_changes_nothing(broker: BrokerProcess, tmp_path: Path,
                                                    group: object) -> None:
    client = QueueClient(broker.url, "q")
    client.push_many([{"payload": 1, "group": "ok"}, 2])
    before = store_files(tmp_path)
    body = orjson.dumps({"jobs": [{"payload": 3, "group": "fine"},
                                  {"payload": 4, "group": group}]})
    r = _post(f"{broker.url}/v1/queues/q/push", body)
    assert r.status == 422, r.data
    out = r.json()
    assert out["code"] == "invalid_request"
    assert "jobs[1].group" in out["error"] and len(out["error"]) < 250
    staged = b'{"group":"fine"}\t3\n' + orjson.dumps({"group": group}) + b"\t4\n"
    r = urllib3.request("POST", f"{broker.url}/v1/queues/q/push", body=staged, retries=False,
                        headers={"content-type": "application/vnd.osqueue.staged"})
    assert r.status == 422 and r.json()["code"] == "invalid_request", r.data
    with pytest.raises(InvalidRequest, match="group"):
        client.push(5, group=group)  # type: ignore[arg-type]
    assert store_files(tmp_path) == before


def test_the_cli_pushes_with_a_group_and_refuses_a_bad_one(broker: BrokerProcess) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "osqueue_spark.cli", "--broker",
                               broker.url, "--queue", "q", *args], capture_output=True,
                              text=True, timeout=120)

    done = cli("push", "--group", "tenant-a", '{"a":1}', "2")
    assert done.returncode == 0, done.stderr
    client = QueueClient(broker.url, "q")
    assert [j["group"] for j in client.iter_jobs()] == ["tenant-a", "tenant-a"]
    shown = cli("job", "j0000000001")
    assert shown.returncode == 0 and "tenant-a" in shown.stdout, shown
    bad = cli("push", "--group", "a\x01b", "3")
    assert bad.returncode != 0 and "group must be a string of 1..128" in bad.stderr, bad
    assert client.stats()["total"] == 2
