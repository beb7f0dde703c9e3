"""Ports the testkit hands out come from below the kernel's ephemeral range: a port from
that range, released by the testkit, can be taken by any outgoing connection before the
process meant to listen on it binds it (a bench run lost a 30-member group that way)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sidecar.testkit import sidecars
from sidecar.testkit.sidecars import RESERVED_PORTS, ephemeral_low, free_port, port_band


@pytest.mark.parametrize(
    ("ephemeral", "band"),
    [
        ("32768\t60999", range(20_000, 32_768)),  # Linux's default
        ("49152 65535", range(20_000, 32_768)),  # IANA's: nothing above 32767 either
        ("21500 60999", range(20_000, 21_500)),  # still 1,000 ports below it
        ("20500 60999", range(1_024, 20_500)),  # fewer: from 1024
        ("10000 65535", range(1_024, 10_000)),
        ("1024 65535", range(1_024, 1_024)),  # nothing left: free_port refuses
        ("garbage", range(20_000, 32_768)),  # unreadable: the default range
    ],
)
def test_the_band_lies_below_the_ephemeral_range(
    tmp_path: Path, ephemeral: str, band: range
) -> None:
    source = tmp_path / "ip_local_port_range"
    source.write_text(ephemeral + "\n")
    assert port_band(ephemeral_low(source)) == band
    pair = port_band(ephemeral_low(source), consecutive=2)
    assert pair.start == band.start and (not pair or pair[-1] + 1 < ephemeral_low(source))


def test_ports_are_free_distinct_and_never_reserved() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports), "a port was handed out twice"
    assert all(port in port_band(ephemeral_low()) for port in ports)
    assert not set(ports) & RESERVED_PORTS
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))  # free indeed


def test_consecutive_ports() -> None:
    first = free_port(2)
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", first))
        b.bind(("127.0.0.1", first + 1))


def test_reserved_ports_are_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    reserved = min(RESERVED_PORTS)
    monkeypatch.setattr(sidecars, "port_band", lambda *_: range(reserved, reserved + 1))
    with pytest.raises(RuntimeError, match="no 1 consecutive free port"):
        free_port()


def test_a_port_in_use_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # in use, and never handed out by the testkit
        taken = held.getsockname()[1]
        monkeypatch.setattr(sidecars, "port_band", lambda *_: range(taken, taken + 1))
        with pytest.raises(RuntimeError, match="no 1 consecutive free port"):
            free_port()


def test_no_band_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    source = tmp_path / "ip_local_port_range"
    source.write_text("1024 65535\n")
    monkeypatch.setattr(sidecars, "_EPHEMERAL", source)
    monkeypatch.setattr(sidecars, "ephemeral_low", lambda: ephemeral_low(source))
    with pytest.raises(RuntimeError, match="no ports below the kernel's ephemeral range"):
        free_port()
