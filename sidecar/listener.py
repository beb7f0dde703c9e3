"""What librdkafka tells the member, turned into events: the rebalance listener.

librdkafka calls these from ``poll()``/``close()`` on the member thread: the rebalance
callbacks, the error and statistics callbacks. Each feeds the membership core
(``sidecar.membership``), journals the event it drafts, announces it or holds the group
at the barrier until blocking subscribers answered, commits offsets they handed back,
and publishes the new snapshot. The member thread also calls ``lose`` when partitions go
without a callback (a consumer that died, a session presumed expired).

Each callback comes with the number of its consumer session (``sidecar.session``), whose
state says what it may do: one from a session given up on is only applied and logged.

Callbacks catch everything: an exception escaping one during ``close()`` escapes
``close()`` itself. A journal that cannot append is a fail stop (``JournalFailed``,
through ``sidecar.fail_stop``). The listener has no public mutable state: the member
reads what it needs through properties and changes it through methods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.callback_commits import UnconfirmedCommits
from sidecar.fail_stop import FailStop
from sidecar.handoff import BarrierOutcome, Handoff
from sidecar.journal import Journal
from sidecar.kafka.group_calls import committed_offsets, read_identity
from sidecar.link import KafkaLink
from sidecar.listener_commits import ListenerCommits
from sidecar.membership import Membership, RebalanceCompleted
from sidecar.metrics import Metrics, StateSources
from sidecar.model import (
    Event,
    EventDraft,
    EventType,
    PartitionOffset,
    TopicPartition,
)
from sidecar.session import Callback, Handling, Session
from sidecar.settings import Settings
from sidecar.tracing import RebalanceTraces

log = structlog.get_logger("sidecar.member")

# A journal append is retried after these pauses before the member fails stop.
_JOURNAL_RETRY_SECONDS = (0.1, 0.5, 1.0)


class JournalFailed(RuntimeError):
    """The journal refused an append even after retries: the member must stop."""


class RebalanceListener:
    def __init__(
        self,
        settings: Settings,
        core: Membership,
        handoff: Handoff,
        metrics: Metrics,
        sources: StateSources,
        serve_commits: Callable[[], None],
        fail_stop: FailStop,
        session: Callable[[], Session | None],
        barrier_opening: Callable[[], None] = lambda: None,
    ) -> None:
        self._settings = settings
        self._core = core
        self._handoff = handoff
        self._metrics = metrics
        self._sources = sources
        self._serve_commits = serve_commits
        self._fail_stop = fail_stop
        self._session = session
        self._barrier_opening = barrier_opening
        self._journal: Journal | None = None  # opened by the member thread
        self._link = KafkaLink(metrics, sources, lambda: self._log)
        self._log: Any = log.bind(group_id=settings.group_id)
        self._commits = ListenerCommits(
            settings, metrics, self._link, lambda: self._log, lambda: self._journal
        )
        self._traces = RebalanceTraces()
        fail_stop.on_stop(self._stopping)

    # -- read-only views -------------------------------------------------------------------

    @property
    def link(self) -> KafkaLink:
        return self._link

    @property
    def log(self) -> Any:
        return self._log

    @property
    def failed(self) -> str | None:
        return self._fail_stop.reason

    @property
    def kafka_wait_until(self) -> float | None:
        return self._commits.kafka_wait_until

    @property
    def unconfirmed(self) -> UnconfirmedCommits:
        """Commits made inside callbacks recorded ``unknown``: Kafka's late answers."""
        return self._commits.unconfirmed

    def open(self, journal: Journal) -> Journal:
        """The member thread opened the journal: events are appended to it from now on."""
        self._journal = journal
        return journal

    def _handling(self, callback: Callback, session: int) -> Handling:
        current = self._session()
        if current is None:
            return Handling.APPLY_ONLY if callback is Callback.ASSIGN else Handling.IGNORE
        handling = current.handling(callback, session)
        if handling is not Handling.REPORT:
            self._log.warning(
                "rebalance callback from a consumer session given up on: not reported",
                callback=callback.value,
                session=session,
                current_session=current.number,
                session_state=current.state.value,
            )
        return handling

    # -- librdkafka's callbacks ----------------------------------------------------------

    def on_assign(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition], session: int = 0
    ) -> None:
        started = time.perf_counter()
        try:
            if self._settings.cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
            if partitions:
                consumer.pause(partitions)
            if self.failed is not None:
                return
            if self._handling(Callback.ASSIGN, session) is not Handling.REPORT:
                self._link.contact()  # Kafka answered: the member recreates its consumer
                return
            offsets = self._committed(consumer, partitions)
            self.read_identity(consumer)
            self.link.healthy()
            self._assigned(offsets, "partitions assigned", started)
        except JournalFailed as exc:
            self.failing(str(exc))
        except Exception:
            self.log.exception("on_assign failed")
        finally:
            self._metrics.callback_seconds["assigned"].observe(time.perf_counter() - started)

    def joined_with_nothing(self) -> None:
        """KIP-848, a member with nothing to own: no callback comes for an empty assignment
        (``Membership.joined_with_nothing``); report it as one, as the classic protocol's
        ``on_assign`` with no partitions does. Member thread, between polls."""
        if self.failed is not None:
            return
        try:
            self._assigned((), "joined the group with no partitions assigned", time.perf_counter())
        except JournalFailed as exc:
            self.failing(str(exc))

    def _assigned(self, offsets: tuple[PartitionOffset, ...], what: str, started: float) -> None:
        draft, completed = self._core.assigned(offsets, time.monotonic())
        self.completed(completed)
        event = self.record(draft)
        self._handoff.announce(event)
        self.log.info(
            what,
            partitions=len(offsets),
            owned=len(self._core.owned),
            sequence=event.sequence,
            duration_s=round(time.perf_counter() - started, 4),
        )

    def on_revoke(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition], session: int = 0
    ) -> None:
        if self._handling(Callback.REVOKE, session) is Handling.REPORT:
            self._on_taken(consumer, partitions, EventType.REVOKED)

    def on_lost(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition], session: int = 0
    ) -> None:
        if self._handling(Callback.LOST, session) is Handling.REPORT:
            self._on_taken(consumer, partitions, EventType.LOST)

    def on_error(self, error: KafkaError) -> None:
        self.link.on_error(error)
        self.publish()

    def on_statistics(self, raw: str) -> None:
        changed, sample = self.link.on_statistics(raw)
        if self._core.sample(sample.join_state, sample.sampled_at, time.monotonic()):
            changed = True
        if changed:
            self.publish()

    def _on_taken(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition], kind: EventType
    ) -> None:
        started = time.perf_counter()
        label = "revoked" if kind is EventType.REVOKED else "lost"
        if self.failed is not None:
            return
        self._commits.callback_bound(time.monotonic() + self._callback_bound())
        try:
            self.read_identity(consumer)
            draft = self._core.taken(
                (TopicPartition(p.topic, p.partition) for p in partitions),
                kind,
                time.monotonic(),
            )
            if draft.type is not kind:  # the membership was replaced: a loss
                kind, label = draft.type, "lost"
                self.log.warning("revoked under a replaced membership: reported lost")
            if kind is EventType.LOST:
                self._metrics.failed_rebalances.inc()
            event = self.record(draft)
            outcome = self._hold(event)
            if outcome.offsets and kind is EventType.REVOKED:
                self._commits.hand_back(consumer, event, outcome)
            self.log.info(
                f"partitions {label}",
                partitions=len(draft.partitions),
                sequence=event.sequence,
                acknowledged=len(outcome.acknowledged),
                gave_up=len(outcome.gave_up),
                barrier_timed_out=outcome.timed_out,
                waiting=list(outcome.waiting),
                duration_s=round(time.perf_counter() - started, 4),
            )
        except JournalFailed as exc:
            self.failing(str(exc))
        except Exception:
            self.log.exception(f"on_{label[:-1] if kind is EventType.REVOKED else label} failed")
        finally:
            self._commits.callback_bound(None)
            self._metrics.callback_seconds[label].observe(time.perf_counter() - started)

    def _callback_bound(self) -> float:
        """How long a callback may hold the group: the barrier, then one commit's bound."""
        return (self._settings.revoke_timeout_ms + self._settings.commit_timeout_ms) / 1000

    # -- partitions gone without a callback ----------------------------------------------

    def lose(self, draft: EventDraft, why: str) -> None:
        """Report ``draft`` (lost partitions, already out of the core) through the barrier."""
        started = time.perf_counter()
        self._metrics.failed_rebalances.inc()
        try:
            event = self.record(draft)
        except JournalFailed as exc:
            self.failing(str(exc))
            return
        self._commits.callback_bound(time.monotonic() + self._callback_bound())
        try:
            outcome = self._hold(event)
        finally:
            self._commits.callback_bound(None)
        self._metrics.callback_seconds["lost"].observe(time.perf_counter() - started)
        self.log.warning(
            why,
            partitions=len(draft.partitions),
            sequence=event.sequence,
            reason=draft.reason,
            barrier_timed_out=outcome.timed_out,
        )

    # -- helpers -------------------------------------------------------------------------

    def _hold(self, event: Event) -> BarrierOutcome:
        """The barrier; the application may commit the revoked partitions meanwhile."""
        try:
            self._barrier_opening()
            return self._handoff.await_barrier(
                event, self._settings.revoke_timeout_ms / 1000, serve=self._serve_commits
            )
        finally:
            self._core.barrier_over()

    def commit(self, consumer: Consumer, offsets: tuple[PartitionOffset, ...], source: str) -> None:
        """Commit inside a callback, bounded (``sidecar.listener_commits``)."""
        self._commits.commit(consumer, offsets, source)

    def commit_done(self, offsets: tuple[PartitionOffset, ...], source: str, outcome: str) -> None:
        """Count a commit's outcome: ``committed``, ``failed`` or ``unknown``."""
        self._commits.done(offsets, source, outcome)

    def _committed(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition]
    ) -> tuple[PartitionOffset, ...]:
        if not partitions:
            return ()
        read = committed_offsets(consumer, partitions, self._settings.committed_timeout_ms / 1000)
        if read.unknown:
            # The event says "unknown", not "none": the app must not start from the reset
            # policy (it would reprocess or skip what another member committed).
            self._metrics.offsets_unknown.inc(read.unknown)
            self.log.warning(
                "committed offsets unknown after retries",
                unknown=read.unknown,
                attempts=read.attempts,
                error=read.error,
            )
        else:
            self.link.contact()  # the coordinator answered
        return read.offsets

    def read_identity(self, consumer: Consumer) -> bool:
        """Refresh member id and generation; ``True`` when either changed."""
        identity = read_identity(consumer)
        if identity is None or not self._core.identify(*identity):
            return False
        self._log = log.bind(
            group_id=self._settings.group_id, member_id=identity[0], generation_id=identity[1]
        )
        return True

    def completed(self, completed: RebalanceCompleted | None) -> None:
        if completed is None:
            return
        self._metrics.rebalances.inc()
        self._sources.last_rebalance_at = time.time()
        self._sources.rebalance_history.completed(self._sources.last_rebalance_at)
        if completed.duration_s is not None:
            self._metrics.rebalance_duration.observe(completed.duration_s)
            self.log.info("rebalance completed", duration_s=round(completed.duration_s, 4))

    def record(self, draft: EventDraft) -> Event:
        """Journal ``draft`` (retrying a failing disk) and publish its sequence."""
        assert self._journal is not None
        draft, appending = self._traces.stamp(draft), time.time()
        for pause in (*_JOURNAL_RETRY_SECONDS, None):
            try:
                event = self._journal.append(draft)
            except Exception as exc:
                self.log.error("journal append failed", error=str(exc), retry_in_s=pause)
                if pause is None:
                    raise JournalFailed(f"journal append failed: {exc}") from exc
                time.sleep(pause)
            else:
                # Its announcement (announce or await_barrier) follows and wakes the loop.
                self.publish(sequence=event.sequence, announcing=True)
                self._traces.journaled(draft, appending)
                return event
        raise AssertionError("unreachable")

    def failing(self, reason: str) -> None:
        """Fail stop (``sidecar.fail_stop``): no more callbacks journal, the member's loop
        ends, the process exits."""
        self._fail_stop.now(reason)

    def _stopping(self, reason: str) -> None:
        """The listener's step of a fail stop."""
        self._link.failed(reason)
        self._core.stopped()  # owns nothing any more, whatever it was just assigned
        self.publish()

    def publish(self, sequence: int | None = None, *, announcing: bool = False) -> None:
        current = self._handoff.snapshot
        self._handoff.publish(
            replace(
                current,
                member_id=self._core.member_id,
                generation_id=self._core.generation,
                state=self._core.state,
                partitions=self._core.partitions,
                sequence=sequence if sequence is not None else current.sequence,
                updated_at=time.time(),
                error=self.link.error,
                connected=self.link.connected,
            ),
            announcing=announcing,
        )
