"""Building one sidecar's parts, wired together, in one place.

``build_components`` opens the journal and wires the handoff, the dispatcher, the webhook
registry, the SSE feed and the fleet journal exactly as the daemon runs them. It starts
no thread and opens no listener: the daemon starts them, and tests and benchmarks that
want the daemon's own wiring without a group member or HTTP call it directly.

Call it on the running loop (the handoff and the feed belong to it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial

from prometheus_client import CollectorRegistry

from sidecar import __version__
from sidecar.delivery import Dispatcher, RetryPolicy
from sidecar.errors import StartupError
from sidecar.feed import Feed
from sidecar.fleet import CURSOR as FLEET_CURSOR
from sidecar.fleet import FleetJournal
from sidecar.handoff import BarrierDone, BarrierOutcome, Handoff
from sidecar.journal import Journal, JournalUnopenable
from sidecar.lag_metrics import LagCollector
from sidecar.metrics import Metrics, StateSources
from sidecar.model import Assignment, Event, MemberState
from sidecar.positions import PositionsView
from sidecar.rebalance_history import RebalanceHistory
from sidecar.settings import InvalidSettings, Settings
from sidecar.subscriptions import Registry
from sidecar.webhook_http import WebhookClient
from sidecar.webhook_tls import WebhookTLS


class Fanout:
    """Where the handoff delivers: one event goes to webhooks, SSE and the fleet topic."""

    def __init__(self, dispatcher: Dispatcher, feed: Feed, fleet: FleetJournal | None) -> None:
        self._dispatcher = dispatcher
        self._feed = feed
        self._fleet = fleet

    def on_event(self, event: Event) -> None:
        self._dispatcher.announced(event)
        self._feed.publish(event)
        if self._fleet is not None:
            self._fleet.wake()

    def open_barrier(self, event: Event, done: BarrierDone) -> None:
        self._dispatcher.open_barrier(event, done)

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        return self._dispatcher.barrier_expired(event)


@dataclass(frozen=True, slots=True)
class Components:
    """The wired parts of one sidecar; nothing started yet."""

    settings: Settings
    metrics_registry: CollectorRegistry
    metrics: Metrics
    sources: StateSources
    journal: Journal
    handoff: Handoff
    feed: Feed
    dispatcher: Dispatcher
    registry: Registry
    fleet: FleetJournal | None
    positions: PositionsView

    def start(self) -> None:
        """Start the loop-side workers and declare the settings' webhooks."""
        self.dispatcher.start()
        self.registry.declare(self.settings.webhooks)
        if self.fleet is not None:
            self.fleet.start()

    async def close(self) -> None:
        """For tests and benchmarks; the daemon closes part by part (``daemon.STOP_STEPS``)."""
        await self.dispatcher.close()
        if self.fleet is not None:
            await self.fleet.close(timeout=5.0)
        self.journal.close()


def build_components(
    settings: Settings,
    metrics_registry: CollectorRegistry | None = None,
    *,
    journal_durable: bool = False,
    retry: RetryPolicy | None = None,
) -> Components:
    """Open the journal and wire everything around it; ``StartupError`` if it cannot."""
    loop = asyncio.get_running_loop()
    try:
        tls = WebhookTLS.from_settings(settings)  # before the journal: nothing to undo
    except InvalidSettings as exc:
        raise StartupError(str(exc)) from None
    try:
        # The loop side only reads and records deliveries; the member thread opens its own
        # durable connection for the appends that must survive kill -9.
        journal = Journal(settings.data_dir, durable=journal_durable)
    except (OSError, JournalUnopenable) as exc:
        raise StartupError(f"SIDECAR_DATA_DIR={settings.data_dir}: {exc}") from None
    metrics_registry = metrics_registry or CollectorRegistry()
    metrics = Metrics(metrics_registry)
    metrics.describe(
        __version__, settings.group_id, settings.protocol_name, settings.group_protocol
    )
    initial = Assignment(
        group_id=settings.group_id,
        member_id=None,
        group_instance_id=settings.group_instance_id,
        generation_id=-1,
        protocol=settings.protocol_name,
        state=MemberState.STARTING,
        partitions=(),
        sequence=journal.last_sequence(),
    )
    handoff = Handoff(loop, initial)
    sources = StateSources(
        pending_events=journal.pending_events_if_readable,
        fleet_pending_events=(
            (lambda: journal.events_past_if_readable(FLEET_CURSOR))
            if settings.events_topic
            else None
        ),
        journal_used_bytes=journal.used_bytes_if_readable,
        journal_max_bytes=settings.journal_max_bytes,
        rebalance_history=RebalanceHistory(max(3600.0, settings.flapping_window_ms / 1000)),
    )
    metrics.observe_state(lambda: handoff.snapshot, sources)
    positions = PositionsView(settings, lambda: handoff.snapshot, history=sources.rebalance_history)
    metrics_registry.register(
        LagCollector(
            settings.group_id, lambda: handoff.snapshot, positions, sources.rebalance_history
        )
    )
    dispatcher = Dispatcher(
        journal,
        metrics,
        retry
        or RetryPolicy(
            settings.webhook_backoff_initial_ms / 1000,
            settings.webhook_backoff_max_ms / 1000,
            settings.webhook_max_attempts,
            settings.webhook_max_age_ms / 1000,
        ),
        client_factory=partial(WebhookClient, tls_source=tls.context) if tls else WebhookClient,
    )
    registry = Registry(
        journal, dispatcher, settings.webhook_allowed_hosts, max_count=settings.webhook_max_count
    )
    feed = Feed()
    fleet = FleetJournal(settings, journal, metrics) if settings.events_topic else None
    handoff.attach(Fanout(dispatcher, feed, fleet))
    return Components(
        settings=settings,
        metrics_registry=metrics_registry,
        metrics=metrics,
        sources=sources,
        journal=journal,
        handoff=handoff,
        feed=feed,
        dispatcher=dispatcher,
        registry=registry,
        fleet=fleet,
        positions=positions,
    )
