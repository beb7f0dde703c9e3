"""The CLI as a user starts it: real processes, their stderr in a file, a clean
environment (none of this shell's ``SIDECAR_*`` variables)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from tests.support.sidecars import REPO

CLI = [sys.executable, "-m", "sidecar"]


def clean_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env.update(variables)
    return env


def wait_for(
    check: Callable[[], bool],
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    timeout: float = 120,
) -> None:
    """Poll ``check`` with a generous deadline (the CI machine is loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"exited {process.returncode} before: {what}")
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


@contextlib.contextmanager
def started(
    args: list[str], log: Path, env: Mapping[str, str], cwd: Path = REPO
) -> Iterator[subprocess.Popen[bytes]]:
    """``rebalance-sidecar ARGS`` running, stderr and stdout in ``log``; stopped (SIGINT,
    then SIGKILL) at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*CLI, *args],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)


def text(log: Path) -> str:
    return log.read_bytes().decode(errors="replace")
