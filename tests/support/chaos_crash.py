"""The chaos runner with an injected crash: every single-push producer thread raises
as it starts (a bug in the runner's own client code), to check that such a run fails
and says why.

    python -m tests.support.chaos_crash [runner options]

The crash is injected here, in the runner's process, so the runner itself carries
no hook for it.
"""

from __future__ import annotations

import sys

from tools.chaos import main
from tools.chaos.clients import Workers

#: what the crashed producers raise (the test looks for it in the output)
MESSAGE = "injected: the producer crashed at start"


def crash(self: Workers, i: int) -> None:
    raise RuntimeError(MESSAGE)


if __name__ == "__main__":
    Workers.produce = crash  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
