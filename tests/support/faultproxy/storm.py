"""A storm of the fault proxy (:meth:`~tests.support.faultproxy.proxy.FaultProxy.storm`):
every request of some methods (all by default) faulted with the kinds it names,
for a number of seconds and/or requests, whatever the proxy's ``rate`` and
``enabled`` say; then it ends by itself."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Storm:
    """``until``: a ``time.monotonic()`` time; ``left``: requests (None: no such bound)."""

    kinds: tuple[str, ...]
    until: float | None
    left: int | None
    methods: tuple[str, ...] | None

    @classmethod
    def of(cls, kinds: Sequence[str], known: Sequence[str], *, seconds: float | None,
           count: int | None, methods: Sequence[str] | None) -> Storm:
        """A storm starting now; ``ValueError`` for kinds not ``known`` or no bound."""
        if not kinds or set(kinds) - set(known):
            raise ValueError(f"a storm needs kinds among {tuple(known)}, got {list(kinds)}")
        if seconds is None and count is None:
            raise ValueError("a storm needs seconds, count or both")
        if (seconds is not None and seconds < 0) or (count is not None and count < 0):
            raise ValueError("a storm's seconds and count must be >= 0")
        return cls(tuple(kinds), None if seconds is None else time.monotonic() + seconds,
                   count, None if methods is None else tuple(m.upper() for m in methods))

    def over(self) -> bool:
        return (self.until is not None and time.monotonic() >= self.until) or self.left == 0

    def kinds_for(self, method: str, drop_methods: Sequence[str]
                  ) -> list[tuple[str, float]] | None:
        """The kinds (with weights) to draw a fault of a ``method`` request from, one
        of ``left`` used up; None if the storm leaves such requests alone. A
        ``drop`` only for ``drop_methods``."""
        if self.methods is not None and method not in self.methods:
            return None
        kinds = [(k, 1.0) for k in self.kinds if k != "drop" or method in drop_methods]
        if kinds and self.left is not None:
            self.left -= 1
        return kinds

    def stats(self) -> dict[str, Any]:
        return {"kinds": list(self.kinds), "left": self.left,
                "left_s": None if self.until is None else
                round(max(0.0, self.until - time.monotonic()), 3),
                "methods": None if self.methods is None else list(self.methods)}
