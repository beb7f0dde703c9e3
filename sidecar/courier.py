"""One subscription's deliveries: signed, in order, one at a time, retried.

A ``Courier`` walks the journal from its subscription's cursor and never sends event N+1
before N was acknowledged (2xx) or given up, so each subscriber sees its events in
sequence order. The cursor moves in the same SQLite transaction that logs the delivery,
so after a crash delivery resumes at the first unacknowledged event, with the same event
id (at-least-once). Every line of the delivery log goes through ``DeliveryLog.record``:
the journal row, the metric and the barrier's answer stay in step.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from sidecar.barrier import Barriers, parse_offsets
from sidecar.journal import Journal
from sidecar.metrics import Metrics
from sidecar.model import Delivery, DeliveryOutcome, Event, EventType, PartitionOffset, Subscription
from sidecar.retry import RetryPolicy, retry_after_seconds
from sidecar.tracing import TRACEPARENT, delivery_span
from sidecar.webhook_http import PostFailed, WebhookClient

log = structlog.get_logger("sidecar.delivery")

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
_MAX_RESPONSE_BYTES = 1 << 20
_BATCH = 100
_RESTART_AFTER_CRASH_SECONDS = 1.0
# How long an event the subscription does not want may keep its cursor behind (and count
# in journal_pending_events) when no event it wants comes first.
PASS_OVER_AFTER_SECONDS = 1.0
# The outcomes that end a subscriber's part in a barrier (the others are on the way).
_ANSWERS = (DeliveryOutcome.DELIVERED, DeliveryOutcome.GAVE_UP, DeliveryOutcome.DISABLED)
_LATE_OFFSETS = (
    "arrived after the revoke barrier expired (the member stopped waiting, or the sidecar "
    "restarted): the rebalance "
    "went on and the partitions may belong to another member now; not committed"
)


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


@dataclass(frozen=True, slots=True)
class PostResult:
    """How one POST went: ``status`` is ``None`` when no HTTP answer came at all."""

    status: int | None
    error: str | None
    retry_after: float | None
    body: bytes
    seconds: float

    @property
    def acknowledged(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class DeliveryLog:
    """The one place a delivery is recorded: journal row (and cursor), metric, barrier."""

    def __init__(self, journal: Journal, metrics: Metrics, barriers: Barriers) -> None:
        self._journal = journal
        self._metrics = metrics
        self._barriers = barriers

    def attempted(
        self,
        sub_id: str,
        event: Event,
        outcome: DeliveryOutcome,
        *,
        attempt: int,
        result: PostResult,
        error: str | None = None,
        offsets: tuple[PartitionOffset, ...] = (),
    ) -> bool:
        """Record one POST and what it meant; ``True`` when a barrier took the answer."""
        self._metrics.delivery_duration.labels(sub_id).observe(result.seconds)
        return self.record(
            sub_id,
            event,
            outcome,
            attempts=attempt,
            status=result.status,
            error=error or result.error,
            offsets=offsets,
        )

    def record(
        self,
        sub_id: str,
        event: Event,
        outcome: DeliveryOutcome,
        *,
        attempts: int = 0,
        status: int | None = None,
        error: str | None = None,
        offsets: tuple[PartitionOffset, ...] = (),
    ) -> bool:
        """Log one line; ``True`` when an open barrier took the answer (and the offsets)."""
        delivery = Delivery(
            subscription_id=sub_id,
            sequence=event.sequence,
            event_id=event.id,
            outcome=outcome,
            attempts=attempts,
            status_code=status,
            error=error,
            at=time.time(),
        )
        if outcome.moves_cursor:
            self._journal.advance(sub_id, event.sequence, delivery)
        else:
            self._journal.record(delivery)
        self._metrics.deliveries.labels(sub_id, outcome.value).inc()
        if outcome in _ANSWERS:
            ok = outcome is DeliveryOutcome.DELIVERED
            return self._barriers.settle(sub_id, event, ok, offsets)
        return False


class Courier:
    """Delivers one subscription's events, in order, one at a time. Loop-side only."""

    def __init__(
        self,
        subscription: Subscription,
        *,
        journal: Journal,
        client: WebhookClient,
        policy: RetryPolicy,
        deliveries: DeliveryLog,
        ceiling: Callable[[], int] = lambda: 2**63 - 1,
        pass_over_after: float = PASS_OVER_AFTER_SECONDS,
    ) -> None:
        self.subscription = subscription
        self._ceiling = ceiling  # the last sequence announced: read no further
        self._pass_over_after = pass_over_after
        self._pass_over: asyncio.TimerHandle | None = None
        self.cursor = subscription.cursor  # kept here: no SQLite read of it per event
        self._journal = journal
        self._client = client  # this subscription's own connection
        self._policy = policy
        self._deliveries = deliveries
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._serve(), name=f"courier-{self.subscription.id}"
        )

    def wake(self) -> None:
        self._wake.set()

    def pass_over_later(self) -> None:
        """An event this subscription does not want was announced: pass over it within
        ``pass_over_after`` seconds, unless an event it wants wakes the courier first (its
        read passes over the unwanted ones before it). Never a read or a write now."""
        if self._pass_over is None:
            self._pass_over = asyncio.get_running_loop().call_later(
                self._pass_over_after, self._passed_over_later
            )

    def _passed_over_later(self) -> None:
        self._pass_over = None
        # Usually an event it wanted came meanwhile and its read passed over these: then
        # nothing is left, and a wake would only add a read at some later moment (with
        # many subscribers, all at once), maybe just as the next event comes.
        if self.cursor < self._ceiling():
            self.wake()

    def stop(self) -> None:
        if self._pass_over is not None:
            self._pass_over.cancel()
            self._pass_over = None
        if self._task is not None:
            self._task.cancel()
            # A task cancelled before it ever ran never enters _serve's ``finally``: its
            # client (an open connection) would leak. Close it when the task is done.
            self._task.add_done_callback(lambda _: self._client.close())

    def after_stop(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop once this courier's task has ended (now if it has)."""
        if self._task is None or self._task.done():
            callback()
        else:
            self._task.add_done_callback(lambda _: callback())

    async def stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def owes(self, event: Event) -> bool:
        """Whether this subscriber's acknowledgement of ``event`` is still to come."""
        sub = self.subscription
        return sub.blocking and sub.wants(event.type) and self.cursor < event.sequence

    async def _serve(self) -> None:
        """Run until stopped or disabled; a courier must never die quietly (its subscriber
        would stall every barrier), so a crash is logged and the loop starts again."""
        try:
            while True:
                try:
                    await self._run()
                    return
                except Exception as exc:
                    log.error(
                        "webhook courier crashed; restarting it",
                        webhook=self.subscription.id,
                        error=repr(exc),
                    )
                    await asyncio.sleep(_RESTART_AFTER_CRASH_SECONDS)
        finally:
            self._client.close()

    async def _run(self) -> None:
        while self.subscription.disabled_reason is None:
            # Cleared before the read: an event appended after it is announced after it,
            # and its wake-up (or, for an event it does not want, pass_over_later's) then
            # ends the wait below.
            self._wake.clear()
            read = self._journal.events_after(self.cursor, _BATCH)
            ceiling = self._ceiling()
            batch = [event for event in read if event.sequence <= ceiling]
            for event in batch:
                if self.subscription.wants(event.type) and not await self._deliver(event):
                    return
            if batch and batch[-1].sequence > self.cursor:
                # Unwanted events at the end: pass over them, or a filtered subscription
                # pins its cursor and pruning and journal_pending_events never see past it.
                self._journal.pass_over(self.subscription.id, batch[-1].sequence)
                self.cursor = batch[-1].sequence
            if len(read) < _BATCH or len(batch) < len(read):
                # The journal had no more, or the rest is not announced yet: no read until
                # the next announcement.
                await self._wake.wait()

    async def _deliver(self, event: Event) -> bool:
        """Deliver until acknowledged or given up; ``False`` when the subscription ended."""
        journaled_at: float | None = None
        attempt = 0
        while True:
            attempt += 1
            result = await self._post(event)
            if result.acknowledged:
                self._acknowledged(event, attempt, result)
                return True
            if result.status == 410:
                self._disable(event, attempt, result)
                return False
            self._deliveries.attempted(
                self.subscription.id, event, DeliveryOutcome.FAILED, attempt=attempt, result=result
            )
            if journaled_at is None:  # read only now: only a failing delivery has an age
                journaled_at = self._journal.first_created_at(event.sequence) or time.time()
            if self._policy.exhausted(attempt, journaled_at, time.time()):
                self._give_up(event, attempt, result)
                return True
            await self._back_off(event, attempt, result)

    def _acknowledged(self, event: Event, attempt: int, result: PostResult) -> None:
        sub = self.subscription
        offsets = self._offsets(event, attempt, result)
        taken = self._deliveries.attempted(
            sub.id,
            event,
            DeliveryOutcome.DELIVERED,
            attempt=attempt,
            result=result,
            offsets=offsets,
        )
        self.cursor = event.sequence
        if offsets and not taken:
            self._reject_offsets(event, attempt, _LATE_OFFSETS, result.status)

    def _disable(self, event: Event, attempt: int, result: PostResult) -> None:
        sub = self.subscription
        reason = f"410 Gone from {sub.url}"
        self._journal.disable(sub.id, reason)
        self.subscription = replace(sub, disabled_reason=reason)
        self._deliveries.attempted(
            sub.id, event, DeliveryOutcome.DISABLED, attempt=attempt, result=result, error=reason
        )
        log.warning("webhook disabled by 410 Gone", webhook=sub.id)

    def _give_up(self, event: Event, attempt: int, result: PostResult) -> None:
        sub_id = self.subscription.id
        self._deliveries.record(
            sub_id,
            event,
            DeliveryOutcome.GAVE_UP,
            attempts=attempt,
            status=result.status,
            error=f"gave up after {attempt} attempts: {result.error}",
        )
        self.cursor = event.sequence
        log.error(
            "webhook delivery given up",
            webhook=sub_id,
            sequence=event.sequence,
            attempts=attempt,
            error=result.error,
        )

    async def _back_off(self, event: Event, attempt: int, result: PostResult) -> None:
        honoured = result.retry_after if result.status in (429, 503) else None
        delay = self._policy.delay(attempt, honoured)
        log.info(
            "webhook delivery failed, retrying",
            webhook=self.subscription.id,
            sequence=event.sequence,
            attempt=attempt,
            status=result.status,
            error=result.error,
            retry_in_s=round(delay, 3),
        )
        await asyncio.sleep(delay)

    async def _post(self, event: Event) -> PostResult:
        sub = self.subscription
        timestamp = int(time.time())
        headers = {
            "content-type": "application/cloudevents+json",
            "webhook-id": event.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(sub.secret, event.id, timestamp, event.body),
            "user-agent": "rebalance-sidecar",
        }
        span = delivery_span(event.body, sub.id, sub.mode)
        if span.header is not None:
            headers[TRACEPARENT] = span.header
        started = time.perf_counter()
        try:
            answer = await self._client.post(
                sub.url,
                event.body,
                headers,
                timeout=sub.timeout_ms / 1000,
                cap=_MAX_RESPONSE_BYTES,
            )
        except PostFailed as exc:
            span.answered(None, str(exc))
            return PostResult(None, str(exc), None, b"", time.perf_counter() - started)
        status = answer.status
        retry_after = retry_after_seconds(answer.retry_after, time.time())
        error = None if 200 <= status < 300 else f"HTTP {status}"
        span.answered(status, error)
        return PostResult(status, error, retry_after, answer.body, time.perf_counter() - started)

    def _offsets(
        self, event: Event, attempt: int, result: PostResult
    ) -> tuple[PartitionOffset, ...]:
        if (
            event.type is not EventType.REVOKED
            or not self.subscription.blocking
            or not result.body.strip()
        ):
            return ()
        try:
            return parse_offsets(result.body, set(event.partitions))
        except ValueError as exc:
            self._reject_offsets(event, attempt, str(exc))
            return ()

    def _reject_offsets(
        self, event: Event, attempt: int, reason: str, status: int | None = None
    ) -> None:
        self._deliveries.record(
            self.subscription.id,
            event,
            DeliveryOutcome.OFFSETS_REJECTED,
            attempts=attempt,
            status=status,
            error=reason,
        )
        log.warning(
            "offsets in revoke acknowledgement rejected",
            webhook=self.subscription.id,
            sequence=event.sequence,
            error=reason,
        )
