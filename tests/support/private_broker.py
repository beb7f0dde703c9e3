"""A broker of a test's own (deploy/local/kafka.sh on free ports and its own data directory):
for tests that stop, pause or restart it, which the session's shared broker must never be."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.kafka import KAFKA_SH
from tests.support.sidecars import free_port


class PrivateBroker:
    def __init__(self, data_dir: Path) -> None:
        port = free_port()
        self.env = {
            **os.environ,
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
            "KAFKA_DATA_DIR": str(data_dir),
        }
        self.bootstrap = f"127.0.0.1:{port}"
        self.paused = False

    def run(self, command: str) -> None:
        done = subprocess.run(
            [str(KAFKA_SH), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        if command in ("pause", "resume"):
            self.paused = command == "pause"
