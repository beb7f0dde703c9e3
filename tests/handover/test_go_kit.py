"""The Go kit's own tests (deploy/example-app/go/subscriber: real HTTP, the reference Go
Standard Webhooks library), run with ``go test`` so the suite covers both languages."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from bench.handover.members import REPO


@pytest.mark.timeout(600)
def test_go_kit() -> None:
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is required (the Go reference app and its kit)")
    done = subprocess.run(
        [go, "test", "./..."],
        cwd=REPO / "deploy" / "example-app" / "go",
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ok" in done.stdout
