"""Log lines: JSON off a terminal (containers), a readable colour console on one."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from tests.support.sidecars import REPO

# What the sidecar does: configure once, then log from structlog and from a standard-library
# logger (uvicorn's), with a secret among the values.
LOGGING = """
import logging, sys
import structlog
from sidecar import logs
logs.configure("info", sys.argv[1])
structlog.get_logger("sidecar.test").info("hello", token="s3cret", partitions=3)
logging.getLogger("uvicorn.error").warning("from %s", "uvicorn")
"""
ANSI = "\x1b["


def _on_a_terminal(fmt: str) -> str:
    """Run with stdout and stderr on a pseudo-terminal, as in an interactive shell."""
    controller, terminal = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-c", LOGGING, fmt],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        cwd=REPO,
        close_fds=True,
    )
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    assert child.wait(timeout=30) == 0, output
    return output.decode()


def _on_a_pipe(fmt: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", LOGGING, fmt], capture_output=True, text=True, cwd=REPO, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_auto_is_colour_console_on_a_terminal() -> None:
    output = _on_a_terminal("auto")
    assert ANSI in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "hello" in lines[0] and "partitions" in lines[0]
    assert "from uvicorn" in lines[1]  # standard-library loggers get the same format
    assert not lines[0].lstrip().startswith("{")
    assert "s3cret" not in output


def test_auto_is_json_lines_off_a_terminal() -> None:
    first, second = (json.loads(line) for line in _on_a_pipe("auto").splitlines())
    assert first["event"] == "hello" and first["level"] == "info"
    assert first["partitions"] == 3 and first["token"] == "[redacted]"
    assert first["logger"] == "sidecar.test" and first["timestamp"].endswith("Z")
    assert second == {**second, "event": "from uvicorn", "logger": "uvicorn.error"}


@pytest.mark.parametrize("terminal", [True, False])
def test_json_and_console_are_what_they_say(terminal: bool) -> None:
    run = _on_a_terminal if terminal else _on_a_pipe
    json_lines = [line for line in run("json").splitlines() if line.strip()]
    assert [json.loads(line)["event"] for line in json_lines] == ["hello", "from uvicorn"]
    console = run("console")
    assert "hello" in console and not console.lstrip().startswith("{")
    # Colour only where a terminal shows it: a file or a pipe gets plain text.
    assert (ANSI in console) is terminal
