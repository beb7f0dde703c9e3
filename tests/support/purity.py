"""A pytest plugin that keeps a test tier pure: no socket, no process, no sleep.

tests/unit/conftest.py imports its hooks, so they run for the tests of that directory only.
While a test (its set-up, call and tear-down) runs, an audit hook (PEP 578) refuses:

- a network socket (``AF_INET``/``AF_INET6``), a connect or bind, a name lookup;
- a process: ``subprocess``, ``os.system``, ``os.fork``/``forkpty``, ``os.exec*``,
  ``os.posix_spawn``, ``os.spawn*``, ``pty.spawn``, ``multiprocessing``;
- a sleep for a positive time: ``time.sleep`` and ``asyncio.sleep``, replaced while the
  test runs (Python 3.11 has no audit event for a sleep); a sleep of 0 only yields.

The refused call raises :class:`ImpureTest` and the test fails even if the code under test
catches it. asyncio's self-pipe (a local ``socketpair``, no network) is allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any, SupportsIndex

import pytest

_NETWORK_FAMILIES = {int(socket.AF_INET), int(socket.AF_INET6)}
_PROCESS_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "pty.spawn",
}
_LOOKUP_EVENTS = {
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
    "socket.getnameinfo",
}


class ImpureTest(Exception):
    """A pure test opened a socket, started a process or slept."""


class _Guard:
    def __init__(self) -> None:
        self.active = False
        self.violations: list[str] = []
        self._lock = threading.Lock()

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        found = self._violation(event, args)
        if found is None:
            return
        with self._lock:
            self.violations.append(found)
        raise ImpureTest(f"{found} in a pure test (tests/unit): move the test to its tier")

    @staticmethod
    def _violation(event: str, args: tuple[Any, ...]) -> str | None:
        if event in _PROCESS_EVENTS:
            return f"a process ({event})"
        if event in _LOOKUP_EVENTS:
            return f"a name lookup ({event} {args[0]!r})"
        if event == "socket.__new__" and len(args) > 1 and args[1] in _NETWORK_FAMILIES:
            return "a network socket"
        if event in ("socket.connect", "socket.bind"):
            return f"a {event.removeprefix('socket.')} to {args[1]!r}"
        if event == "sleep" and args and args[0] > 0:
            return f"a sleep of {args[0]} s"
        return None


_GUARD = _Guard()
_ASYNCIO_SLEEP = asyncio.sleep
_TIME_SLEEP = time.sleep


async def _guarded_asyncio_sleep(delay: float, result: Any = None) -> Any:
    _GUARD.audit("sleep", (delay,))
    return await _ASYNCIO_SLEEP(delay, result)


def _guarded_time_sleep(delay: float | SupportsIndex) -> None:
    _GUARD.audit("sleep", (delay,))
    _TIME_SLEEP(delay)


sys.addaudithook(_GUARD.audit)  # an audit hook cannot be removed: it acts only when active


@contextlib.contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    _GUARD.violations.clear()
    _GUARD.active = True
    asyncio.sleep = asyncio.tasks.sleep = _guarded_asyncio_sleep
    time.sleep = _guarded_time_sleep
    try:
        yield
    finally:
        _GUARD.active = False
        asyncio.sleep = asyncio.tasks.sleep = _ASYNCIO_SLEEP
        time.sleep = _TIME_SLEEP
        if _GUARD.violations:
            seen = "; ".join(dict.fromkeys(_GUARD.violations))
            pytest.fail(f"{item.nodeid} is not pure: {seen}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _guarded(item):
        return (yield)
