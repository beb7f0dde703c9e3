"""An event older than the journal's retention that the fleet topic never received is
still produced when Kafka takes it (found in review).

The fleet producer gave up every event older than ``SIDECAR_JOURNAL_RETENTION_HOURS``
before trying it: a sidecar stopped for longer than the retention (a weekend, an
outage of the node) came back with events it had journaled but not produced, and the
fleet topic, with Kafka working, never got them. A webhook gives a delivery up by age
only at its first failure; the producer now does the same.

Real broker, real SQLite journal, the daemon's own wiring (``build_components``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from confluent_kafka import Consumer

from sidecar.components import build_components
from sidecar.fleet import CURSOR
from sidecar.model import PartitionOffset
from sidecar.settings import Settings
from sidecar.testkit.events import draft
from tests.support.kafka import create_topic, unique


def test_events_older_than_the_retention_are_produced_when_kafka_takes_them(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    fleet_topic = create_topic(kafka_bootstrap, 1)
    long_ago = time.time() - 3 * 3600
    ids: list[str] = []

    async def main() -> None:
        parts = build_components(
            Settings(
                bootstrap_servers=kafka_bootstrap,
                group_id=unique("aged"),
                topics=("t",),
                data_dir=tmp_path,
                events_topic=fleet_topic,
                journal_retention_hours=1.0,
            )
        )
        try:
            for journaled_at in (long_ago, long_ago, None):
                event = parts.journal.append(
                    draft(partitions=(PartitionOffset("t", 0, 1),), time=journaled_at)
                )
                ids.append(event.id)
            assert parts.fleet is not None
            parts.fleet.start()
            for _ in range(300):
                if parts.journal.mark(CURSOR) == 3:
                    break
                await asyncio.sleep(0.05)
            assert parts.journal.mark(CURSOR) == 3
            assert parts.metrics.fleet_produced.labels("gave_up")._value.get() == 0
            assert parts.metrics.fleet_produced.labels("delivered")._value.get() == 3
        finally:
            await parts.dispatcher.close()
            if parts.fleet is not None:
                await parts.fleet.close(timeout=5)
            parts.journal.close()

    asyncio.run(main())

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique("aged-reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([fleet_topic])
        received: list[str] = []
        deadline = time.monotonic() + 30
        while len(received) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                value = message.value()
                assert value is not None
                received.append(json.loads(value)["id"])
    finally:
        consumer.close()
    assert received == ids, "the events past the retention never reached the fleet topic"
