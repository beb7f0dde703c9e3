"""The pure parts of ``sidecar.group_calls`` (the ``Consumer`` calls themselves are
exercised on a real broker by the integration tests)."""

from __future__ import annotations

from confluent_kafka import OFFSET_INVALID
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.group_calls import positions
from sidecar.model import OffsetStatus, PartitionOffset


def test_partitions_are_assigned_at_the_committed_offsets_that_were_read() -> None:
    given = [KafkaTopicPartition("t", p) for p in range(4)]
    read = (
        PartitionOffset("t", 0, 42, OffsetStatus.COMMITTED),
        PartitionOffset("t", 1, None, OffsetStatus.NONE),
        PartitionOffset("t", 2, None, OffsetStatus.UNKNOWN),
        PartitionOffset("t", 3, 0, OffsetStatus.COMMITTED),
    )
    at = positions(given, read)
    assert [(p.topic, p.partition, p.offset) for p in at] == [
        ("t", 0, 42),
        ("t", 1, OFFSET_INVALID),  # librdkafka looks it up (nothing committed: the reset)
        ("t", 2, OFFSET_INVALID),  # unreadable in time: librdkafka keeps trying
        ("t", 3, 0),
    ]
    assert positions(given, ()) == given
