"""Java members of a group (the broker's own console consumer) and Kafka's own
``kafka-consumer-groups`` (ConsumerGroupCommand), from the broker's jars."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.sidecars import REPO

LIBS = REPO / ".cache" / "kafka" / "libs"
JAVA = ["java", "-Xmx160m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{LIBS}/*"]


@pytest.fixture
def java_consumer(tmp_path: Path) -> Iterator[Callable[[str, str, str, str, str], None]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(bootstrap: str, group: str, topic: str, client_id: str, protocol: str) -> None:
        log = (tmp_path / f"{client_id}.log").open("wb")
        if protocol == "classic":
            group_properties = [
                "partition.assignment.strategy=org.apache.kafka.clients.consumer.RangeAssignor",
                "session.timeout.ms=6000",
                "heartbeat.interval.ms=500",
            ]
        else:
            group_properties = [f"group.protocol={protocol}"]
        processes.append(
            subprocess.Popen(
                [
                    *JAVA,
                    "-Dlog4j2.level=ERROR",
                    "org.apache.kafka.tools.consumer.ConsoleConsumer",
                    "--bootstrap-server",
                    bootstrap,
                    "--topic",
                    topic,
                    "--group",
                    group,
                    "--consumer-property",
                    f"client.id={client_id}",
                    *(arg for p in group_properties for arg in ("--consumer-property", p)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )
        log.close()

    yield start
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def consumer_groups_cli(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """``kafka-consumer-groups.sh`` (ConsumerGroupCommand from the broker's jars), parsed."""
    done = subprocess.run(
        [
            *JAVA,
            "-Dlog4j2.level=ERROR",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header_at = next(i for i, line in enumerate(lines) if line.startswith("GROUP "))
    header = lines[header_at].split()
    rows = []
    for line in lines[header_at + 1 :]:
        cells = line.split()
        # COORDINATOR (ID) is two words: "host:port (id)"
        if "COORDINATOR" in header and len(cells) == len(header) + 1:
            cells[1:3] = [f"{cells[1]} {cells[2]}"]
        assert len(cells) == len(header), f"cannot parse {line!r} under {header}"
        rows.append(dict(zip(header, cells, strict=True)))
    return rows
