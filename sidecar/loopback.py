"""What counts as this machine: one rule for a listener's configured address
(``sidecar.settings``), a request's peer and the name in its ``Host`` (``sidecar.web.access``).

Loopback is ``localhost``, a loopback IP address (an IPv4-mapped IPv6 one included, as a
dual-stack socket reports an IPv4 peer), or an IPv4 address in the shorter forms the
resolver also takes (``127.1``, ``0x7f.0.0.1``, ``2130706433``): an address the sidecar
accepts to listen on is one its clients may then write in their URLs.
"""

from __future__ import annotations

import ipaddress
import re
import socket

# inet_aton's digits and dots only (it also takes "127.0.0.1 anything", which the
# resolver, since glibc 2.32, does not).
_IPV4_SHORT = re.compile(r"[0-9A-Fa-fXx.]{1,40}")


def is_loopback(host: str | None) -> bool:
    """Is ``host`` (a name or an address, without brackets or port) this machine?"""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return address.ipv4_mapped.is_loopback
        return address.is_loopback
    if not _IPV4_SHORT.fullmatch(host):
        return False
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host)).is_loopback
    except OSError:
        return False
