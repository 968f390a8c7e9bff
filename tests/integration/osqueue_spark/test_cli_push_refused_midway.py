"""``osqueue push --file`` refused as too large after earlier requests landed
(osqueue_spark.cli.cmd_push): the error says how many jobs are in the queue
already, and only advises a re-run that skips them when one can (the same
``--key-prefix``); a re-run with another prefix, or one added after a run
without keys, pushes those jobs again."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from osqueue_spark import QueueClient
from osqueue_spark.cli import main
from tests.support.broker_process import BrokerProcess


def _file(tmp_path: Path) -> Path:
    """20 small jobs, then 20 of 100 KB (a request of them all: 2 MB)."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(20))
                    + "".join(json.dumps({"n": i, "blob": "b" * 100_000}) + "\n"
                              for i in range(20, 40)))
    return jobs


def _ns(client: QueueClient) -> Counter[int]:
    pages = client.jobs(limit=1000)
    return Counter(job["payload"]["n"] if isinstance(job["payload"], dict)
                   else json.loads(job["payload"])["n"] for job in pages)


def test_a_push_refused_midway_says_what_landed_and_how_to_skip_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    root.mkdir()
    jobs = _file(tmp_path)
    with BrokerProcess(f"file://{root}", "--max-request-mb", "1") as broker:
        # no keys: the 20 that landed cannot be skipped by a re-run; --key-prefix
        # (which main's message advised) would push them again
        base = ["--broker", broker.url, "--queue", "plain"]
        assert main([*base, "push", "--file", str(jobs), "--batch-size", "20"]) == 1
        err = capsys.readouterr().err
        assert "[payload_too_large]" in err and "20 job(s)" in err
        assert "--key-prefix to skip" not in err and "again" in err
        assert sum(_ns(QueueClient(broker.url, "plain")).values()) == 20

        # keyed: a re-run with the same prefix skips them, and every job is there once
        base = ["--broker", broker.url, "--queue", "keyed"]
        assert main([*base, "push", "--file", str(jobs), "--batch-size", "20",
                     "--key-prefix", "load-1/"]) == 1
        err = capsys.readouterr().err
        assert "20 job(s)" in err and "the same --key-prefix (load-1/)" in err
        assert main([*base, "push", "--file", str(jobs), "--batch-size", "5",
                     "--key-prefix", "load-1/"]) == 0
        assert _ns(QueueClient(broker.url, "keyed")) == Counter(range(40))
