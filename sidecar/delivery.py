"""Webhook delivery on the asyncio loop: signed, ordered per subscriber, retried, durable.

One ``Courier`` task per subscription walks the journal from the subscription's cursor:
it never sends event N+1 before N was acknowledged (2xx) or given up, so each
subscriber sees its events in sequence order. The cursor moves in the same SQLite
transaction that logs the delivery, so after a crash delivery resumes at the first
unacknowledged event, with the same event id (at-least-once).

Revoked/lost events open a ``RevokeBarrier``: the consumer thread waits (see handoff.py)
until every blocking subscriber acknowledged that event. A blocking subscriber may answer
a ``revoked`` event with offsets to commit; they are validated here and handed back.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import structlog

from sidecar.handoff import BarrierOutcome
from sidecar.journal import Journal
from sidecar.metrics import Metrics
from sidecar.model import Delivery, Event, EventType, PartitionOffset, Subscription

log = structlog.get_logger("sidecar.delivery")

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
_MAX_RESPONSE_BYTES = 1 << 20
# Not str.isdigit(): that accepts '²' and '٣', which float() then refuses or misreads.
_DELTA_SECONDS = re.compile(r"[0-9]+", re.ASCII)


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial: float
    maximum: float
    max_attempts: int  # 0: unlimited
    max_age: float

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # Floored: `Retry-After: 0` or a date in the past must not turn retries into a
            # busy loop of POSTs against a subscriber that just said it is overloaded.
            return min(max(retry_after, self.initial), self.maximum)
        # Full jitter (AWS architecture blog): spreads retries of many sidecars.
        return random.uniform(0, min(self.maximum, self.initial * 2 ** (attempt - 1)))

    def exhausted(self, attempt: int, journaled_at: float, now: float) -> bool:
        if self.max_attempts and attempt >= self.max_attempts:
            return True
        return now - journaled_at >= self.max_age


@dataclass
class RevokeBarrier:
    """Waits for every blocking subscriber's acknowledgement of one revoked/lost event."""

    event: Event
    waiting: set[str]
    done: Callable[[BarrierOutcome], None]
    acknowledged: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def settle(self, sub_id: str, ok: bool, offsets: tuple[PartitionOffset, ...] = ()) -> bool:
        """Take one subscriber's answer; ``False`` when this barrier was not waiting for it."""
        if sub_id not in self.waiting:
            return False
        self.waiting.discard(sub_id)
        (self.acknowledged if ok else self.gave_up).append(sub_id)
        for po in offsets:
            key = (po.topic, po.partition)
            # Two subscribers handing back the same partition: the furthest progress wins.
            self.offsets[key] = max(self.offsets.get(key, -1), po.offset or 0)
        if not self.waiting:
            self.done(self.outcome(timed_out=False))
        return True

    def outcome(self, *, timed_out: bool) -> BarrierOutcome:
        return BarrierOutcome(
            acknowledged=tuple(self.acknowledged),
            gave_up=tuple(self.gave_up),
            waiting=tuple(sorted(self.waiting)),
            offsets=tuple(PartitionOffset(t, p, o) for (t, p), o in sorted(self.offsets.items())),
            timed_out=timed_out,
        )


class Dispatcher:
    """Owns the couriers and the open barriers. Loop-side only."""

    def __init__(
        self,
        journal: Journal,
        client: httpx.AsyncClient,
        metrics: Metrics,
        policy: RetryPolicy,
    ) -> None:
        self._journal = journal
        self._client = client
        self._metrics = metrics
        self._policy = policy
        self._couriers: dict[str, Courier] = {}
        self._barriers: dict[int, RevokeBarrier] = {}

    def start(self) -> None:
        for sub in self._journal.subscriptions():
            if sub.disabled_reason is None:
                self.add(sub)

    def add(self, sub: Subscription) -> None:
        self.remove(sub.id)
        courier = Courier(sub.id, self)
        self._couriers[sub.id] = courier
        courier.start()

    def remove(self, sub_id: str) -> None:
        courier = self._couriers.pop(sub_id, None)
        if courier is not None:
            courier.stop()
        for barrier in list(self._barriers.values()):
            barrier.settle(sub_id, ok=False)

    def wake(self) -> None:
        for courier in self._couriers.values():
            courier.wake()

    async def close(self) -> None:
        couriers = list(self._couriers.values())
        self._couriers.clear()
        for courier in couriers:
            courier.stop()
        await asyncio.gather(*(c.stopped() for c in couriers), return_exceptions=True)

    # -- barriers -------------------------------------------------------------------------

    def open_barrier(self, event: Event, done: Callable[[BarrierOutcome], None]) -> None:
        waiting = {
            sub.id
            for sub in self._journal.subscriptions()
            if sub.blocking
            and sub.wants(event.type)
            and sub.id in self._couriers
            and sub.cursor < event.sequence
        }
        barrier = RevokeBarrier(event, waiting, done)
        if not waiting:
            done(barrier.outcome(timed_out=False))
            return
        self._barriers[event.sequence] = barrier

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        barrier = self._barriers.pop(event.sequence, None)
        if barrier is None:
            return BarrierOutcome(timed_out=True)
        now = time.time()
        for sub_id in sorted(barrier.waiting):
            self._metrics.deliveries.labels(sub_id, "barrier_timeout").inc()
            self._journal.record(
                Delivery(
                    sub_id,
                    event.sequence,
                    event.id,
                    "barrier_timeout",
                    0,
                    None,
                    "revoke barrier timed out; the rebalance proceeded without this "
                    "acknowledgement (delivery continues)",
                    now,
                )
            )
        log.warning(
            "revoke barrier timed out",
            sequence=event.sequence,
            event_type=event.type.value,
            waiting=sorted(barrier.waiting),
        )
        return barrier.outcome(timed_out=True)

    def _settle(
        self, sub_id: str, event: Event, ok: bool, offsets: tuple[PartitionOffset, ...] = ()
    ) -> bool:
        """Hand an answer to the event's open barrier; ``False`` when none was waiting for it
        (it expired, or the sidecar restarted since the event): its offsets go nowhere."""
        barrier = self._barriers.get(event.sequence)
        if barrier is None:
            return False
        taken = barrier.settle(sub_id, ok, offsets)
        if not barrier.waiting:
            self._barriers.pop(event.sequence, None)
        return taken


class Courier:
    """Delivers one subscription's events, in order, one at a time."""

    def __init__(self, sub_id: str, dispatcher: Dispatcher) -> None:
        self.sub_id = sub_id
        self._d = dispatcher
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"courier-{self.sub_id}"
        )
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A courier must never die quietly: its subscriber would stall the barrier."""
        if task.cancelled() or task.exception() is None:
            return
        log.error(
            "webhook courier crashed; restarting it",
            webhook=self.sub_id,
            error=repr(task.exception()),
        )
        asyncio.get_running_loop().call_later(1.0, self._restart)

    def _restart(self) -> None:
        if self._d._couriers.get(self.sub_id) is self:
            self.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        journal = self._d._journal
        while True:
            self._wake.clear()
            sub = journal.subscription(self.sub_id)
            if sub is None or sub.disabled_reason is not None:
                return
            # Read the newest sequence first: every wanted event up to it is then in the
            # batch, so an empty batch means everything up to it is unwanted here.
            newest = journal.last_sequence()
            batch = journal.events_after(sub.cursor, 100, sub.events)
            if not batch:
                if newest > sub.cursor:
                    # Or a filtered subscription pins its cursor at its last wanted event,
                    # and pruning and journal_pending_events count the rest forever.
                    journal.pass_over(sub.id, newest)
                await self._wake.wait()
                continue
            for event in batch:
                if not await self._deliver(sub, event):
                    return

    async def _deliver(self, sub: Subscription, event: Event) -> bool:
        """Deliver until acknowledged or given up; ``False`` when the subscription ended."""
        d = self._d
        journaled_at = d._journal.first_created_at(event.sequence) or time.time()
        attempt = 0
        while True:
            attempt += 1
            status, error, retry_after, body = await self._post(sub, event)
            now = time.time()
            if status is not None and 200 <= status < 300:
                offsets = self._offsets(sub, event, body, attempt)
                d._journal.advance(
                    sub.id,
                    event.sequence,
                    Delivery(
                        sub.id, event.sequence, event.id, "delivered", attempt, status, None, now
                    ),
                )
                d._metrics.deliveries.labels(sub.id, "delivered").inc()
                if not d._settle(sub.id, event, True, offsets) and offsets:
                    self._reject_offsets(
                        sub,
                        event,
                        attempt,
                        status,
                        "arrived after the revoke barrier expired (or the sidecar restarted): "
                        "the rebalance went on and the partitions may belong to another member "
                        "now; not committed",
                    )
                return True
            if status == 410:
                reason = f"410 Gone from {sub.url}"
                d._journal.disable(sub.id, reason)
                d._journal.record(
                    Delivery(
                        sub.id, event.sequence, event.id, "disabled", attempt, status, reason, now
                    )
                )
                d._metrics.deliveries.labels(sub.id, "disabled").inc()
                d._settle(sub.id, event, False)
                log.warning("webhook disabled by 410 Gone", webhook=sub.id)
                return False
            d._metrics.deliveries.labels(sub.id, "failed").inc()
            d._journal.record(
                Delivery(sub.id, event.sequence, event.id, "failed", attempt, status, error, now)
            )
            if d._policy.exhausted(attempt, journaled_at, now):
                d._journal.advance(
                    sub.id,
                    event.sequence,
                    Delivery(
                        sub.id,
                        event.sequence,
                        event.id,
                        "gave_up",
                        attempt,
                        status,
                        f"gave up after {attempt} attempts: {error}",
                        now,
                    ),
                )
                d._metrics.deliveries.labels(sub.id, "gave_up").inc()
                d._settle(sub.id, event, False)
                log.error(
                    "webhook delivery given up",
                    webhook=sub.id,
                    sequence=event.sequence,
                    attempts=attempt,
                    error=error,
                )
                return True
            delay = d._policy.delay(attempt, retry_after if status in (429, 503) else None)
            log.info(
                "webhook delivery failed, retrying",
                webhook=sub.id,
                sequence=event.sequence,
                attempt=attempt,
                status=status,
                error=error,
                retry_in_s=round(delay, 3),
            )
            await asyncio.sleep(delay)
            if d._journal.subscription(sub.id) is None:
                d._settle(sub.id, event, False)
                return False

    async def _post(
        self, sub: Subscription, event: Event
    ) -> tuple[int | None, str | None, float | None, bytes]:
        timestamp = int(time.time())
        headers = {
            "content-type": "application/cloudevents+json",
            "webhook-id": event.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(sub.secret, event.id, timestamp, event.body),
            "user-agent": "rebalance-sidecar",
        }
        started = time.perf_counter()
        try:
            async with self._d._client.stream(
                "POST",
                sub.url,
                content=event.body,
                headers=headers,
                timeout=sub.timeout_ms / 1000,
                follow_redirects=False,
            ) as response:
                body = await _read_capped(response)
                status = response.status_code
                retry_after = retry_after_seconds(response.headers.get("retry-after"), time.time())
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return None, f"{type(exc).__name__}: {exc}", None, b""
        finally:
            self._d._metrics.delivery_duration.labels(sub.id).observe(time.perf_counter() - started)
        error = None if 200 <= status < 300 else f"HTTP {status}"
        return status, error, retry_after, body

    def _offsets(
        self, sub: Subscription, event: Event, body: bytes, attempt: int
    ) -> tuple[PartitionOffset, ...]:
        if event.type is not EventType.REVOKED or not sub.blocking or not body.strip():
            return ()
        try:
            offsets = parse_offsets(body, set(event.partitions))
        except ValueError as exc:
            self._reject_offsets(sub, event, attempt, None, str(exc))
            return ()
        return offsets

    def _reject_offsets(
        self, sub: Subscription, event: Event, attempt: int, status: int | None, reason: str
    ) -> None:
        self._d._metrics.deliveries.labels(sub.id, "offsets_rejected").inc()
        self._d._journal.record(
            Delivery(
                sub.id,
                event.sequence,
                event.id,
                "offsets_rejected",
                attempt,
                status,
                reason,
                time.time(),
            )
        )
        log.warning(
            "offsets in revoke acknowledgement rejected",
            webhook=sub.id,
            sequence=event.sequence,
            error=reason,
        )


def parse_offsets(body: bytes, owned: set[Any]) -> tuple[PartitionOffset, ...]:
    """Validate ``{"offsets": [{topic, partition, offset}]}`` against the revoked set.

    A body that is not JSON or has no ``offsets`` hands back nothing (a plain ack);
    anything malformed or naming a partition not being revoked rejects the whole list.
    """
    try:
        document = json.loads(body)
    except ValueError:
        return ()
    if not isinstance(document, dict) or "offsets" not in document:
        return ()
    items = document["offsets"]
    if not isinstance(items, list):
        raise ValueError("'offsets' must be a list")
    result = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or set(item) - {"topic", "partition", "offset", "metadata"}:
            raise ValueError(f"offsets[{index}] must be {{topic, partition, offset}}")
        topic, partition, offset = item.get("topic"), item.get("partition"), item.get("offset")
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise ValueError(f"offsets[{index}] needs a topic string and a partition >= 0")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offsets[{index}].offset must be an integer >= 0")
        po = PartitionOffset(topic, partition, offset)
        if po.tp not in owned:
            raise ValueError(f"offsets[{index}] names {topic}[{partition}], not being revoked here")
        result.append(po)
    return tuple(result)


async def _read_capped(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > _MAX_RESPONSE_BYTES:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """``Retry-After`` per RFC 9110 10.2.3: delta-seconds (ASCII digits only) or an HTTP-date.

    Anything else is ignored (``None``): a subscriber's odd header must never stop delivery.
    """
    if not value:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": an HTTP-date is always GMT
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now
