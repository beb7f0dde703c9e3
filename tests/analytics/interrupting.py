"""Ctrl-C as a terminal sends it: SIGINT to a command's whole process group, once it has
reached a point, then the checks every interrupted analytics command must pass."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable


def interrupt_when(
    proc: subprocess.Popen[str],
    ready: Callable[[], bool],
    what: str,
    *,
    within: float,
    settle: float = 0.0,
    before: Callable[[], None] = lambda: None,
) -> str:
    """Once ``ready()`` (within ``within`` s, the command still running) and ``settle``
    s more, ``before()``, then SIGINT to ``proc``'s process group (started with
    ``start_new_session``). Returns its stderr, having checked: exit 130, no traceback,
    ``interrupted`` last."""
    try:
        deadline = time.monotonic() + within
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, what
            time.sleep(0.1)
        time.sleep(settle)
        before()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.splitlines()[-1] == "interrupted", err
    return err
