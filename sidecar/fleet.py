"""The fleet journal: every event also produced to a Kafka topic, for fleet analytics.

It reads the local journal from its own cursor (``meta.fleet_cursor``) and produces with
an idempotent producer, keyed by group id, so a crash or a broker outage only delays
events, never loses them: journal retention keeps every event this producer has not
produced yet (``Journal.keep_for``). That hold is bounded as a webhook's is: an event not
produced within the journal's retention age (``SIDECAR_JOURNAL_RETENTION_HOURS``: Kafka
or the topic failed that long) is given up, counted (``fleet_events_total{outcome=
"gave_up"}``) and logged, and retention then prunes it as usual. It runs on the loop,
apart from the consumer thread: a slow or broken produce can never hold up the revoke
barrier, and the local journal copy is written before anything is produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog
from confluent_kafka import KafkaError, Message, Producer

from sidecar.journal import Journal
from sidecar.logs import kafka_logger
from sidecar.metrics import Metrics
from sidecar.settings import Settings

log = structlog.get_logger("sidecar.fleet")

CURSOR = "fleet_cursor"
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.", "api.")
_RETRY_SECONDS = 2.0
# How long librdkafka tries to deliver a produced event before it reports it failed.
_MESSAGE_TIMEOUT_MS = 30_000
_FLUSH_SLICE_SECONDS = 0.5
# The CloudEvents Kafka binding, structured mode: the value is the whole event as JSON, and
# this header tells CloudEvents-aware consumers so (binary mode would use ce_* headers).
_STRUCTURED: list[tuple[str, str | bytes | None]] = [
    ("content-type", b"application/cloudevents+json")
]


class FleetJournal:
    def __init__(self, settings: Settings, journal: Journal, metrics: Metrics) -> None:
        assert settings.events_topic
        self._topic = settings.events_topic
        self._key = settings.group_id.encode()
        self._journal = journal
        self._metrics = metrics
        # An event not produced within the retention age is given up (``_give_up_aged``)
        # once producing it failed.
        self._max_age = settings.journal_retention_hours * 3600
        journal.keep_for(CURSOR)  # retention keeps what is not produced yet
        shared = {k: v for k, v in settings.kafka.items() if k.startswith(_SHARED_PREFIXES)}
        self._producer = Producer(
            {
                **shared,
                "bootstrap.servers": settings.bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 20,
                "message.timeout.ms": _MESSAGE_TIMEOUT_MS,
                "logger": kafka_logger("fleet"),
            }
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fleet")

    def wake(self) -> None:
        self._wake.set()

    async def close(self, timeout: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._flush(timeout)

    async def _flush(self, seconds: float) -> int:
        """Flush in short slices: a cancelled flush then leaves at most one slice running in
        its thread, and ``asyncio.run`` waits for that thread before the process exits."""
        deadline = time.monotonic() + seconds
        while True:
            left = max(0.0, deadline - time.monotonic())
            remaining: int = await asyncio.to_thread(
                self._producer.flush, min(_FLUSH_SLICE_SECONDS, left)
            )
            if remaining == 0 or time.monotonic() >= deadline:
                return remaining

    async def _run(self) -> None:
        cursor = self._journal.mark(CURSOR)
        while True:
            self._wake.clear()
            batch = self._journal.events_after(cursor, 500)
            if not batch:
                await self._wake.wait()
                continue
            failures: list[str] = []
            delivered = self._on_delivery(failures)
            for event in batch:
                await self._produce(event.body, delivered)
            remaining = await self._flush(_MESSAGE_TIMEOUT_MS / 1000 + 5)
            if failures or remaining:
                log.warning(
                    "producing to the fleet topic failed; will retry",
                    topic=self._topic,
                    errors=failures[:3],
                    undelivered=remaining,
                )
                cursor = self._give_up_aged(cursor)
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            cursor = batch[-1].sequence
            self._journal.set_mark(CURSOR, cursor)

    def _give_up_aged(self, cursor: int) -> int:
        """After a failed attempt, give up the events not produced within the journal's
        retention age, and move the cursor past them: the journal holds them for this
        producer no longer than it keeps any event (a topic that stays broken must not pin
        it for ever), as a webhook gives a delivery up after ``SIDECAR_WEBHOOK_MAX_AGE_MS``
        at its first failure. An old event is always tried first: a sidecar that was
        stopped for longer than the retention still produces what it had not produced.
        Returns the cursor."""
        last, count = self._journal.aged_out(cursor, time.time() - self._max_age)
        if not count:
            return cursor
        self._journal.set_mark(CURSOR, last)
        self._metrics.fleet_produced.labels("gave_up").inc(count)
        log.error(
            "fleet events given up",
            topic=self._topic,
            first_sequence=cursor + 1,
            last_sequence=last,
            events=count,
            max_age_hours=self._max_age / 3600,
        )
        return last

    def _on_delivery(self, failures: list[str]) -> Any:
        def delivered(error: KafkaError | None, message: Message, /) -> None:
            self._metrics.fleet_produced.labels("failed" if error else "delivered").inc()
            if error is not None:
                failures.append(error.str())

        return delivered

    async def _produce(self, value: bytes, on_delivery: Any) -> None:
        while True:
            try:
                self._producer.produce(
                    self._topic,
                    value=value,
                    key=self._key,
                    headers=_STRUCTURED,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                await asyncio.to_thread(self._producer.poll, 0.5)
