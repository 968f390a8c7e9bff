"""Regressions found by adversarial review round 5 of the failure-path work (H1-H3).

Each test reproduces one way the reviewer found to lose, duplicate or strand a
job, give a wrong answer, or wedge a queue; it failed on the code it was found in.
The reviewer's notes head each test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker import receipts
from broker.errors import (
    PayloadTooLarge,
)
from broker.storage import FileStore
from tests.support.inprocess import run, started

# -- H12 ----------------------------------------------------------------------
# Review 5 (commit 6ff1e31): lazily kept receipts/floors are lost by a transient
# storage fault on a LIVE owner (no crash, no takeover): the re-read after a failed
# write gives the stored object, which never had them, and the batch is re-applied
# and written over it. Not the documented window (owner dies within LAZY_WRITE_MS).

C = "r-0123456789ab"
LAZY_MS = getattr(receipts, "LAZY_WRITE_MS", 1_000)  # (absent before 6ff1e31)


# -- H3 ----------------------------------------------------------------------
# Review 5 (6ff1e31), minor: a lazy mark on a queue whose object does not exist is
# never cleared (housekeeping changes count only if the object exists), so its loop
# wakes for an empty commit every ~1.28 s for ever.

def test_refused_keyed_push_to_a_new_queue_does_not_leave_a_timer_spinning(
        tmp_path: Path) -> None:
    async def main() -> tuple[int, object, bool]:
        a = await started(FileStore(tmp_path), "http://a")
        try:
            await a.push("q2", [b'"' + b"p" * (2 << 20) + b'"'],
                         request="r-0123456789ab-0", floor=0)
        except PayloadTooLarge:
            pass
        loop = a._queues["q2"].loop
        await asyncio.sleep(4.0)
        out = (loop._idle_commits, loop.state.receipts.unwritten_since, loop.etag is None)
        await a.stop(drain_s=5)
        return out

    idle, since, absent = run(main())
    assert idle <= 2, (f"queue q2 has no object (absent={absent}); its loop ran {idle} "
                       f"empty timer commits in 4 s; unwritten_since={since} never clears")
