"""Prometheus collectors, registered on an injected ``CollectorRegistry``.

Names are contract (docs/contract.md) and mirror the Java consumer's coordinator metrics
(KIP-429). Counters and histograms are updated where things happen (both threads:
prometheus_client is thread-safe); gauges that describe *state* are read from the
current snapshot at scrape time by ``StateCollector``, so they can never go stale.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.model import Assignment, DeliveryOutcome, MemberState
from sidecar.rebalance_history import RebalanceHistory

PREFIX = "rebalance_sidecar_"

# A barrier can hold a rebalance for up to the revoke timeout (default 30 s).
_REBALANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
_CALLBACK_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DELIVERY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# librdkafka's cgrp "state" values, exported as a numeric gauge with the name as a label.
_CGRP_STATES = (
    "init",
    "term",
    "query-coord",
    "wait-coord",
    "wait-broker",
    "wait-broker-transport",
    "up",
)


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # The standard process_* and python_info series, on the injected registry (not the
        # global one), so a scrape of the sidecar has them and tests stay isolated.
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        self.build = Info(
            f"{PREFIX}build",
            "The sidecar's version and the group it serves (value always 1).",
            registry=registry,
        )
        self.rebalances = Counter(
            f"{PREFIX}rebalances_total",
            "Rebalances this member completed (an assignment for a new generation).",
            registry=registry,
        )
        self.failed_rebalances = Counter(
            f"{PREFIX}failed_rebalances_total",
            "Rebalances that failed: the assignment was lost instead of handed over.",
            registry=registry,
        )
        self.rebalance_duration = Histogram(
            f"{PREFIX}rebalance_duration_seconds",
            "From the first sign of a rebalance (revoke callback, enforce request or "
            "coordinator state) to the assignment of the new generation.",
            buckets=_REBALANCE_BUCKETS,
            registry=registry,
        )
        self.callback_seconds = {
            kind: Histogram(
                f"{PREFIX}partitions_{kind}_callback_seconds",
                f"Time our {callback} callback held the group (journal, barrier, commits).",
                buckets=_CALLBACK_BUCKETS,
                registry=registry,
            )
            for kind, callback in (
                ("assigned", "on_assign"),
                ("revoked", "on_revoke"),
                ("lost", "on_lost"),
            )
        }
        self.deliveries = Counter(
            f"{PREFIX}webhook_deliveries_total",
            "Webhook delivery attempts and their end, by webhook id and outcome "
            "(delivered, failed, gave_up, disabled, barrier_timeout, offsets_rejected).",
            ["webhook", "outcome"],
            registry=registry,
        )
        self.delivery_duration = Histogram(
            f"{PREFIX}webhook_delivery_duration_seconds",
            "Duration of one webhook POST, by webhook id.",
            ["webhook"],
            buckets=_DELIVERY_BUCKETS,
            registry=registry,
        )
        self.commits = Counter(
            f"{PREFIX}commits_total",
            "Offset commits made for the application, by source (api, revoke) and outcome "
            "(committed, failed, unknown: no answer from Kafka within the bound, or before a "
            "rebalance began or the consumer closed).",
            ["source", "outcome"],
            registry=registry,
        )
        self.offsets_unknown = Counter(
            f"{PREFIX}committed_offsets_unknown_total",
            "Partitions assigned whose committed offset could not be read within "
            "SIDECAR_COMMITTED_TIMEOUT_MS (offset_status unknown in the event).",
            registry=registry,
        )
        self.enforced = Counter(
            f"{PREFIX}enforced_rebalances_total",
            "Accepted enforce-rebalance requests, by whether they started a rebalance "
            "(started) or joined one already under way (coalesced).",
            ["result"],
            registry=registry,
        )
        self.fleet_produced = Counter(
            f"{PREFIX}fleet_events_total",
            "Events produced to the fleet topic, by outcome (delivered; failed: an attempt "
            "failed, retried; gave_up: older than the journal's retention age once an attempt "
            "failed, or never deliverable: too large for the producer or the topic on its own).",
            ["outcome"],
            registry=registry,
        )
        self.kafka_errors = Counter(
            f"{PREFIX}kafka_errors_total",
            "Errors librdkafka reported, by error name.",
            ["error"],
            registry=registry,
        )

    def forget_webhook(self, webhook: str) -> None:
        """Drop a deleted webhook's series: an application that registers a webhook each
        time it starts (and deletes the old one) would otherwise grow the scrape by a
        counter per outcome and a histogram on every restart, for the sidecar's lifetime."""
        for outcome in DeliveryOutcome:
            _remove(self.deliveries, webhook, outcome.value)
        _remove(self.delivery_duration, webhook)

    def describe(self, version: str, group_id: str, protocol: str, group_protocol: str) -> None:
        self.build.info(
            {
                "version": version,
                "group": group_id,
                "protocol": protocol,
                "group_protocol": group_protocol,
            }
        )

    def observe_state(self, snapshot: Callable[[], Assignment], state: StateSources) -> None:
        self.registry.register(StateCollector(snapshot, state))


def _remove(metric: Counter | Histogram, *labels: str) -> None:
    """``remove`` of a child that may not exist: prometheus-client before 0.22 raises
    KeyError for one never observed (a webhook has a series only per outcome it had)."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


@dataclass
class StateSources:
    """Values the state collector reads at scrape time (set from either thread)."""

    pending_events: Callable[[], int | None]  # None: the journal cannot be read now
    # Events the fleet producer has still to produce (None as above); unset: no fleet topic.
    fleet_pending_events: Callable[[], int | None] | None = None
    # Bytes of the journal's database in use (None as above); unset: not reported.
    journal_used_bytes: Callable[[], int | None] | None = None
    journal_max_bytes: int = 0  # SIDECAR_JOURNAL_MAX_BYTES; 0: no size budget
    last_rebalance_at: float = 0.0
    rebalance_history: RebalanceHistory = field(default_factory=RebalanceHistory)
    statistics: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set_statistics(self, raw_json: str) -> None:
        parsed = json.loads(raw_json)
        with self.lock:
            self.statistics = parsed


class StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], Assignment], sources: StateSources) -> None:
        self._snapshot = snapshot
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        current = self._snapshot()
        yield _gauge("assigned_partitions", "Partitions this member owns.", len(current.partitions))
        yield _gauge(
            "generation_id", "Group generation (member epoch for KIP-848).", current.generation_id
        )
        yield _gauge(
            "last_rebalance_timestamp_seconds",
            "Unix time of the last completed rebalance (0: none yet).",
            self._sources.last_rebalance_at,
        )
        pending = self._sources.pending_events()
        if pending is not None:  # absent while the journal's storage fails: the rest stays
            yield _gauge(
                "journal_pending_events",
                "Journaled events some active webhook has not yet acknowledged or given up.",
                pending,
            )
        fleet = self._sources.fleet_pending_events
        fleet_pending = fleet() if fleet is not None else None
        if fleet_pending is not None:
            yield _gauge(
                "fleet_pending_events",
                "Journaled events not yet produced to the fleet topic (SIDECAR_EVENTS_TOPIC).",
                fleet_pending,
            )
        used = self._sources.journal_used_bytes
        used_bytes = used() if used is not None else None
        if used_bytes is not None:
            yield _gauge(
                "journal_used_bytes",
                "Bytes of the journal's database in use (its pages except the free ones SQLite "
                "reuses; indexes and the delivery log included, the WAL not).",
                used_bytes,
            )
        if self._sources.journal_max_bytes:
            yield _gauge(
                "journal_max_bytes",
                "The journal's size budget, SIDECAR_JOURNAL_MAX_BYTES (absent: none).",
                self._sources.journal_max_bytes,
            )
        state = GaugeMetricFamily(
            f"{PREFIX}member_state", "1 for the member's current state.", labels=["state"]
        )
        for value in MemberState:
            state.add_metric([value.value], 1.0 if current.state is value else 0.0)
        yield state
        yield from self._librdkafka()

    def _librdkafka(self) -> Iterator[Metric]:
        with self._sources.lock:
            stats = self._sources.statistics
        cgrp = stats.get("cgrp") or {}
        if cgrp:
            coordinator = GaugeMetricFamily(
                f"{PREFIX}librdkafka_coordinator_state",
                "librdkafka consumer group coordinator state (1 for the current one).",
                labels=["state"],
            )
            for name in _CGRP_STATES:
                coordinator.add_metric([name], 1.0 if cgrp.get("state") == name else 0.0)
            yield coordinator
            join = GaugeMetricFamily(
                f"{PREFIX}librdkafka_join_state",
                "librdkafka join state (1 for the current one).",
                labels=["join_state"],
            )
            join.add_metric([str(cgrp.get("join_state", "unknown"))], 1.0)
            yield join
            yield CounterMetricFamily(
                f"{PREFIX}librdkafka_rebalances",
                "Rebalances librdkafka counted for this consumer (cgrp.rebalance_cnt; "
                "restarts from 0 with each new consumer).",
                value=float(cgrp.get("rebalance_cnt", 0)),
            )
            yield _gauge(
                "librdkafka_rebalance_age_seconds",
                "Time since librdkafka's last rebalance (cgrp.rebalance_age).",
                cgrp.get("rebalance_age", 0) / 1000.0,
            )
        brokers = stats.get("brokers") or {}
        if brokers:
            # Not a summary (librdkafka computes the window), so no ``quantile`` label:
            # one gauge per statistic, as Prometheus' conventions ask.
            rtt_avg = GaugeMetricFamily(
                f"{PREFIX}librdkafka_broker_rtt_average_seconds",
                "Broker round-trip time, average over librdkafka's statistics window.",
                labels=["broker"],
            )
            rtt_p99 = GaugeMetricFamily(
                f"{PREFIX}librdkafka_broker_rtt_p99_seconds",
                "Broker round-trip time, 99th percentile over the statistics window.",
                labels=["broker"],
            )
            up = GaugeMetricFamily(
                f"{PREFIX}librdkafka_broker_up",
                "1 when the connection to the broker is UP.",
                labels=["broker"],
            )
            for broker in brokers.values():
                name = str(broker.get("name", "?"))
                if broker.get("nodeid", -1) == -1:
                    continue  # bootstrap placeholders
                window = broker.get("rtt") or {}
                rtt_avg.add_metric([name], window.get("avg", 0) / 1e6)
                rtt_p99.add_metric([name], window.get("p99", 0) / 1e6)
                up.add_metric([name], 1.0 if broker.get("state") == "UP" else 0.0)
            yield rtt_avg
            yield rtt_p99
            yield up


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}{name}", documentation, value=float(value))
