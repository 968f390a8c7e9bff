"""The group commit of one compare-and-set object, generic over a model.

:class:`~broker.commit.loop.CommitLoop` gathers every operation that arrived
while the last write was in flight, applies them through a
:class:`~broker.commit.model.Model`, writes the result with one conditional
write, and answers each caller once that write has landed (or proves it cannot
land: :mod:`broker.commit.verdict`). Store calls leave the event loop through
:mod:`broker.commit.offloop`. Imports the storage layer and the leaves, never
:mod:`broker.model`: the rules come in through the ``Model`` protocol.
"""

from broker.commit.loop import CommitLoop
from broker.commit.model import Model

__all__ = ["CommitLoop", "Model"]
