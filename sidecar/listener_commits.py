"""The listener's commits inside a rebalance callback: the offsets blocking subscribers
hand back on ``revoked``, and a ``POST /commit`` served while the barrier waits.

Each is bounded (``sidecar.callback_commits``) by ``SIDECAR_COMMIT_TIMEOUT_MS`` and never
past the bound of the callback under way; while one waits for Kafka, ``kafka_wait_until``
tells the liveness probe how long the poll loop may be silent. Member thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer

from sidecar.callback_commits import Outcome, UnconfirmedCommits, commit_bounded
from sidecar.errors import CommitFailed, CommitUnanswered
from sidecar.handoff import BarrierOutcome
from sidecar.journal import Journal
from sidecar.link import KafkaLink
from sidecar.metrics import Metrics
from sidecar.model import Delivery, DeliveryOutcome, Event, PartitionOffset
from sidecar.settings import Settings
from sidecar.tracing import commit_span

# After a commit inside a callback returns, how long liveness still lets the poll loop be
# silent for it (the rest of the callback, then the loop's next tick).
_AFTER_KAFKA_WAIT_SECONDS = 5.0


class ListenerCommits:
    """The rebalance listener's commits (``sidecar.listener``): ``log`` and ``journal``
    are read at each use (the listener rebinds its log when the member's identity
    changes; the member thread opens the journal after start)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        link: KafkaLink,
        log: Callable[[], Any],
        journal: Callable[[], Journal | None],
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._link = link
        self._log = log
        self._journal = journal
        # While a commit waits inside a callback: by when its bound ends that wait
        # (monotonic), for the liveness probe. ``None`` otherwise.
        self._kafka_wait_until: float | None = None
        # The end of the commits' bound inside the callback under way (monotonic).
        self._callback_deadline: float | None = None
        self._unconfirmed = UnconfirmedCommits()

    @property
    def kafka_wait_until(self) -> float | None:
        return self._kafka_wait_until

    @property
    def unconfirmed(self) -> UnconfirmedCommits:
        """Commits made inside callbacks recorded ``unknown``: Kafka's late answers."""
        return self._unconfirmed

    def callback_bound(self, deadline: float | None) -> None:
        """A callback that may commit starts (its bound's end, monotonic) or ends (``None``)."""
        self._callback_deadline = deadline

    def commit(self, consumer: Consumer, offsets: tuple[PartitionOffset, ...], source: str) -> None:
        """Commit inside a callback, bounded (``sidecar.callback_commits``): by
        ``SIDECAR_COMMIT_TIMEOUT_MS``, and never past the callback's own bound.
        ``CommitUnanswered`` when the outcome is unknown, ``CommitFailed`` when librdkafka
        refused to send it. The wait is marked for the liveness probe."""
        deadline = time.monotonic() + self._settings.commit_timeout_ms / 1000
        if self._callback_deadline is not None:
            deadline = min(deadline, self._callback_deadline)
        self._kafka_wait_until = deadline + _AFTER_KAFKA_WAIT_SECONDS
        try:
            result = commit_bounded(consumer, offsets, deadline)
        finally:
            # The callback goes on (journal records, then poll() returns): the loop is
            # not silent for nothing if it ticks within the grace.
            self._kafka_wait_until = time.monotonic() + _AFTER_KAFKA_WAIT_SECONDS
        if result.outcome is Outcome.COMMITTED:
            self.done(offsets, source, "committed")
            return
        if result.outcome is Outcome.FAILED:
            self.done(offsets, source, "failed")
            raise CommitFailed(result.error or "commit failed")
        self._unconfirmed.add(offsets)
        self.done(offsets, source, "unknown")
        self._log().warning(
            "a commit inside a rebalance callback was not answered within its bound",
            source=source,
            offsets=[po.as_dict() for po in offsets],
        )
        raise CommitUnanswered(result.error or "outcome unknown")

    def done(self, offsets: tuple[PartitionOffset, ...], source: str, outcome: str) -> None:
        """Count a commit's outcome: ``committed``, ``failed`` or ``unknown``."""
        self._metrics.commits.labels(source, outcome).inc()
        if outcome == "committed":
            self._link.contact()  # the coordinator answered
            self._log().info(
                "offsets committed", source=source, offsets=[po.as_dict() for po in offsets]
            )

    def hand_back(self, consumer: Consumer, event: Event, outcome: BarrierOutcome) -> None:
        """Commit what the application handed back, as the member that still owns it."""
        journal = self._journal()
        assert journal is not None
        committing = time.time()
        try:
            self.commit(consumer, outcome.offsets, source="revoke")
            outcome_name, error = DeliveryOutcome.OFFSETS_COMMITTED, None
        except CommitUnanswered as exc:
            outcome_name, error = DeliveryOutcome.COMMIT_UNKNOWN, str(exc)
        except CommitFailed as exc:
            outcome_name, error = DeliveryOutcome.COMMIT_FAILED, str(exc)
            self._log().error("committing offsets handed back on revoke failed", error=error)
        commit_span(event.body, committing, len(outcome.offsets), error)
        detail = error or ", ".join(f"{p.topic}[{p.partition}]={p.offset}" for p in outcome.offsets)
        for sub_id in outcome.handed_back:  # not those that acknowledged with nothing
            journal.record(
                Delivery(
                    subscription_id=sub_id,
                    sequence=event.sequence,
                    event_id=event.id,
                    outcome=outcome_name,
                    attempts=0,
                    status_code=None,
                    error=detail,
                    at=time.time(),
                )
            )
