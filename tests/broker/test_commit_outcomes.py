"""The commit loop's answers when a write's outcome is not known at once (a lost
reply, a write that lands late, a stop with a write in flight): a caller is never
told something other than what landed."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import api
from broker import transitions as T
from broker.state import COMPLETED
from broker.storage import FileStore
from tests.support.faults import LOST_REPLY, LOST_REPLY_412, NOT_LANDED, FaultyStore
from tests.support.inprocess import archive_lines, run, started, stored


@pytest.mark.parametrize("kind", [LOST_REPLY, LOST_REPLY_412, NOT_LANDED])
def test_a_complete_reapplied_after_an_unknown_outcome(tmp_path: Path, kind: str) -> None:
    """A complete (one token twice, an unknown token, another token) whose write has
    an unknown outcome (a lost reply, a lost 412, a write that did not land) is
    answered item by item once the outcome is known: the repeated token completes
    its job once with the first result, the caller's items are left as they were,
    and the archive holds each completed job once."""
    inner = FileStore(tmp_path)
    store = FaultyStore(inner)

    async def main() -> tuple[list[str], list[str]]:
        a = await started(store)
        ids = await a.push("q", [T.NewJob(b'"x"'), T.NewJob(b'"y"')])
        jobs = await a.claim("q", "w1", 2, 30.0)
        store.inject("write_if_match", kind, key_contains="queue.json")
        items = api.parse_complete({"items": [{"token": jobs[0].token, "result": 1},
                                              {"token": jobs[0].token, "result": 2},
                                              {"token": "j0000000077.1"},
                                              {"token": jobs[1].token, "result": 3}]})
        answers = await a.complete("q", items)
        assert [(r.ok, r.status) for r in answers] == [
            (True, COMPLETED), (True, COMPLETED), (False, None), (True, COMPLETED)]
        assert len(items) == 4  # the caller's items are left as they were
        await a.stop(drain_s=5)
        return ids, [j.token for j in jobs]

    ids, tokens = run(main())
    lines = sorted((rec["id"], rec["token"], rec["result"]) for rec in archive_lines(inner))
    assert lines == [(ids[0], tokens[0], 1), (ids[1], tokens[1], 3)]
    assert stored(inner).counters.completed == 2
