"""The member's link to Kafka: what librdkafka's error and statistics callbacks tell us.

Errors are classified (fatal, unreachable, refused, other), counted, and logged without
flooding (librdkafka repeats transport errors many times a second during an outage).
Statistics say whether a broker connection is up and what the join state was when the
sample was taken. Only the member thread uses a ``KafkaLink``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from sidecar.metrics import Metrics, StateSources

# At most one log line per error code per this many seconds; the rest are counted.
ERROR_LOG_SECONDS = 10.0

_UNREACHABLE = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE)
_REFUSED = (
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
)


@dataclass(frozen=True)
class Sample:
    """One statistics sample: the join state and when librdkafka took it."""

    join_state: str | None
    sampled_at: float  # librdkafka's CLOCK_MONOTONIC, the clock of time.monotonic() on Linux


class KafkaLink:
    def __init__(self, metrics: Metrics, sources: StateSources, log: Callable[[], Any]) -> None:
        self._metrics = metrics
        self._sources = sources
        self._log = log
        self.connected = False
        # Monotonic time of the first unreachable error since Kafka last answered us.
        self.unreachable_since: float | None = None
        self.error: str | None = None
        self.fatal: KafkaError | None = None
        self._logged_at: dict[int, float] = {}
        self._suppressed: dict[int, int] = {}

    def new_session(self) -> None:
        self.fatal = None

    def failed(self, reason: str) -> None:
        """The member stops (a fail stop, a crash): the error says why."""
        self.error = reason

    def presumed_lost(self, reason: str) -> None:
        """No answer past the session timeout: the error says so until Kafka answers."""
        self.error = reason

    def healthy(self) -> None:
        """An assignment arrived: the coordinator answered, whatever was wrong is over."""
        self.connected = True
        self.unreachable_since = None
        self.error = None

    def contact(self) -> bool:
        """A broker answered us (a commit, a metadata request): the link is up again.

        Without statistics, an outage that ends without a rebalance would otherwise leave
        ``connected`` false for good. ``True`` when that changed anything.
        """
        changed = not self.connected or (self.error is not None and self.fatal is None)
        self.connected = True
        self.unreachable_since = None
        if self.fatal is None:
            self.error = None
        return changed

    def on_error(self, error: KafkaError) -> None:
        code = error.code()
        self._metrics.kafka_errors.labels(error.name()).inc()
        log = self._log()
        if error.fatal() or code == KafkaError._FATAL:
            self.fatal = error
            self.error = f"fatal: {error.str()}"
            log.error("fatal Kafka error", error=error.str(), code=error.name())
        elif code in _UNREACHABLE:
            if code == KafkaError._ALL_BROKERS_DOWN:
                self.connected = False
                # One broker down is not a partition from the group; all of them is.
                if self.unreachable_since is None:
                    self.unreachable_since = time.monotonic()
            self.error = error.str()
            if self._should_log(code):
                log.warning(
                    "Kafka unreachable",
                    error=error.str(),
                    code=error.name(),
                    repeated=self._suppressed.pop(code, 0),
                )
        elif code in _REFUSED:
            self.connected = False
            self.error = error.str()
            if self._should_log(code):
                log.error("Kafka refused us", error=error.str(), code=error.name())
        elif self._should_log(code):
            log.warning(
                "Kafka error",
                error=error.str(),
                code=error.name(),
                repeated=self._suppressed.pop(code, 0),
            )

    def on_statistics(self, raw: str) -> tuple[bool, Sample]:
        """Record a statistics sample; ``True`` when the connection state changed."""
        self._sources.set_statistics(raw)
        stats = self._sources.statistics
        brokers = [b for b in (stats.get("brokers") or {}).values() if b.get("nodeid", -1) != -1]
        up = any(b.get("state") == "UP" for b in brokers)
        changed = False
        if up:
            self.unreachable_since = None
        elif brokers and self.unreachable_since is None:
            self.unreachable_since = time.monotonic()  # a silent partition gives no errors
        if up != self.connected and (up or brokers):
            self.connected = up
            if up and self.error and not self.error.startswith("fatal"):
                self.error = None
            changed = True
        cgrp = stats.get("cgrp") or {}
        return changed, Sample(cgrp.get("join_state"), float(stats.get("ts", 0)) / 1e6)

    def _should_log(self, code: int) -> bool:
        now = time.monotonic()
        if now - self._logged_at.get(code, -ERROR_LOG_SECONDS) >= ERROR_LOG_SECONDS:
            self._logged_at[code] = now
            return True
        self._suppressed[code] = self._suppressed.get(code, 0) + 1
        return False
