"""Wrong bearer tokens are throttled per client address, and logged one line a minute.

**The rule** (:class:`Throttle`, pure, the time passed in). Each client address
(:func:`broker.http.peers.address_key`; behind a trusted proxy, the forwarded
client's) may present ``per_min`` wrong tokens at once, and one more each
``60 / per_min`` seconds after that (a leaky bucket). An address past its
budget is *throttled*: every request from it that presents a token (a bearer
header on any route, or the dashboard's login form) is answered 429
``too_many_requests``, with ``Retry-After`` (whole seconds) and
``retry_after_s``, **before its token is looked at**, until the budget has
room again. The right token is refused too while its address is throttled:
were it accepted, each guess would still be answered right or wrong, and
throttling would slow nothing down. Requests without a token are not
counted (they guess nothing) and are answered 401 as before. Clients behind
one NAT address share its budget: a client holding the right token waits out
a neighbour's wrong guesses (the Python client retries 429 like any
retryable error). ``per_min`` 0 turns throttling off.

**Host names** (:class:`Guard`). A request sent under a host name that is
neither a loopback name, nor the advertised URL's, nor one that the right
token came with before (at most :data:`VOUCHED_HOSTS` of them remembered)
spends another budget of its address, ``"{address} via another name"``. A
broker with a token answers any ``Host``, so a DNS-rebinding page (its own
host name pointed at the broker after it loaded, so same-origin with it)
may send as many wrong tokens as it likes from a browser on a token
holder's machine: were they counted against that machine's address, the
page would have its token holders answered 429 for as long as it kept on.
A client guessing gets two budgets at most (the broker's names and the
others), each throttled.

Memory is bounded: at most ``max_addresses`` addresses are remembered, the
one that failed longest ago forgotten first, and an address whose budget is
whole again is forgotten.

**The log** (:class:`Tally`, pure; :class:`Guard` writes it). The first
refused token of a quiet spell is logged at warning in full (method, path,
client address; never the token); the refusals of the next
``REFUSAL_SUMMARY_S`` seconds are summed up in one line at the end of that
window ("refused 299 more ... from 1 address in the last 60 s: 10.0.0.7
(299)"), never a line per guess.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from broker.errors import TooManyRequests
from broker.http.hosts import host_name, is_loopback
from broker.http.peers import address_key
from broker.limits import MAX_THROTTLED_ADDRESSES, REFUSAL_SUMMARY_S

log = logging.getLogger("osqueue.http")

#: Most addresses a summary line names (the ones refused most).
SHOWN_ADDRESSES = 3
#: Most distinct addresses one window counts one by one (the rest as "others").
_TALLIED_ADDRESSES = 1000
#: Most ``Host`` values the right token came with that a guard remembers.
VOUCHED_HOSTS = 64
#: How the budget of an address's requests under other host names is named.
_OTHER_NAME = " via another name"


class Throttle:
    """The wrong-token budget of every client address (see the module docstring).

    ``per_min``: wrong tokens an address may present at once and per minute
    (0: no throttling); ``max_addresses``: most addresses remembered. Times in
    seconds on any one clock.
    """

    def __init__(self, per_min: int, *, max_addresses: int = MAX_THROTTLED_ADDRESSES) -> None:
        if per_min < 0 or max_addresses < 1:
            raise ValueError("per_min must be >= 0 and max_addresses >= 1")
        self.per_min = per_min
        self.max_addresses = max_addresses
        self._rate = per_min / 60.0  # wrong tokens forgiven per second
        # address -> (wrong tokens still counted, when counted), the longest-ago first
        self._spent: OrderedDict[str, tuple[float, float]] = OrderedDict()
        #: address -> when it may try again; holds only throttled addresses, so
        #: an empty dict (the usual case) costs a request one truth test
        self.blocked: dict[str, float] = {}

    def __len__(self) -> int:
        """Addresses remembered."""
        return len(self._spent)

    def wait_s(self, address: str, now: float) -> float:
        """Seconds until ``address`` may present a token again (0.0: now)."""
        until = self.blocked.get(address)
        if until is None:
            return 0.0
        if now >= until:
            del self.blocked[address]
            return 0.0
        return until - now

    def failed(self, address: str, now: float) -> None:
        """``address`` presented a wrong token at ``now``."""
        if not self.per_min:
            return
        level, at = self._spent.pop(address, (0.0, now))
        level = max(0.0, level - (now - at) * self._rate) + 1.0
        self._spent[address] = (level, now)
        room = self.per_min - 1.0  # a try is allowed while the level is at most this
        if level > room:
            self.blocked[address] = now + (level - room) / self._rate
        while len(self._spent) > self.max_addresses:
            old, _ = self._spent.popitem(last=False)
            self.blocked.pop(old, None)
        # forget an address that failed long enough ago to have its whole budget back
        first = next(iter(self._spent))
        level, at = self._spent[first]
        if level - (now - at) * self._rate <= 0.0:
            del self._spent[first]
            self.blocked.pop(first, None)


class Tally:
    """The refusals of one log window: who was refused, how often (pure)."""

    def __init__(self, window_s: float = REFUSAL_SUMMARY_S) -> None:
        self.window_s = window_s
        self.opened_at: float | None = None  # None: no window open
        self._by_address: Counter[str] = Counter()
        self._others = 0  # refusals of addresses past _TALLIED_ADDRESSES
        self._throttled = 0

    def note(self, address: str, now: float, *, throttled: bool = False) -> bool:
        """Count a refusal from ``address``; True if it opens a window (log it in
        full then), False if the window's summary will count it."""
        if self.opened_at is None:
            self.opened_at = now
            return True
        if address in self._by_address or len(self._by_address) < _TALLIED_ADDRESSES:
            self._by_address[address] += 1
        else:
            self._others += 1
        self._throttled += throttled
        return False

    def close(self, now: float) -> str | None:
        """End the window: its summary line, or None if it held nothing past its
        first refusal. The next refusal opens a new window."""
        total = sum(self._by_address.values()) + self._others
        opened = now if self.opened_at is None else self.opened_at
        line = None
        if total:
            addresses = len(self._by_address) + (1 if self._others else 0)
            named = ", ".join(f"{a or '?'} ({n})" for a, n in
                              self._by_address.most_common(SHOWN_ADDRESSES))
            more = " and others" if addresses > SHOWN_ADDRESSES else ""
            throttled = f" ({self._throttled} of them 429 while throttled)" \
                if self._throttled else ""
            line = (f"refused {total} more requests with a missing or wrong token{throttled} "
                    f"from {'at least ' if self._others else ''}{addresses} "
                    f"address{'es' if addresses != 1 else ''} in the last "
                    f"{max(now - opened, 0):.0f} s: {named}{more}")
        self.opened_at = None
        self._by_address.clear()
        self._others = self._throttled = 0
        return line


class Guard:
    """The throttle and the log of refused tokens, shared by the API and the dashboard.

    ``wrong_per_min``: :class:`Throttle`'s budget (0: no throttling);
    ``advertise_url``: the broker's URL, whose host name is one of its own (see
    "Host names" in the module docstring); ``clock``: seconds (monotonic). The
    summary line of a window is written by a timer on the running event loop,
    armed when the window opens. A ``host`` argument is the request's ``Host``
    header (None: none, or not known; counted as one of the broker's names).
    """

    def __init__(self, wrong_per_min: int, *, advertise_url: str = "",
                 window_s: float = REFUSAL_SUMMARY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.throttle = Throttle(wrong_per_min)
        self.tally = Tally(window_s)
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None
        self._own_name = (urlsplit(advertise_url).hostname or "").rstrip(".")
        #: ``Host`` values the right token came with (bounded: VOUCHED_HOSTS)
        self.vouched: set[bytes] = set()

    def vouch(self, host: bytes | None) -> None:
        """The right token came under ``host``: a name of the broker's from now on."""
        if host is not None and host not in self.vouched and \
                len(self.vouched) < VOUCHED_HOSTS:
            self.vouched.add(host)

    def budget(self, client: Any, host: bytes | None) -> str:
        """The budget a request from ``client`` under ``host`` spends: its address's,
        or its address's for other names (module docstring, "Host names")."""
        address = _address(client)
        if host is None or host in self.vouched:
            return address
        name = host_name(host.decode("latin-1")).rstrip(".")
        if is_loopback(name) or (name != "" and name == self._own_name):
            return address
        return address + _OTHER_NAME

    def __repr__(self) -> str:
        return f"Guard(wrong_per_min={self.throttle.per_min})"

    def check(self, client: Any, host: bytes | None = None) -> None:
        """Raise ``TooManyRequests`` (with ``retry_after_s``) if ``client`` (an ASGI
        scope's ``(host, port)``, or None) is throttled under ``host``; the refusal
        is tallied."""
        if not self.throttle.blocked:
            return
        wait = self.throttle.wait_s(self.budget(client, host), self._clock())
        if wait <= 0.0:
            return
        seconds = max(1, math.ceil(wait))
        self.refused(client, f"refused a token from {_shown(client)}: too many wrong "
                             "tokens from this address (429)", wrong=False, throttled=True,
                     host=host)
        raise TooManyRequests(f"too many wrong tokens from this address; try again in "
                              f"{seconds} s", retry_after_s=seconds)

    def refused(self, client: Any, line: str, *, wrong: bool, throttled: bool = False,
                host: bytes | None = None) -> None:
        """Count a refused request from ``client``: ``line`` is logged if it opens a
        log window (it must not hold the token). ``wrong``: it presented a wrong
        token, which spends its address's budget (under ``host``: :meth:`budget`)."""
        address, now = self.budget(client, host), self._clock()
        opened = self.tally.opened_at
        if opened is not None and now - opened >= self.tally.window_s:
            self.flush()  # its timer did not run (no event loop): close it now
        if wrong:
            self.throttle.failed(address, now)
        if self.tally.note(address, now, throttled=throttled):
            log.warning("%s; more refusals in the next %.0f s are summed up in one line",
                        line, self.tally.window_s)
            self._arm()

    def flush(self) -> None:
        """Write the open window's summary line (if it counted anything) and close it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        line = self.tally.close(self._clock())
        if line is not None:
            log.warning("%s", line)

    def _arm(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a direct call): the next window's opening flushes
            return
        if self._timer is None:
            self._timer = loop.call_later(self.tally.window_s, self.flush)


def _address(client: Any) -> str:
    return address_key(client[0]) if client else ""


def _shown(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"
