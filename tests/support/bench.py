"""Running the benchmark harness's CLI from tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sidecar.testkit.sidecars import REPO


def bench_render(raw: Path, report: Path) -> subprocess.CompletedProcess[str]:
    """``python -m bench --render RAW --output REPORT``: no run, only the report."""
    return subprocess.run(
        [sys.executable, "-m", "bench", "--render", str(raw), "--output", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
