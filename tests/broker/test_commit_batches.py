"""Group commits: the calls batched into one write each get their own answer, for
the call as it was made, and one bad call does not fail the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker import transitions as T
from broker.storage import FileStore
from tests.support.inprocess import run, started, stored


def test_concurrent_completes_in_one_group_commit_get_their_own_answers(
        tmp_path: Path) -> None:
    """Six completes in one group commit each get their own answer, for their own
    tokens (the sixth names a job the first also completes, and an unknown
    token); five jobs end completed and none is claimable again."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [T.NewJob(b"%d" % i) for i in range(6)])
        jobs = await a.claim("q", "w", 6, 30.0)
        calls = [T.CompleteItems.of([T.CompleteItem(j.token, b"1")]) for j in jobs]
        calls[5] = T.CompleteItems.of([T.CompleteItem(jobs[0].token, b"9"),
                                       T.CompleteItem("j0000000099.77")])
        got = await asyncio.gather(*(a.complete("q", c) for c in calls))
        for j, answers in zip(jobs[:5], got[:5], strict=True):
            assert [(r.token, r.ok) for r in answers] == [(j.token, True)]
        assert [(r.token, r.ok) for r in got[5]] == [(jobs[0].token, True),
                                                     ("j0000000099.77", False)]
        assert len({id(g) for g in got}) == 6
        assert len({id(g.tokens) for g in got if isinstance(g, T.ItemResults)}) == 6
        claims = await asyncio.gather(*(a.claim("q", "v", 1, 30.0) for _ in range(3)))
        assert all(c == [] for c in claims)
        await a.stop(drain_s=5)
        assert stored(store).counters.completed == 5  # jobs[5] was never completed

    run(main())


def test_caller_items_mutated_after_the_call_do_not_change_the_op(tmp_path: Path) -> None:
    """broker.complete takes its items as they are when called: a caller that
    appends to its CompleteItems while the call is in flight (before the group
    commit applies it) does not get the appended item completed by this call
    (found by review: the op had shared the caller's lists)."""
    store = FileStore(tmp_path)

    async def main() -> None:
        a = await started(store)
        await a.push("q", [T.NewJob(b"1"), T.NewJob(b"2")])
        jobs = await a.claim("q", "w", 2, 30.0)
        items = T.CompleteItems.of([T.CompleteItem(jobs[0].token, b"1")])
        task = asyncio.ensure_future(a.complete("q", items))
        await asyncio.sleep(0)  # the op is submitted, not yet applied
        items.append(T.CompleteItem(jobs[1].token, b"2"))
        answers = await task
        assert len(answers) == 1, answers
        await a.stop(drain_s=5)

    run(main())
