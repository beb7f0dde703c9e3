"""The fleet journal: every event also produced to a Kafka topic, for fleet analytics.

It reads the local journal from its own cursor (``meta.fleet_cursor``) and produces with
an idempotent producer, keyed by group id, so a crash or a broker outage only delays
events, never loses them: journal retention keeps every event this producer has not
produced yet (``Journal.keep_for``). That hold is bounded as a webhook's is: an event
older than the journal's retention age (``SIDECAR_JOURNAL_RETENTION_HOURS``) whose
attempt failed (Kafka or the topic failed that long), and an event Kafka can never take
(over the message size limit), is given up, counted (``fleet_events_total{outcome=
"gave_up"}``) and logged, and retention then prunes it as usual. It runs on the loop,
apart from the consumer thread: a slow or broken produce can never hold up the revoke
barrier, and the local journal copy is written before anything is produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sidecar.journal import Journal
from sidecar.logs import kafka_logger
from sidecar.metrics import Metrics
from sidecar.model import Event
from sidecar.settings import Settings

log = structlog.get_logger("sidecar.fleet")

CURSOR = "fleet_cursor"
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.", "api.")
_RETRY_SECONDS = 2.0
# How long librdkafka tries to deliver a produced event before it reports it failed.
_MESSAGE_TIMEOUT_MS = 30_000
_FLUSH_SLICE_SECONDS = 0.5
_BATCH = 500
# Refused for the event itself, not the moment: no retry can deliver it (a message over
# the producer's message.max.bytes, or the broker's or topic's limit).
_NEVER_DELIVERABLE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE})
# The CloudEvents Kafka binding, structured mode: the value is the whole event as JSON, and
# this header tells CloudEvents-aware consumers so (binary mode would use ce_* headers).
_STRUCTURED: list[tuple[str, str | bytes | None]] = [
    ("content-type", b"application/cloudevents+json")
]


class _Attempt:
    """One attempt at a batch: what Kafka acknowledged, and what it refused and why.

    ``alone``: each event is produced and delivered on its own. The broker measures a
    record batch, not an event, against the topic's ``max.message.bytes``; librdkafka
    fails every event of a batch it refused as too large (the Java producer splits the
    batch; librdkafka does not). So a refusal is the event's own only when the event was
    alone in its request, or when the producer refused it before sending (its own
    ``message.max.bytes``)."""

    def __init__(self, metrics: Metrics, *, alone: bool = False) -> None:
        self._metrics = metrics
        self.alone = alone
        self.delivered: set[int] = set()
        self.refused: dict[int, str] = {}
        self.errors: list[str] = []
        # The broker refused a batch as too large: its events may each fit on their own.
        self.batch_too_large = False

    def on_delivery(self, sequence: int, error: KafkaError | None, message: Message, /) -> None:
        self._metrics.fleet_produced.labels("failed" if error else "delivered").inc()
        if error is None:
            self.delivered.add(sequence)
        else:
            self.refuse(sequence, error, measured_alone=self.alone)

    def refuse(self, sequence: int, error: KafkaError, *, measured_alone: bool = True) -> None:
        self.errors.append(error.str())
        if error.code() not in _NEVER_DELIVERABLE:
            return
        if measured_alone:
            self.refused[sequence] = f"never deliverable: {error.name()}"
        else:
            self.batch_too_large = True


class FleetJournal:
    def __init__(self, settings: Settings, journal: Journal, metrics: Metrics) -> None:
        assert settings.events_topic
        self._topic = settings.events_topic
        self._key = settings.group_id.encode()
        self._journal = journal
        self._metrics = metrics
        # An event not produced within the retention age is given up (``_settle``) once
        # producing it failed.
        self._max_age = settings.journal_retention_hours * 3600
        journal.keep_for(CURSOR)  # retention keeps what is not produced yet
        shared = {k: v for k, v in settings.kafka.items() if k.startswith(_SHARED_PREFIXES)}
        self._config = {
            **shared,
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 20,
            "message.timeout.ms": _MESSAGE_TIMEOUT_MS,
            "logger": kafka_logger("fleet"),
        }
        self._producer = self._new_producer()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _new_producer(self) -> Producer:
        return Producer(self._config)

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
        """Produce for ever. Nothing ends it but ``close()``: an unexpected error (the
        journal unreadable for a moment, a producer call raising) is logged and the
        turn tried again, from the cursor as stored; a dead task would stop the fleet
        topic for good and hold the journal for ever, without a word."""
        while True:
            try:
                await self._turns()
            except Exception as exc:
                log.error("fleet producer failed; trying again", error=repr(exc))
                await asyncio.sleep(_RETRY_SECONDS)

    async def _turns(self) -> None:
        cursor = self._journal.mark(CURSOR)
        alone = False
        while True:
            self._wake.clear()
            batch = self._journal.events_after(cursor, _BATCH)
            if not batch:
                await self._wake.wait()
                continue
            attempt = _Attempt(self._metrics, alone=alone)
            remaining = await self._attempt(batch, attempt)
            # A batch refused as too large is retried at once, each event in a request of
            # its own: what fits is produced, and what the broker still refuses is refused
            # for itself.
            alone = attempt.batch_too_large
            if all(e.sequence in attempt.delivered for e in batch):
                cursor = batch[-1].sequence
                self._journal.set_mark(CURSOR, cursor)
                continue
            log.warning(
                "producing to the fleet topic failed; will retry",
                topic=self._topic,
                errors=attempt.errors[:3],
                undelivered=remaining,
                one_by_one=attempt.batch_too_large,
            )
            cursor = self._settle(cursor, batch, attempt)
            if not alone:
                await asyncio.sleep(_RETRY_SECONDS)

    async def _attempt(self, batch: list[Event], attempt: _Attempt) -> int:
        """Produce ``batch`` and wait for Kafka's answers; returns what stayed undelivered.
        One by one (``attempt.alone``), it stops at the first event neither delivered nor
        refused for itself."""
        wait = _MESSAGE_TIMEOUT_MS / 1000 + 5
        for event in batch:
            if not await self._produce(event, attempt):
                break
            if attempt.alone:
                remaining = await self._flush(wait)
                answered = event.sequence in attempt.delivered or event.sequence in attempt.refused
                if remaining or not answered:
                    return remaining
        return await self._flush(wait)

    def _settle(self, cursor: int, batch: list[Event], attempt: _Attempt) -> int:
        """After an attempt that did not deliver the whole batch: move the cursor past
        what was delivered, and past what is given up, in order, up to the first event
        still worth another attempt. Given up: an event Kafka can never take (larger than
        the producer's or the broker's message size), and one older than the journal's
        retention age, so the journal holds it for this producer no longer than it keeps
        any event (a topic that stays broken must not pin it for ever), as a webhook gives
        a delivery up after ``SIDECAR_WEBHOOK_MAX_AGE_MS`` at its first failure. Only
        events of this attempt: an old event is always tried first, so a sidecar stopped
        for longer than the retention still produces what it had not produced. Returns
        the cursor."""
        last_aged, _ = self._journal.aged_out(cursor, time.time() - self._max_age)
        moved_to, given_up = cursor, list[tuple[int, str]]()
        for event in batch:
            if event.sequence not in attempt.delivered:
                # A batch refused as too large says nothing of its events: each gets its
                # own attempt first, however old.
                aged = event.sequence <= last_aged and not attempt.batch_too_large
                reason = attempt.refused.get(event.sequence) or (
                    "older than the journal's retention" if aged else None
                )
                if reason is None:
                    break
                given_up.append((event.sequence, reason))
            moved_to = event.sequence
        if moved_to == cursor:
            return cursor
        self._journal.set_mark(CURSOR, moved_to)
        if given_up:
            self._metrics.fleet_produced.labels("gave_up").inc(len(given_up))
            log.error(
                "fleet events given up",
                topic=self._topic,
                first_sequence=given_up[0][0],
                last_sequence=given_up[-1][0],
                events=len(given_up),
                reasons=sorted({reason for _, reason in given_up}),
                max_age_hours=self._max_age / 3600,
            )
        return moved_to

    async def _produce(self, event: Event, attempt: _Attempt) -> bool:
        """Hand ``event`` to the producer; False when this attempt should stop here (the
        producer refused it for a reason that may pass)."""
        while True:
            try:
                self._producer.produce(
                    self._topic,
                    value=event.body,
                    key=self._key,
                    headers=_STRUCTURED,
                    on_delivery=functools.partial(attempt.on_delivery, event.sequence),
                )
                return True
            except BufferError:
                await asyncio.to_thread(self._producer.poll, 0.5)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                attempt.refuse(event.sequence, error)
                fatal = KafkaError._FATAL  # noqa: SLF001 - librdkafka's name for it
                if error.fatal() or error.code() == fatal:
                    # An idempotent producer's fatal error (fenced, authorization of the
                    # producer id): it refuses everything from now on; start a new one.
                    log.error(
                        "fleet producer failed for good; starting a new one", error=error.str()
                    )
                    self._producer = self._new_producer()
                    return False
                return error.code() in _NEVER_DELIVERABLE
