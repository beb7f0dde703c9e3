"""Ports the testkit hands out come from below the kernel's ephemeral range: a port from
that range, released by the testkit, can be taken by any outgoing connection before the
process meant to listen on it binds it (a bench run lost a 30-member group that way)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sidecar.testkit.sidecars import free_port


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports), "a port was handed out twice"
    assert all(1024 < port < _ephemeral_low() for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))  # free indeed


def test_consecutive_ports_and_ports_to_avoid() -> None:
    first = free_port(2)
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", first))
        b.bind(("127.0.0.1", first + 1))
    avoided = frozenset(range(20_000, 31_000))
    assert free_port(avoid=avoided) not in avoided


def test_a_bound_port_is_never_handed_out() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        taken = held.getsockname()[1]
        everything_else = frozenset(range(20_000, 32_768)) - {taken}
        with pytest.raises(RuntimeError, match="no 1 consecutive free port"):
            free_port(avoid=everything_else)
