"""Webhook delivery on the asyncio loop: signed, ordered per subscriber, retried, durable.

The ``Dispatcher`` owns one ``Courier`` per active subscription (courier.py: the delivery
loop, the signing, the delivery log) and the open revoke barriers (barrier.py). It keeps
the active subscriptions in memory, so the event path reads no subscription from SQLite:
the registry tells it about every change (``add``/``remove``), and a courier marks its own
subscription disabled on ``410``. Each courier has its own HTTP client (webhook_http.py):
one kept-alive connection; a shared pool was scanned on every request, which made each
send O(subscribers).

Revoked/lost events open a ``RevokeBarrier``: the consumer thread waits (see handoff.py)
until every blocking subscriber acknowledged that event, or the barrier expires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from sidecar.barrier import Barriers, RevokeBarrier, parse_offsets
from sidecar.courier import (
    PASS_OVER_AFTER_SECONDS,
    SECRET_PREFIX,
    Courier,
    DeliveryLog,
    PostResult,
    sign,
)
from sidecar.handoff import BarrierDone, BarrierOutcome
from sidecar.journal import Journal
from sidecar.metrics import Metrics
from sidecar.model import DeliveryOutcome, Event, Subscription
from sidecar.retry import RetryPolicy, retry_after_seconds
from sidecar.webhook_http import WebhookClient

__all__ = [
    "SECRET_PREFIX",
    "Courier",
    "Dispatcher",
    "PostResult",
    "RetryPolicy",
    "RevokeBarrier",
    "parse_offsets",
    "retry_after_seconds",
    "sign",
]

log = structlog.get_logger("sidecar.delivery")


class Dispatcher:
    """Owns the couriers and the open barriers. Loop-side only."""

    def __init__(
        self,
        journal: Journal,
        metrics: Metrics,
        policy: RetryPolicy,
        *,
        client_factory: Callable[[], WebhookClient] = WebhookClient,
        pass_over_after: float = PASS_OVER_AFTER_SECONDS,
    ) -> None:
        self._journal = journal
        self._metrics = metrics
        self._pass_over_after = pass_over_after
        self._policy = policy
        self._client_factory = client_factory
        self._barriers = Barriers(on_abandoned=self._abandoned)
        self._deliveries = DeliveryLog(journal, metrics, self._barriers)
        self._couriers: dict[str, Courier] = {}
        # The last sequence announced to the loop. A courier reads no further: an event the
        # member has journaled but not yet announced may not have its barrier open yet, and
        # an answer (with handed-back offsets) that came before it would find no barrier.
        self._announced = 0

    def start(self) -> None:
        self._announced = self._journal.last_sequence()  # what an earlier run journaled
        for sub in self._journal.subscriptions():
            if sub.disabled_reason is None:
                self.add(sub)

    def add(self, sub: Subscription) -> None:
        """Deliver to ``sub`` (new, or changed: its courier is replaced)."""
        previous = self._couriers.pop(sub.id, None)
        if previous is not None:
            previous.stop()
        courier = Courier(
            sub,
            journal=self._journal,
            client=self._client_factory(),
            policy=self._policy,
            deliveries=self._deliveries,
            ceiling=lambda: self._announced,
            pass_over_after=self._pass_over_after,
        )
        self._couriers[sub.id] = courier
        courier.start()

    def remove(self, sub_id: str) -> None:
        """The subscription is gone: its courier stops, no barrier waits for it, and its
        metric series go once the courier has (a delivery it was finishing counts first)."""
        courier = self._couriers.pop(sub_id, None)
        if courier is not None:
            courier.stop()
            courier.after_stop(lambda: self._metrics.forget_webhook(sub_id))
        else:
            self._metrics.forget_webhook(sub_id)
        self._barriers.forget(sub_id)

    def announced(self, event: Event) -> None:
        """``event`` is announced (its barrier, if any, is open): deliver up to it.

        Only the couriers whose subscription wants it are woken now. The others pass over
        it later (``Courier.pass_over_later``), or with the next event they want: a
        journal read and a cursor write per subscriber for an event nobody there takes
        would sit on the loop exactly when the next event comes (an enforce's
        ``requested``, then at once its ``revoked``), holding the GIL the member thread
        needs to journal it."""
        self._announced = max(self._announced, event.sequence)
        for courier in self._couriers.values():
            if courier.subscription.disabled_reason is not None:
                continue  # its courier has ended (410 Gone)
            if courier.subscription.wants(event.type):
                courier.wake()
            else:
                courier.pass_over_later()

    async def close(self) -> None:
        couriers = list(self._couriers.values())
        self._couriers.clear()
        for courier in couriers:
            courier.stop()
        await asyncio.gather(*(c.stopped() for c in couriers), return_exceptions=True)

    # -- barriers -------------------------------------------------------------------------

    def open_barrier(self, event: Event, done: BarrierDone) -> None:
        waiting = [sub_id for sub_id, courier in self._couriers.items() if courier.owes(event)]
        self._barriers.open(event, waiting, done)

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        outcome = self._barriers.expire(event)
        if outcome is None:
            return BarrierOutcome(timed_out=True)
        for sub_id in outcome.waiting:
            self._deliveries.record(
                sub_id,
                event,
                DeliveryOutcome.BARRIER_TIMEOUT,
                error="revoke barrier timed out; the rebalance proceeded without this "
                "acknowledgement (delivery continues)",
            )
        log.warning(
            "revoke barrier timed out",
            sequence=event.sequence,
            event_type=event.type.value,
            waiting=list(outcome.waiting),
        )
        return outcome

    def _abandoned(self, barrier: RevokeBarrier, answering: str | None) -> None:
        """The member thread stopped waiting before ``barrier`` closed (the loop was busy):
        what its subscribers handed back goes nowhere. Say so, per subscriber that still
        exists (a deleted one's records and metric series are gone with it)."""
        for sub_id in barrier.handed_back:
            if sub_id == answering or sub_id not in self._couriers:
                continue
            self._deliveries.record(
                sub_id,
                barrier.event,
                DeliveryOutcome.OFFSETS_REJECTED,
                error="handed back, but the member stopped waiting for the barrier "
                "before it closed (the loop was busy): not committed",
            )
