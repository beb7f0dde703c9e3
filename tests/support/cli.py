"""The command as users run it: ``python -m sidecar`` with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.sidecars import REPO

BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
GOOD = {
    "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "SIDECAR_GROUP_ID": "g",
    "SIDECAR_TOPICS": "t",
    # Should a refusal regress, the sidecar that starts takes no fixed port.
    "SIDECAR_API_PORT": "0",
    "SIDECAR_ADMIN_PORT": "0",  # not the default 8081: tests run side by side
}


def run(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        env={**BASE_ENV, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
