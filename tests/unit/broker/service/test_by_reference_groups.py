"""Which pushes go by reference, with groups: segments hold no groups yet, so a
grouped push stays in the head (never written to a segment without its groups)."""

from __future__ import annotations

from broker.model.ops import NewJob, Push
from broker.service.by_reference import wanted


def test_a_grouped_push_never_goes_by_reference() -> None:
    """Segments hold no groups yet: a large grouped push stays in the head,
    as large a push without groups goes to a segment."""
    plain = Push(tuple(NewJob(b"%d" % i, priority=1) for i in range(100)))
    grouped = Push(tuple(NewJob(b"%d" % i, priority=1, group="g") for i in range(100)))
    assert wanted(plain, 10)
    assert not wanted(grouped, 10)
