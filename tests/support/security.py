"""The security checks' helpers: run the real command with a clean environment.

A conftest plugin: tests/security/conftest.py takes its ``run_command`` fixture."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.sidecars import COMMAND, REPO

# Settings that pass validation without a broker (start-up refusals happen before any
# connection; 127.0.0.1:9 resolves and nothing listens there).
OFFLINE = {
    "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "SIDECAR_GROUP_ID": "security",
    "SIDECAR_TOPICS": "security",
    "SIDECAR_API_PORT": "0",
    "SIDECAR_ADMIN_PORT": "0",
    "SIDECAR_LOG_FORMAT": "json",
}

Run = Callable[[dict[str, str]], subprocess.CompletedProcess[str]]


@pytest.fixture
def run_command(tmp_path: Path) -> Run:
    """``rebalance-sidecar run`` with only the given SIDECAR_* settings; bounded in time.

    A refusal must come at once: a process still running after 30 s was not refused.
    """

    def run(settings: dict[str, str]) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
        env.update({"SIDECAR_DATA_DIR": str(tmp_path / "data"), **OFFLINE, **settings})
        return subprocess.run(
            COMMAND,
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )

    return run
