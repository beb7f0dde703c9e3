"""The fleet producer's give-ups, on a real broker (found in review).

An event older than the journal's retention that the fleet topic never received is
still produced when Kafka takes it.

The fleet producer gave up every event older than ``SIDECAR_JOURNAL_RETENTION_HOURS``
before trying it: a sidecar stopped for longer than the retention (a weekend, an
outage of the node) came back with events it had journaled but not produced, and the
fleet topic, with Kafka working, never got them. A webhook gives a delivery up by age
only at its first failure; the producer now does the same.

An event Kafka can never take (larger than the producer's ``message.max.bytes``: an
assignment of tens of thousands of partitions) made ``produce()`` raise, which ended the
producer's task without a word: the cursor stopped there for good, every later event
stayed unproduced, and retention held the journal for ever. It is now given up at once,
counted and logged, and the events around it are produced. The topic's own limit
(``max.message.bytes``) is checked by the broker against a record batch, not an event:
small events that shared a refused batch were given up with it. They are now tried one
by one.

A producer that librdkafka failed for good (a fatal error: fenced) is replaced, and the
events it refused are produced by the new one.

Real broker, real SQLite journal, the daemon's own wiring (``build_components``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from structlog.testing import capture_logs

from sidecar.components import Components, build_components
from sidecar.fleet import CURSOR
from sidecar.model import Event, EventDraft, EventType, PartitionOffset
from sidecar.settings import Settings
from sidecar.testkit.events import draft
from tests.support.kafka import create_topic, read_topic, unique

Counts = dict[str, float]


def _small(journaled_at: float | None) -> EventDraft:
    return draft(partitions=(PartitionOffset("t", 0, 1),), time=journaled_at)


def _produce_all(
    kafka_bootstrap: str,
    topic: str,
    data_dir: Path,
    drafts: list[EventDraft],
    fault: Callable[[Components], None] = lambda parts: None,
) -> tuple[list[str], Counts, list[dict[str, Any]]]:
    """Journal ``drafts`` and run the fleet producer until its cursor passed them all;
    returns the journaled ids, the fleet counters and the producer's log lines.
    ``fault`` may break the wiring before the producer starts."""
    ids: list[str] = []
    counts: Counts = {}
    logs: list[dict[str, Any]] = []

    async def main() -> None:
        parts = build_components(
            Settings(
                bootstrap_servers=kafka_bootstrap,
                group_id=unique("fleet"),
                topics=("t",),
                data_dir=data_dir,
                events_topic=topic,
                journal_retention_hours=1.0,
            )
        )
        try:
            ids.extend(parts.journal.append(d).id for d in drafts)
            assert parts.fleet is not None
            fault(parts)
            with capture_logs() as captured:
                parts.fleet.start()
                for _ in range(300):
                    if parts.journal.mark(CURSOR) == len(drafts):
                        break
                    await asyncio.sleep(0.05)
            logs.extend(dict(line) for line in captured)
            assert parts.journal.mark(CURSOR) == len(drafts), captured
            for outcome in ("delivered", "failed", "gave_up"):
                counts[outcome] = parts.metrics.fleet_produced.labels(outcome)._value.get()
        finally:
            await parts.dispatcher.close()
            if parts.fleet is not None:
                await parts.fleet.close(timeout=5)
            parts.journal.close()

    asyncio.run(main())
    return ids, counts, logs


def _read(kafka_bootstrap: str, topic: str, expected: int) -> list[str]:
    records = read_topic(kafka_bootstrap, topic, expected, 30)
    return [json.loads(record.value() or b"{}")["id"] for record in records]


def test_events_older_than_the_retention_are_produced_when_kafka_takes_them(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, 1)
    long_ago = time.time() - 3 * 3600
    drafts = [_small(long_ago), _small(long_ago), _small(None)]
    ids, counts, _ = _produce_all(kafka_bootstrap, topic, tmp_path, drafts)
    assert counts == {"delivered": 3, "failed": 0, "gave_up": 0}
    received = _read(kafka_bootstrap, topic, 3)
    assert received == ids, "the events past the retention never reached the fleet topic"


def test_an_event_kafka_can_never_take_is_given_up_and_the_rest_produced(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, 1)
    huge = draft(partitions=tuple(PartitionOffset("t", p, p) for p in range(40_000)))
    ids, counts, logs = _produce_all(
        kafka_bootstrap, topic, tmp_path, [_small(None), huge, _small(None)]
    )
    assert counts == {"delivered": 2, "failed": 0, "gave_up": 1}
    given = [line for line in logs if line["event"] == "fleet events given up"]
    assert [(g["first_sequence"], g["events"], g["reasons"]) for g in given] == [
        (2, 1, ["never deliverable: MSG_SIZE_TOO_LARGE"])
    ], logs
    assert _read(kafka_bootstrap, topic, 2) == [ids[0], ids[2]]


@pytest.mark.parametrize("journaled", ["now", "past the retention"])
def test_a_batch_the_topic_refuses_as_too_large_is_produced_event_by_event(
    kafka_bootstrap: str, tmp_path: Path, journaled: str
) -> None:
    """The broker measures a record batch against the topic's ``max.message.bytes``, and
    librdkafka fails every event of a batch it refused (the Java producer splits it).
    Events that each fit were given up as never deliverable when they shared a batch
    with a large one, or only with each other. Each is now tried on its own: those that
    fit are produced, and only an event the topic refuses by itself is given up; also
    events older than the retention (a review found those given up by age before their
    one-by-one attempt: the batch's refusal counted as their failed attempt)."""
    topic = create_topic(kafka_bootstrap, 1, config={"max.message.bytes": "6000"})

    at = None if journaled == "now" else time.time() - 3 * 3600  # the retention is 1 h

    def sized(partitions: int) -> EventDraft:
        offsets = tuple(PartitionOffset("t", p, p) for p in range(partitions))
        return draft(partitions=offsets, time=at)

    sizes = [40, 40, 40, 400, 40]  # partitions: about 2 kB per event, and 17 kB
    ids, counts, logs = _produce_all(kafka_bootstrap, topic, tmp_path, [sized(n) for n in sizes])
    given = [line for line in logs if line["event"] == "fleet events given up"]
    assert [(g["first_sequence"], g["events"], g["reasons"]) for g in given] == [
        (4, 1, ["never deliverable: MSG_SIZE_TOO_LARGE"])
    ], logs
    assert counts["gave_up"] == 1
    assert _read(kafka_bootstrap, topic, 4) == [ids[0], ids[1], ids[2], ids[4]]


def test_an_unexpected_error_does_not_end_the_producer(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Any other error in the producer's loop (here the journal unreadable once, as a
    disk hiccup makes it) ended its task without a word, with the same effect as the
    oversized event: no later event ever reached the fleet topic."""
    topic = create_topic(kafka_bootstrap, 1)

    def unreadable_once(parts: Components) -> None:
        journal = parts.journal
        read = journal.events_after
        calls = 0

        def failing(
            sequence: int, limit: int, types: tuple[EventType, ...] | None = None
        ) -> list[Event]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise sqlite3.OperationalError("disk I/O error")
            return read(sequence, limit, types)

        journal.events_after = failing  # type: ignore[method-assign]

    ids, counts, logs = _produce_all(
        kafka_bootstrap, topic, tmp_path, [_small(None), _small(None)], unreadable_once
    )
    assert counts == {"delivered": 2, "failed": 0, "gave_up": 0}
    assert [line["event"] for line in logs][:1] == ["fleet producer failed; trying again"]
    assert _read(kafka_bootstrap, topic, 2) == ids


class _FencedProducer:
    """A real producer that librdkafka has failed for good (as an idempotent producer
    whose producer id was fenced): from its first ``produce`` on, every call is refused
    with the fatal error, as librdkafka refuses them. Everything else is the real one."""

    def __init__(self, real: Any, *, flagged: bool) -> None:
        self._real = real
        self._flagged = flagged
        self.refused = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.refused += 1
        # librdkafka refuses a failed producer's calls with the code _FATAL; the error
        # that failed it carries fatal() (either is the end of that producer).
        fatal = KafkaError(KafkaError._FATAL, "injected: producer fenced", fatal=self._flagged)
        raise KafkaException(fatal)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.mark.parametrize("flagged", [False, True], ids=["code", "fatal-flag"])
def test_a_producer_failed_for_good_is_replaced_and_nothing_is_lost(
    kafka_bootstrap: str, tmp_path: Path, flagged: bool
) -> None:
    """librdkafka's fatal error ends an idempotent producer for good: it refuses every
    later event. The fleet producer starts a new one and produces, from the cursor,
    every event; none is given up or counted as failed for it."""
    topic = create_topic(kafka_bootstrap, 1)
    fenced: list[_FencedProducer] = []

    def fence(parts: Components) -> None:
        assert parts.fleet is not None
        fenced.append(_FencedProducer(parts.fleet._producer, flagged=flagged))
        parts.fleet._producer = fenced[0]  # type: ignore[assignment]

    drafts = [_small(None), _small(None), _small(None)]
    ids, counts, logs = _produce_all(kafka_bootstrap, topic, tmp_path, drafts, fence)
    assert fenced[0].refused == 1  # never used again once replaced
    replaced = [line for line in logs if line["event"].startswith("fleet producer failed")]
    assert [(line["event"], line["error"]) for line in replaced] == [
        ("fleet producer failed for good; starting a new one", "injected: producer fenced")
    ], logs
    assert counts == {"delivered": 3, "failed": 0, "gave_up": 0}
    assert _read(kafka_bootstrap, topic, 3) == ids
