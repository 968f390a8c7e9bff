"""When the commit loop writes: how long a batch waits for stragglers, and how
an idle loop backs off a timer that keeps falling due. Pure; times in seconds.

Apart from :mod:`broker.commit.loop` as the pure rules are apart from their
I/O elsewhere: the loop (asyncio, the store, the answers) passes in what it
measured, and these decide, with nothing to await or mock.
"""

from __future__ import annotations

from broker.retry import backoff_s


def linger_s(*, buffered: int, last_batch: int, timer: bool, closing: bool,
             last_commit_s: float, fraction: float, cap_s: float) -> float:
    """How long the next batch waits for more callers (0: write at once).

    The callers the last commit just answered come back within a few
    milliseconds; starting the write with only the first of them would make
    the rest wait for two writes. Waits at most ``fraction`` of the last
    commit's duration (at most ``cap_s``), and only while fewer operations are
    buffered (``buffered``) than the last batch had. A quarter: on a busy
    machine answering and re-reading 256 callers takes longer than a tenth of a
    200 ms write, and the stragglers then paid a whole extra write (p99 2.1x
    the write latency with 0.1, 1.4-1.5x with 0.25, 1.6-1.8x with 0.4, measured
    back to back). ``timer``: the commit is for a due timer, nothing buffered.
    """
    if (not buffered and not timer) or buffered >= last_batch or closing:
        return 0.0
    budget = min(cap_s, last_commit_s * fraction)
    return 0.0 if budget <= 0.0005 else budget


def idle_floor_s(idle_commits: int) -> float:
    """The least wait before a due timer's next commit, after ``idle_commits``
    timer commits in a row wrote nothing: a timer still due after such a commit
    must not spin the event loop (10 ms doubling to 1 s, until a write resets it)."""
    return 0.0 if idle_commits == 0 else backoff_s(idle_commits + 1, 0.01, 1.0)
