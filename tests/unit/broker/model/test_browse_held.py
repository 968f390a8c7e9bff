"""broker.model.browse (the dashboard's job browser) over jobs held in claim
records (``held_in_records``): a page forward and a page back show held jobs
as claimed and done ones as completed, between the head's and the segment's
pending jobs, and the page's ends (``has_prev``, ``has_next``) count them."""

from __future__ import annotations

from broker.model import browse
from broker.model import transitions as T
from broker.model.job import CLAIMED, COMPLETED, PENDING
from broker.model.ops import Claim, Complete, CompleteItem, PushPayloads
from tests.support.held_records import LATER, held_queue, write_back


def test_the_job_browser_pages_through_held_and_done_jobs_both_ways() -> None:
    state, _, _ = held_queue(6)  # seqs 1-6 in a segment
    T.apply(state, PushPayloads((b'{"i":7}',)), LATER)  # seq 7, inline
    got = T.apply(state, Claim("w", 4, 60_000), LATER).jobs  # 1-4, held in a record
    T.apply(state, Complete((CompleteItem(got.tokens[1]),)), LATER)  # 2: a done entry
    _, state = write_back(state)

    def rows(view: dict) -> list[tuple[int, str]]:  # type: ignore[type-arg]
        return [(r["seq"], r["status"]) for r in view["rows"]]

    first = browse.page(state, LATER, None, None, None, 3)
    assert rows(first) == [(1, CLAIMED), (2, COMPLETED), (3, CLAIMED)]
    assert (first["has_prev"], first["has_next"]) == (False, True)
    rest = browse.page(state, LATER, None, 3, None, 10)
    assert rows(rest) == [(4, CLAIMED), (5, PENDING), (6, PENDING), (7, PENDING)]
    back = browse.page(state, LATER, None, None, 5, 3)  # the 3 jobs before seq 5
    assert rows(back) == [(2, COMPLETED), (3, CLAIMED), (4, CLAIMED)]
    assert (back["has_prev"], back["has_next"]) == (True, True)
    claimed = browse.page(state, LATER, CLAIMED, None, None, 10)
    assert rows(claimed) == [(1, CLAIMED), (3, CLAIMED), (4, CLAIMED)]
