"""``deploy/local/kafka.sh fresh``, the real script: the broker the test command and the
bench start for themselves starts from an empty data directory. The tests never delete
their topics; on a machine that ran the suite a few dozen times ~17,000 leftover partitions
ran the broker out of heap halfway through a run (``Connection refused`` in every test
after it). The previous broker log is kept for whoever investigates the last run."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

KAFKA_SH = Path(__file__).resolve().parents[2] / "deploy" / "local" / "kafka.sh"


def test_fresh_empties_a_stopped_brokers_data_and_keeps_its_last_log(tmp_path: Path) -> None:
    data = tmp_path / "kafka-run"
    (data / "logs" / "leftover-topic-0").mkdir(parents=True)
    (data / "log").mkdir()
    (data / "log" / "server.log").write_text("java.lang.OutOfMemoryError: Java heap space\n")
    # The port is taken, so the start after the reset stops before any JVM is launched.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(KAFKA_SH), "fresh"],
            env={**os.environ, "KAFKA_DATA_DIR": str(data), "KAFKA_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode != 0 and "already in use" in done.stderr, done.stderr
    assert not (data / "logs" / "leftover-topic-0").exists()
    kept = Path(f"{data}.last-log") / "server.log"
    assert kept.read_text().startswith("java.lang.OutOfMemoryError")
