"""Print approx_state_bytes after each keyed publish (the scenario of
test_publish_keys_are_trimmed_and_counted), for the code on PYTHONPATH.
Shows whether the test's `sizes[1] - sizes[0] > 200` tells counted keys apart."""
import asyncio
import tempfile
from pathlib import Path

from broker import transitions
from broker.storage import FileStore
from tests.broker.faults import Clock
from tests.broker.inprocess import started

if hasattr(transitions, "ONCE_KEYS_MIN"):
    transitions.ONCE_KEYS_MIN = 3

async def main(key_len: int) -> list[int]:
    store = FileStore(Path(tempfile.mkdtemp()))
    a = await started(store, clock=Clock())
    await a.create_queue("q", {"dedup_ttl_s": 60, "dedup_keys": 1})
    sizes = []
    for i in range(5):
        await a.stage("q", f"w-{i}/c0", b"\t1\n")
        await a.publish("q", f"w-{i}/", [f"w-{i}/c0"], once=f"write:w-{i}:" + "x" * key_len)
        sizes.append((await a.stats("q"))["approx_state_bytes"])
    await a.stop(drain_s=5)
    return sizes

import broker  # noqa: E402 (the path is set up above)

print(broker.__file__)
for n in (200, 0):
    s = asyncio.run(main(n))
    print(f"key of {n + 10} chars: sizes {s}, first step {s[1] - s[0]}")
