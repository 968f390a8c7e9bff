"""Which addresses and host names keep a broker to this machine.

The rule of the API (:mod:`broker.config`): a broker without a bearer token
listens on loopback only, unless told the network is trusted. The dashboard
(:mod:`broker.http.ui`) keeps the same rule per request: without a token it
answers loopback clients only, and only under a loopback host name.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` (an address or ``localhost``) keeps the broker
    to this machine; also whether a client at address ``host`` is on it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The host name of a ``Host`` header's value (``[::1]:8765`` -> ``::1``); ""
    for one that does not parse."""
    try:
        return (urlsplit(f"//{host_header}").hostname or "").lower()
    except ValueError:
        return ""
