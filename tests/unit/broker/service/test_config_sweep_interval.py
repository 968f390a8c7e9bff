"""BrokerConfig.sweep_s: how often a broker sweeps the staging and segment objects
of the queues it serves (``--sweep-s``). Real file store, store checked."""

from __future__ import annotations

from pathlib import Path

import orjson

from broker import paths
from broker.model.format import segment_format
from broker.storage import store_from_url
from tests.support.inprocess import payloads, run, segment_objects, started, stored, until


def test_the_broker_sweeps_every_sweep_s_and_keeps_what_the_head_references(
        tmp_path: Path) -> None:
    store = store_from_url(f"file://{tmp_path}")
    orphan = paths.segment_key("q", paths.segment_name(900, "0badcafe"))

    async def go() -> None:
        broker = await started(store, segment_push_jobs=10, segment_grace_s=0.2,
                               sweep_s=0.05)
        try:
            await broker.push("q", [orjson.dumps({"n": i}) for i in range(50)])
            referenced = [ref.key for ref in stored(store).segment_refs]
            assert len(referenced) == 1
            # a segment a push wrote but never committed (a lost reply, a crash)
            store.create_if_absent(orphan, segment_format.encode_segment(
                "q", 900, 0, 1_000, [b'{"n":-1}'], max_attempts=3))
            assert segment_objects(store) == sorted([*referenced, orphan])
            await until(lambda: orphan not in segment_objects(store), timeout_s=10.0)
            assert segment_objects(store) == referenced
            assert sorted(p["n"] for p in payloads(store)) == list(range(50))
        finally:
            await broker.stop()

    run(go())
