"""Journal retention and the fleet topic's producer (found in review).

Pruning kept the events back to the lowest webhook cursor only, not back to the fleet
producer's (``meta.fleet_cursor``): with no webhook, or all of them caught up, a Kafka
outage longer than the retention (by count or age) dropped events that were never
produced to ``SIDECAR_EVENTS_TOPIC``. Retention now keeps them; the producer gives up an
event only once it is older than ``SIDECAR_JOURNAL_RETENTION_HOURS``, as a webhook gives
a delivery up after ``SIDECAR_WEBHOOK_MAX_AGE_MS``.

Real SQLite journal, the daemon's own wiring (``build_components``), and a real
producer aimed at a port where no broker listens (Kafka is down for the whole test).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from sidecar import fleet as fleet_module
from sidecar.components import Components, build_components
from sidecar.fleet import CURSOR
from sidecar.model import EventDraft, PartitionOffset
from sidecar.settings import Settings
from sidecar.testkit.events import draft


def _draft(journaled_at: float | None = None) -> EventDraft:
    return draft(partitions=(PartitionOffset("t", 0, 7),), time=journaled_at)


def _run(
    data_dir: Path,
    scenario: Callable[[Components], Coroutine[Any, Any, None]],
    **settings: Any,
) -> None:
    async def main() -> None:
        parts = build_components(
            Settings(
                bootstrap_servers="127.0.0.1:9",  # nothing listens: Kafka is down
                group_id="g",
                topics=("t",),
                data_dir=data_dir,
                **settings,
            )
        )
        try:
            await scenario(parts)
        finally:
            await parts.dispatcher.close()
            if parts.fleet is not None:
                await parts.fleet.close(timeout=0.2)  # nothing can be flushed anyway
            parts.journal.close()

    asyncio.run(main())


def test_retention_keeps_the_events_the_fleet_topic_has_not_received(tmp_path: Path) -> None:
    """The repro: events 1..2 produced, then Kafka went away; no webhook holds the journal.
    Neither the count nor the age of the retention may drop 3..10."""

    async def scenario(parts: Components) -> None:
        journal = parts.journal
        for _ in range(10):
            journal.append(_draft())
        journal.set_mark(CURSOR, 2)
        assert journal.prune(keep_events=3, max_age_seconds=3600) == 2
        assert journal.prune(keep_events=0, max_age_seconds=0) == 0
        unproduced = journal.events_after(journal.mark(CURSOR), 500)
        assert [e.sequence for e in unproduced] == list(range(3, 11))
        journal.set_mark(CURSOR, 10)  # Kafka is back and took them all
        assert journal.prune(keep_events=0, max_age_seconds=0) == 8

    _run(tmp_path, scenario, events_topic="fleet")


def test_a_fleet_topic_not_yet_written_to_holds_every_event(tmp_path: Path) -> None:
    """A topic configured for the first time (no cursor yet) starts from the first event:
    retention may not drop any of them before they were produced."""

    async def scenario(parts: Components) -> None:
        for _ in range(5):
            parts.journal.append(_draft())
        assert parts.journal.prune(keep_events=0, max_age_seconds=0) == 0

    _run(tmp_path, scenario, events_topic="fleet")


def test_an_old_fleet_cursor_does_not_pin_a_journal_without_a_fleet_topic(
    tmp_path: Path,
) -> None:
    """A topic that was configured once and is no longer: nothing will ever move its
    cursor, so it holds nothing."""

    async def scenario(parts: Components) -> None:
        journal = parts.journal
        for _ in range(10):
            journal.append(_draft())
        journal.set_mark(CURSOR, 2)
        assert journal.prune(keep_events=3, max_age_seconds=3600) == 7

    _run(tmp_path, scenario)


def test_the_fleet_producer_gives_up_events_older_than_the_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic that stays broken must not pin the journal for ever: an event not produced
    within the retention age is given up (counted, logged) once producing it failed, then
    pruned as usual; the newer ones are still held for the producer. Only what an attempt
    tried is given up: 600 aged events are two batches, two failed attempts (a first
    version gave up all 600 after the first batch of 500 failed). librdkafka reports the
    failure after ``message.timeout.ms``, shortened here."""
    monkeypatch.setattr(fleet_module, "_MESSAGE_TIMEOUT_MS", 1000)
    monkeypatch.setattr(fleet_module, "_RETRY_SECONDS", 0.2)
    long_ago = time.time() - 2 * 3600
    aged = fleet_module._BATCH + 100

    async def scenario(parts: Components) -> None:
        journal, fleet = parts.journal, parts.fleet
        assert fleet is not None
        for _ in range(aged):
            journal.append(_draft(journaled_at=long_ago))
        for _ in range(2):
            journal.append(_draft())
        with capture_logs() as logs:
            fleet.start()
            for _ in range(300):
                if journal.mark(CURSOR) == aged:
                    break
                await asyncio.sleep(0.05)
        assert journal.mark(CURSOR) == aged, "the events past the retention were not given up"
        gave_up = parts.metrics.fleet_produced.labels("gave_up")._value.get()
        assert gave_up == aged
        events = [line["event"] for line in logs]
        # tried first: each give-up follows a failed attempt of the events it gives up
        assert events[:4] == [
            "producing to the fleet topic failed; will retry",
            "fleet events given up",
            "producing to the fleet topic failed; will retry",
            "fleet events given up",
        ], events
        given = [line for line in logs if line["event"] == "fleet events given up"]
        assert [(g["first_sequence"], g["last_sequence"], g["events"]) for g in given] == [
            (1, fleet_module._BATCH, fleet_module._BATCH),
            (fleet_module._BATCH + 1, aged, 100),
        ]
        assert given[0]["reasons"] == ["older than the journal's retention"]
        assert journal.prune(keep_events=0, max_age_seconds=3600) == aged
        assert [e.sequence for e in journal.events_after(0, 10)] == [aged + 1, aged + 2]

    _run(tmp_path, scenario, events_topic="fleet", journal_retention_hours=1.0)


def test_the_fleet_backlog_is_a_metric(tmp_path: Path) -> None:
    """While Kafka is down the fleet producer falls behind, and nothing showed how far:
    ``journal_pending_events`` counts only webhooks. ``fleet_pending_events`` is what the
    producer has still to produce (absent without a fleet topic)."""

    def scraped(parts: Components) -> dict[str, float]:
        text = generate_latest(parts.metrics_registry).decode()
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name.endswith("pending_events")
        }

    async def with_fleet(parts: Components) -> None:
        for _ in range(3):
            parts.journal.append(_draft())
        assert scraped(parts)["rebalance_sidecar_fleet_pending_events"] == 3
        parts.journal.set_mark(CURSOR, 2)  # as the producer does once Kafka took two
        assert scraped(parts)["rebalance_sidecar_fleet_pending_events"] == 1

    async def without(parts: Components) -> None:
        parts.journal.append(_draft())
        assert "rebalance_sidecar_fleet_pending_events" not in scraped(parts)
        assert "rebalance_sidecar_journal_pending_events" in scraped(parts)

    _run(tmp_path / "fleet", with_fleet, events_topic="fleet")
    _run(tmp_path / "none", without)
