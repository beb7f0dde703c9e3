"""The guard of the pure tier (tests/support/purity.py) refuses what it says it refuses."""

from __future__ import annotations

import socket

import pytest

from tests.support.purity import ImpureTest, _Guard


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("subprocess.Popen", ("python", ["python"], None, None)),
        ("os.fork", ()),
        ("os.posix_spawn", ("/bin/true", [], {})),
        ("socket.__new__", (None, int(socket.AF_INET), int(socket.SOCK_STREAM), 0)),
        ("socket.__new__", (None, int(socket.AF_INET6), int(socket.SOCK_DGRAM), 0)),
        ("socket.connect", (None, ("127.0.0.1", 9))),
        ("socket.bind", (None, ("127.0.0.1", 0))),
        ("socket.getaddrinfo", ("localhost", 80, 0, 0, 0)),
        ("sleep", (0.01,)),
    ],
)
def test_the_guard_refuses(event: str, args: tuple[object, ...]) -> None:
    guard = _Guard()
    guard.active = True
    with pytest.raises(ImpureTest):
        guard.audit(event, args)
    assert len(guard.violations) == 1


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("socket.__new__", (None, int(socket.AF_UNIX), int(socket.SOCK_STREAM), 0)),  # asyncio
        ("sleep", (0,)),
        ("open", ("/tmp/x", "r", 0)),
        ("sqlite3.connect", ("/tmp/journal.db",)),
    ],
)
def test_the_guard_lets_through(event: str, args: tuple[object, ...]) -> None:
    guard = _Guard()
    guard.active = True
    guard.audit(event, args)
    assert guard.violations == []


def test_an_inactive_guard_refuses_nothing() -> None:
    guard = _Guard()
    guard.audit("subprocess.Popen", ("python", ["python"], None, None))
    assert guard.violations == []
