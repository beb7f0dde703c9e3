"""`python -m bench --render JSON`: a file that is not a bench run's raw JSON is a one-line
error with exit 2, never a traceback, and no report is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.testkit.sidecars import REPO


@pytest.mark.parametrize(
    "content",
    [None, "{", "[]", '{"sections": [{"x": 1}]}', '{"sections": [], "sizes": {}}'],
    ids=["missing", "not-json", "a-list", "bad-section", "no-machine"],
)
def test_render_refuses_what_is_not_a_run(tmp_path: Path, content: str | None) -> None:
    raw = tmp_path / "run.json"
    if content is not None:
        raw.write_text(content)
    report = tmp_path / "report.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--render", str(raw), "--output", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("--render: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not report.exists()
