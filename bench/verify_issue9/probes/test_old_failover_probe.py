"""Probe for the OLD code: after kill -9 of the owner, does anything take over?

Like tests/broker/test_failover.py::test_a_killed_owner_is_replaced_within_its_lease,
but with keyed pushes (the old client retries only those), so the old client's
refusal to retry a keyless push does not end the run before the failover
question is asked. PASSES when nothing takes over.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from broker import keys
from broker import state as S
from broker.errors import OsqueueError
from broker.storage import FileStore
from osqueue_spark import QueueClient
from tests.broker.helpers import BrokerProcess

LEASE_S = 2.0


def owner_url(tmp_path: Path) -> str | None:
    state = S.decode(FileStore(tmp_path).read(keys.state_key("shared")).data)
    return state.broker.url if state.broker is not None else None


def test_probe_failover_nothing_takes_over_after_kill(tmp_path: Path) -> None:
    store_url = f"file://{tmp_path}"
    procs = [BrokerProcess(store_url, "--lease-s", str(LEASE_S)).start() for _ in range(2)]
    try:
        urls = [p.url for p in procs]
        client = QueueClient(urls, "shared", store=store_url, timeout_s=5, retry_s=5)
        for i in range(20):
            client.push({"payload": {"v": i}, "key": f"k-{i}"})
        owner = next(p for p in procs if p.url == owner_url(tmp_path))
        owner.stop(signal.SIGKILL)
        time.sleep(LEASE_S + 5)
        assert owner_url(tmp_path) == owner.url  # the record still names the dead owner
        began = time.monotonic()
        with pytest.raises(OsqueueError):  # no call succeeds: the queue is unserved
            QueueClient(urls, "shared", store=store_url, timeout_s=5, retry_s=5).push(
                {"payload": {"v": -1}, "key": "k-after"})
        print(f"no success for {LEASE_S + 5 + time.monotonic() - began:.1f}s after the kill")
        assert owner_url(tmp_path) == owner.url
    finally:
        for p in procs:
            if p.proc is not None and p.proc.poll() is None:
                p.stop(signal.SIGKILL)
