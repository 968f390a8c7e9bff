"""The API's gate: no web page may drive a broker (docs/security.md, "Web pages").

A browser lets any page it shows send requests to any address, the broker's on
loopback included: a ``fetch(..., {mode: "no-cors"})``, a form, an image. It
cannot read the answers of another origin, but a request that changes a queue
does its harm unread; and a page whose host name its owner points at
127.0.0.1 after it loaded (DNS rebinding) is same-origin with the broker and
reads every answer. So, before its token and its body, every API request
passes :meth:`Gate.check`:

* a broker without a token answers only a ``Host`` that names this machine
  (:func:`broker.http.hosts.is_loopback`) or the host of its advertised URL
  (any port, any case, with or without a trailing dot): a rebinding page
  sends its own host name. A broker with a token answers any ``Host`` (it is
  reached by many names, and a rebinding page has no token);
* no broker answers a request that a browser marks as sent by another site's
  or origin's page: ``Sec-Fetch-Site`` other than ``same-origin`` or ``none``
  (a person typing the URL), or an ``Origin`` (else a ``Referer``) that is not
  the broker's own: the dashboard's rule, :func:`broker.http.ui.auth.same_origin`,
  with the request's ``Host`` and the advertised URL's host[:port].

:class:`broker.http.app.App` adds the third rule: a state-changing request
must carry its route's content type (JSON or staged lines), which no page can
send without a CORS preflight, and the broker answers no preflight.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from broker.errors import Forbidden, shown
from broker.http.hosts import host_name, is_loopback
from broker.http.ui.auth import same_origin

log = logging.getLogger("osqueue.http")

#: ``Sec-Fetch-Site`` values of a request no other site's page sent: one of the
#: broker's own pages, or a person typing the URL.
_OWN_SITE = frozenset({b"same-origin", b"none"})
#: The headers the gate reads.
_READ = frozenset({b"host", b"sec-fetch-site", b"origin", b"referer"})
#: The ones only a browser sends: a request without any of them is a script's.
_BROWSER = frozenset({b"sec-fetch-site", b"origin", b"referer"})
#: How many accepted ``Host`` values a gate remembers (a broker is reached by few
#: names; a flood of other values is checked each time, never remembered).
KNOWN_HOSTS = 64
#: At most one refusal logged in so many seconds (a page can send thousands);
#: the next line counts the ones left out.
LOG_EVERY_S = 60.0


class Gate:
    """The check every API request passes first: :meth:`check` (see the module
    docstring). The dashboard has its own, stricter gate (:mod:`broker.http.ui.app`).

    ``advertise_url``: the broker's URL ("" if it has none). ``any_host``: answer
    every ``Host`` (a broker with a token); else loopback names and the advertised
    URL's host only. ``monotonic``: the clock (s) that spaces the log lines.
    """

    def __init__(self, advertise_url: str, *, any_host: bool,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        parts = urlsplit(advertise_url)
        self.advertise_url = advertise_url
        self.own_netloc = parts.netloc.lower()
        self.own_name = (parts.hostname or "").rstrip(".")
        self.any_host = any_host
        self._hosts: set[bytes] = set()  # Host values answered before
        self._monotonic = monotonic
        self._quiet_until = -float("inf")  # no refusal is logged before this
        self._unlogged = 0  # refusals not logged since the last line

    def __repr__(self) -> str:
        return f"Gate({self.advertise_url!r}, any_host={self.any_host})"

    def host_allowed(self, host: bytes | None) -> bool:
        """Whether a request with ``Host`` header ``host`` may be answered. A
        request without one (HTTP/1.0) may: every browser sends one."""
        if self.any_host or host is None or host in self._hosts:
            return True
        name = host_name(host.decode("latin-1"))
        if not (is_loopback(name) or (name != "" and name.rstrip(".") == self.own_name)):
            return False
        if len(self._hosts) < KNOWN_HOSTS:
            self._hosts.add(host)
        return True

    def check(self, scope: Any, headers: Mapping[bytes, bytes] | None = None) -> None:
        """Raise ``Forbidden`` (403) for the ASGI request ``scope`` if its ``Host``
        is not answered or a browser sent it for another site's or origin's page.
        A refusal is logged at warning with the method, path, client address and
        the header that refused it, at most one a :data:`LOG_EVERY_S` (the next
        line says how many were left out). A request without ``Origin``,
        ``Referer`` and ``Sec-Fetch-Site`` (a script) costs a pass over its
        header names and a set lookup.

        ``headers``: the request's headers as a mapping, each name's last value
        (``dict(scope["headers"])``, as the pass below reads them), if the caller
        has it: then a script's request with a ``Host`` answered before costs two
        lookups and no pass (a single-job push: ``bench/broker_bench.py``, push rows)."""
        if headers is not None and (self.any_host or headers.get(b"host") in self._hosts) \
                and _BROWSER.isdisjoint(headers):
            return
        host = site = origin = referer = None
        for name, value in scope["headers"]:
            if name in _READ:
                if name == b"host":
                    host = value
                elif name == b"sec-fetch-site":
                    site = value
                elif name == b"origin":
                    origin = value.decode("latin-1")
                else:
                    referer = value.decode("latin-1")
        if not self.host_allowed(host):
            seen = shown((host or b"").decode("latin-1"))
            self._log(scope, f"Host {seen} (it answers loopback names and its advertised "
                             f"URL's, {self.advertise_url or 'none'})")
            raise Forbidden(  # (not naming the advertised URL: a rebinding page reads this)
                f"this broker has no bearer token, so it answers only requests addressed "
                f"to this machine (127.0.0.1, localhost, [::1]) or to the host it "
                f"advertises, not to {seen}: use the URL it advertises (in its log), "
                "advertise the host you use (--advertise-url, start_broker(advertise_url=)), "
                "or give it a token")
        if site is not None and site not in _OWN_SITE:
            seen = shown(site.decode("latin-1"))
            self._log(scope, f"Sec-Fetch-Site {seen}")
            raise Forbidden(f"refused: a web page of another site sent this request "
                            f"(Sec-Fetch-Site {seen}); the API answers no other site's pages")
        if (origin is not None or referer is not None) and not same_origin(
                origin, referer, ((host or b"").decode("latin-1"), self.own_netloc)):
            seen = f"Origin {shown(origin)}" if origin is not None else \
                f"Referer {shown(referer)}"
            self._log(scope, seen)
            raise Forbidden(f"refused: a web page of another origin sent this request "
                            f"({seen}); the API answers no other origin's pages")

    def _log(self, scope: Any, why: str) -> None:
        now = self._monotonic()
        if now < self._quiet_until:
            self._unlogged += 1
            return
        left_out, self._unlogged, self._quiet_until = self._unlogged, 0, now + LOG_EVERY_S
        client = scope.get("client")
        log.warning("refused %s %s from %s: %s%s", scope["method"], shown(scope["path"]),
                    f"{client[0]}:{client[1]}" if client else "?", why,
                    f"; {left_out} more refused since the last such line" if left_out else "")
