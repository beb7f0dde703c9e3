"""Prometheus series for how far behind this member is, and how often its group rebalances.

* ``rebalance_sidecar_partition_lag{group,topic,partition}``: the lag of each partition this
  member owns now (bounded cardinality: a revoked partition's series is gone at the next
  scrape). Values come from ``PositionsView``'s last read; a scrape starts a new read when
  that one is older than its cache bound, so the figure is at most one scrape late. While
  Kafka does not answer, the last values read stay.
* ``rebalance_sidecar_seconds_since_last_rebalance{group}`` (absent before the first) and
  ``rebalance_sidecar_rebalances_last_hour{group}``, from ``RebalanceHistory``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.model import Assignment
from sidecar.positions import PositionsView
from sidecar.rebalance_history import HOUR_SECONDS, RebalanceHistory

PREFIX = "rebalance_sidecar_"


class LagCollector(Collector):
    def __init__(
        self,
        group_id: str,
        snapshot: Callable[[], Assignment],
        positions: PositionsView,
        history: RebalanceHistory,
    ) -> None:
        self._group = group_id
        self._snapshot = snapshot
        self._positions = positions
        self._history = history

    def collect(self) -> Iterator[Metric]:
        owned = self._snapshot().partitions
        if owned:
            self._positions.refresh_soon()
        known = self._positions.last_known()
        lag = GaugeMetricFamily(
            f"{PREFIX}partition_lag",
            "max(high watermark - committed offset, 0) of each partition this member owns "
            "(at most one scrape late; the last value stays while Kafka is away).",
            labels=["group", "topic", "partition"],
        )
        for tp in owned:
            position = known.get((tp.topic, tp.partition))
            if position is not None and position.lag is not None:
                lag.add_metric([self._group, tp.topic, str(tp.partition)], float(position.lag))
        yield lag
        now = time.time()
        last = self._history.last
        if last is not None:
            since = GaugeMetricFamily(
                f"{PREFIX}seconds_since_last_rebalance",
                "Seconds since this member's last completed rebalance.",
                labels=["group"],
            )
            since.add_metric([self._group], max(now - last, 0.0))
            yield since
        hour = GaugeMetricFamily(
            f"{PREFIX}rebalances_last_hour",
            "Rebalances this member completed in the last hour.",
            labels=["group"],
        )
        hour.add_metric([self._group], float(self._history.since(now - HOUR_SECONDS)))
        yield hour
