"""``osqueue push --file F --request-key K`` (osqueue_spark.cli.cmd_push): chunk ``i``
of the input goes under request key ``K-{i}``, so when a chunk's answer is lost
and the command fails, its message names ``--request-key K`` and a re-run of the
same command answers the chunks that landed from their receipts and pushes only
the rest: the store holds each job once. A re-run with other input under the
same key is refused and pushes nothing.

A real broker process on a file store; the CLI talks to it through a relay
(tests/support/broker_relay.py) that forwards the first chunk, lets it land,
closes the connection unanswered and then refuses connections, as a broker
killed right after its commit would. The re-run goes to the broker directly."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker import paths
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark.cli import main
from tests.support.broker_process import BrokerProcess
from tests.support.broker_relay import BrokerRelay


@pytest.fixture()
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture()
def broker(store_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(f"file://{store_dir}") as proc:
        yield proc


def _file(path: Path, ns: range) -> Path:
    path.write_text("".join(json.dumps({"n": n}) + "\n" for n in ns))
    return path


def _state(store_dir: Path, queue: str) -> tuple[Counter[int], set[str]]:
    """How many times each job's ``n`` is in the queue, and its receipts' keys."""
    state = decode_state(FileStore(store_dir).read(paths.state_key(queue)).data)
    ns = Counter(orjson.loads(job.payload)["n"] for job in state.jobs.values())
    return ns, set(state.receipts.requests)


def test_a_rerun_with_the_same_request_key_pushes_only_the_chunks_that_did_not_land(
        broker: BrokerProcess, store_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    jobs = _file(tmp_path / "jobs.jsonl", range(20))
    push = ["push", "--file", str(jobs), "--batch-size", "5", "--request-key", "nightly"]
    with BrokerRelay(broker.url) as relay:
        relay.cut_next("POST", "/push", down_s=60)  # chunk 0 lands, its answer is lost
        assert main(["--broker", relay.url, "--queue", "q", *push]) == 1
        assert relay.lost.is_set() and relay.lost_status == 200
    err = capsys.readouterr().err
    assert "re-run the same command with --request-key nightly" in err, err
    assert "The first 0 job(s) of the input are in the queue" in err
    assert "request_key=" not in err  # (the Python client's advice is not the CLI's)
    assert _state(store_dir, "q") == (Counter(range(5)), {"nightly-0"})

    assert main(["--broker", broker.url, "--queue", "q", *push]) == 0
    assert "pushed 20 job(s)" in capsys.readouterr().out
    ns, keys = _state(store_dir, "q")
    assert ns == Counter(range(20))  # chunk 0 answered from its receipt, 1..3 pushed
    assert keys == {f"nightly-{i}" for i in range(4)}

    assert main(["--broker", broker.url, "--queue", "q", "--json", *push]) == 0  # again
    again = orjson.loads(capsys.readouterr().out)
    assert again["pushed"] == 20 and len(set(again["ids"])) == 20
    assert _state(store_dir, "q")[0] == Counter(range(20))


def test_a_request_key_reused_for_other_input_is_refused_and_pushes_nothing(
        broker: BrokerProcess, store_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--broker", broker.url, "--queue", "q", "push", "--batch-size", "5",
            "--request-key", "daily"]
    assert main([*base, "--file", str(_file(tmp_path / "mon.jsonl", range(10)))]) == 0
    before = FileStore(store_dir).read(paths.state_key("q"))
    capsys.readouterr()
    assert main([*base, "--file", str(_file(tmp_path / "tue.jsonl", range(10, 20)))]) == 1
    err = capsys.readouterr().err
    assert "[request_key_reused]" in err and "used for other jobs" in err
    assert "push other jobs under a new --request-key" in err
    after = FileStore(store_dir).read(paths.state_key("q"))
    assert (after.etag, bytes(after.data)) == (before.etag, bytes(before.data))


@pytest.mark.parametrize("key", ["", "two words", "k" * 200])
def test_a_bad_request_key_is_a_usage_error(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--broker", "http://127.0.0.1:9", "--queue", "q", "push", "1",
              "--request-key", key])
    assert info.value.code == 2 and "printable ASCII" in capsys.readouterr().err
