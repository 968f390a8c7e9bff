"""Who is on the other end: client addresses as the limits count them, and the
trusted proxies whose forwarded headers are believed.

The connection limits (:mod:`broker.http.admission`) and the wrong-token
throttle (:mod:`broker.http.throttle`) count per client address.
:func:`address_key` is that address: an IPv4 address as it is, an IPv6
address by its /64 network (one host commonly holds a whole /64, so counting
its addresses one by one would let it rotate past every limit).

:class:`TrustedProxies` is the ``--trusted-proxies`` setting: the addresses
and networks of the proxies in front of the broker. uvicorn's proxy-headers
middleware then takes a request's scheme from ``X-Forwarded-Proto`` and its
client address from ``X-Forwarded-For`` when, and only when, the connection
comes from one of them (so the dashboard's cookie gets ``Secure`` behind a
TLS proxy, and the throttle counts the real client).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=4096)
def address_key(host: str) -> str:
    """The address ``host`` is counted under: itself for IPv4 (and for anything
    that is not an IP address, such as a unix socket's ""), its /64 network
    (``2001:db8:1:2::/64``) for IPv6, the IPv4 address for an IPv4-mapped one."""
    if ":" not in host:
        return host
    try:
        ip = ipaddress.IPv6Address(host.strip("[]").partition("%")[0])
    except ValueError:
        return host
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


def parse_networks(entries: str | tuple[str, ...] | list[str]) -> tuple[IPNetwork, ...]:
    """The networks of a comma-separated list (or a sequence) of IP addresses and
    networks (``10.0.0.5``, ``10.1.0.0/16``, ``fd00::/8``); an address is its own
    network. Raises ``ValueError`` naming the first entry that is neither (``*``
    included: trusting every peer would let any client forge its address)."""
    items = entries.split(",") if isinstance(entries, str) else list(entries)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            shown = item if len(item) <= 60 else item[:60] + "..."
            raise ValueError(f"{shown!r} is not an IP address or network (give the "
                             "proxies' addresses, such as 10.0.0.5 or 10.0.0.0/24)") from None
    return tuple(out)


@dataclass(frozen=True)
class TrustedProxies:
    """The proxies whose ``X-Forwarded-*`` headers the broker believes (none by default)."""

    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: str | tuple[str, ...] | list[str]) -> TrustedProxies:
        """From ``--trusted-proxies``' value; ``ValueError`` for a bad entry."""
        return cls(parse_networks(entries))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, host: object) -> bool:
        """Whether a peer at address ``host`` is one of the proxies."""
        if not self.networks or not isinstance(host, str):
            return False
        try:
            ip = ipaddress.ip_address(host.strip("[]").partition("%")[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in net for net in self.networks)

    def as_strings(self) -> list[str]:
        """The networks as uvicorn's ``forwarded_allow_ips`` takes them."""
        return [str(net) for net in self.networks]


#: Trust no proxy (the default).
NO_PROXIES = TrustedProxies()
