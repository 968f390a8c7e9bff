"""Verdicts on write attempts (broker/commit/verdict.py), and how callers are answered."""

from __future__ import annotations

import asyncio

import pytest

from broker.commit.verdict import (
    Attempt,
    Verdict,
    Waiter,
    answer,
    answer_all,
    new_commit_id,
    outcome_unknown,
    verdict,
)
from broker.errors import InvalidRequest, OutcomeUnknown


def attempt(base_commit: str | None = "c-base", base_etag: str | None = "e-base",
            commit: str = "c-mine") -> Attempt[int]:
    return Attempt(commit, base_commit, base_etag, [1])


@pytest.mark.parametrize(("case", "lineage", "seq", "etag", "expected"), [
    ("its id in the lineage", ["c-base", "c-mine", "c-later"], 9, "e-later", Verdict.LANDED),
    ("still its base version", ["c-base"], 8, "e-base", Verdict.PENDING),
    ("object deleted since", [], 0, None, Verdict.DEAD),
    ("another write after its base", ["c-base", "c-theirs"], 9, "e-theirs", Verdict.DEAD),
    ("its base scrolled out", ["c-x", "c-y"], 40, "e-y", Verdict.UNKNOWN),
])
def test_verdict_of_an_attempt_over_a_version(case: str, lineage: list[str], seq: int,
                                              etag: str | None, expected: Verdict) -> None:
    assert verdict(attempt(), lineage=lineage, seq=seq, etag=etag) is expected, case


def test_verdict_of_an_attempt_to_create_the_object() -> None:
    create = attempt(base_commit=None, base_etag=None)
    assert verdict(create, lineage=[], seq=0, etag=None) is Verdict.PENDING
    # someone else created it, and the lineage reaches back to its first version
    assert verdict(create, lineage=["c-1", "c-2"], seq=2, etag="e2") is Verdict.DEAD
    # too many versions since to know
    assert verdict(create, lineage=["c-8", "c-9"], seq=9, etag="e9") is Verdict.UNKNOWN


def test_commit_ids_are_fresh() -> None:
    ids = {new_commit_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(i.startswith("c-") and len(i) == 26 for i in ids)


def test_answers_set_results_or_raise_errors_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ok: Waiter[str, int] = Waiter("op", loop.create_future())
        bad: Waiter[str, int] = Waiter("op", loop.create_future())
        gone: Waiter[str, int] = Waiter("op", loop.create_future())
        gone.future.cancel()  # a caller that stopped waiting
        answer(ok, 7)
        answer(ok, 8)  # answered already: ignored
        answer_all([bad, gone], InvalidRequest("no"))
        assert await ok.future == 7
        with pytest.raises(InvalidRequest, match="no"):
            await bad.future
        assert gone.future.cancelled()

    asyncio.run(main())


def test_outcome_unknown_names_the_object_and_the_cause() -> None:
    err = outcome_unknown("q/queue.json", TimeoutError("slow"))
    assert isinstance(err, OutcomeUnknown)
    assert "q/queue.json" in err.message and "slow" in err.message
