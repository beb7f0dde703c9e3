"""A journal written by a newer release, met by the CLI: ``run`` and ``export`` refuse it
with one line and exit 2, and leave the file as it was."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from sidecar.journal import FILE_NAME, SCHEMA_VERSION, Journal


def newer_journal(data_dir: Path) -> Path:
    Journal(data_dir, durable=True).close()
    path = data_dir / FILE_NAME
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.close()
    return path


def test_run_and_export_refuse_a_newer_journal_with_one_line_and_exit_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = newer_journal(data)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    env = {
        **os.environ,
        "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "SIDECAR_GROUP_ID": "g",
        "SIDECAR_TOPICS": "t",
        "SIDECAR_DATA_DIR": str(data),
        "SIDECAR_API_PORT": "0",
        "SIDECAR_ADMIN_PORT": "-1",
    }
    for argv in (["run"], ["journal", "export", "--data-dir", str(data)]):
        done = subprocess.run(
            [sys.executable, "-m", "sidecar", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert f"its schema version is {SCHEMA_VERSION + 5}" in lines[0]
        assert "newer rebalance-sidecar" in lines[0]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
