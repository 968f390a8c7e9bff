"""Which addresses and host names keep a broker to this machine.

The rule of the API (:mod:`broker.flags`): a broker without a bearer token
listens on loopback only, unless told the network is trusted. Per request,
without a token, the API answers only under a loopback host name or the one
the broker advertises (:mod:`broker.http.gate`), and the dashboard
(:mod:`broker.http.ui`) loopback clients only, under a loopback host name.

A module of its own because it is the one definition of "this machine" that
three places of the edge share: the listen check at start-up
(:mod:`broker.http.server`, :mod:`broker.flags`), the API's gate and the
dashboard's. Pure (no I/O, no starlette), so none of them imports another's
machinery for it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` (an address or ``localhost``) keeps the broker
    to this machine; also whether a client at address ``host`` is on it, and
    whether a host name (as :func:`host_name` gives it) names it: ``localhost``
    (any case, also ``localhost.``), ``127.0.0.0/8``, ``::1``, ``::ffff:127.0.0.1``."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # (not is_loopback itself before 3.13)
    return address.is_loopback


def host_name(host_header: str) -> str:
    """The host name of a ``Host`` header's value, lower case (``[::1]:8765`` ->
    ``::1``, ``LocalHost:80`` -> ``localhost``); "" for one that does not parse."""
    try:
        return (urlsplit(f"//{host_header}").hostname or "").lower()
    except ValueError:
        return ""
