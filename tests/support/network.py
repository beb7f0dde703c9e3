"""This host's addresses, for tests that must reach a listener from off loopback."""

from __future__ import annotations

import ipaddress
import socket
import subprocess


def non_loopback_address() -> str | None:
    """An IPv4 address of this host that is not loopback (``hostname -I``), or ``None``."""
    try:
        listed = subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, timeout=10
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        listed = []
    for candidate in listed:
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        if address.version == 4 and not address.is_loopback and _bindable(candidate):
            return candidate
    return None


def _bindable(address: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True
