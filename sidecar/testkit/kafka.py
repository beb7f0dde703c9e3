"""Small helpers around a real broker: topics, committed offsets, bare consumers."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(
    bootstrap: str, partitions: int, name: str | None = None, config: dict[str, str] | None = None
) -> str:
    """A new topic (``config``: topic configs such as ``max.message.bytes``)."""
    name = name or unique("topic")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(name, partitions, 1, config=config or {})
    futures = admin.create_topics([new], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)
    # Wait until metadata shows every partition with a leader.
    for _ in range(100):
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic and topic.error is None and len(topic.partitions) == partitions:
            break
    return name


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read by an independent client that never joins."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=15
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def read_topic(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[Message]:
    """The first ``count`` records of ``topic`` from its start (fewer if ``timeout`` runs out).

    Read by a throwaway consumer of a group of its own that commits nothing.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("topic-reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    records: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                records.append(message)
    finally:
        consumer.close()
    return records
