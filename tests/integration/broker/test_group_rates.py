"""Per-group rates through a real broker process over HTTP: ``group_rate_per_s``
and ``group_burst`` set by ``PUT`` (the client's ``create``); a group out of
tokens is skipped while jobs without a group are served; a long-poll claim gets
the group's next job once its token comes; the store keeps the settings and
every job once. (That the commit loop's timer wakes at a parked group's next
token is pinned by tests/unit/broker/model/segments/test_grouped_rates.py.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from broker import paths
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.support.broker_process import BrokerProcess


def test_a_group_out_of_tokens_waits_for_its_next_token(tmp_path: Path) -> None:
    with BrokerProcess(f"file://{tmp_path}", "--lease-s", "3600") as broker:
        client = QueueClient(broker.url, "q")
        created = client.create(group_rate_per_s=2, group_burst=1)
        assert created["settings"]["group_rate_per_s"] == 2
        ids = client.push_many([{"payload": {"n": i}, "group": "k"} for i in range(3)] +
                               [{"n": 9}])
        got = client.claim("w", 10, lease_s=300)
        assert Counter(j.group for j in got) == {"k": 1, None: 1}
        woken = client.claim("w", 10, lease_s=300, wait_s=20)
        assert [(j.id, j.group) for j in woken] == [(ids[1], "k")]  # the group's next, in order

        head = decode_state(FileStore(tmp_path).read(paths.state_key("q")).data)
        assert head.settings.groups == {"group_burst": 1, "group_rate_per_s": 2}
        seen = [job.id for job in head.jobs.values()]
        assert sorted(seen) == sorted(ids)  # every job once
