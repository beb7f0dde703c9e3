"""Group members that are not sidecars, for tests that mix clients in one group."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer


class PlainConsumer(threading.Thread):
    """A bare confluent-kafka consumer on its own thread: joins, holds, leaves on request."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, client_id: str, protocol: str = "classic"
    ) -> None:
        super().__init__(name=client_id, daemon=True)
        self.config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "group.protocol": protocol,
            "enable.auto.commit": False,
        }
        if protocol == "classic":  # KIP-848 groups take these from the broker
            self.config.update(
                {
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                    "partition.assignment.strategy": "range",
                }
            )
        self.topic = topic
        self.leave = threading.Event()

    def run(self) -> None:
        consumer = Consumer(self.config)
        consumer.subscribe([self.topic])
        while not self.leave.is_set():
            consumer.poll(0.2)
        consumer.close()


@pytest.fixture
def plain_consumers() -> Iterator[list[PlainConsumer]]:
    """Append started consumers; each leaves its group at the end of the test."""
    started: list[PlainConsumer] = []
    yield started
    for consumer in started:
        consumer.leave.set()
    for consumer in started:
        consumer.join(30)


def member_settings(kafka_bootstrap: str, group_id: str, topic: str, data: Path) -> dict[str, str]:
    """The environment of a sidecar member that notices a lost peer within seconds."""
    return {
        "SIDECAR_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SIDECAR_GROUP_ID": group_id,
        "SIDECAR_TOPICS": topic,
        "SIDECAR_DATA_DIR": str(data),
        "SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
    }
