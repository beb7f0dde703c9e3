"""The group member: the one thread that owns the confluent-kafka ``Consumer``.

Only this thread calls the ``Consumer`` (a call from another thread while ``poll()`` runs
can block or deadlock). It polls, runs the rebalance callbacks, drains commands between
polls, journals events and publishes immutable ``Assignment`` snapshots. It holds
membership and never fetches: whatever it is assigned, it pauses, with auto-commit off.
What the member *knows* (owned partitions, identity, reasons, rebalance counting) lives
in ``sidecar.membership``; the ``Consumer`` calls themselves are in ``sidecar.group_calls``.

A journal that cannot append is a fail stop (``JOURNAL_FAILED_EXIT``): the member could
no longer tell its application what it owns, and running on silently would let it act on
partitions it lost. The process exits, as if killed: the journal keeps what it had, the
group reassigns after the session timeout, and the application sees its sidecar die.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commands import (
    Commit,
    CommitFailed,
    EnforceRebalance,
    EnforceResult,
    Leave,
    NotInGroup,
)
from sidecar.group_calls import (
    commit_offsets,
    committed_offsets,
    generation_of,
    read_identity,
)
from sidecar.handoff import BarrierOutcome, Command, Handoff, PendingCommand
from sidecar.journal import Journal
from sidecar.link import KafkaLink
from sidecar.membership import EnforceOutcome, GroupIdentity, Membership, RebalanceCompleted
from sidecar.metrics import Metrics, StateSources
from sidecar.model import (
    Delivery,
    Event,
    EventDraft,
    EventType,
    PartitionOffset,
    TopicPartition,
)
from sidecar.settings import Settings

__all__ = ["JOURNAL_FAILED_EXIT", "GroupMember", "JournalFailed", "generation_of"]

log = structlog.get_logger("sidecar.member")

_FATAL_RETRY_SECONDS = 5.0
_IDENTITY_CHECK_SECONDS = 0.5
# KIP-848 bumps the group epoch when the pattern goes away again, not when it is added.
_KIP848_RESTORE_SECONDS = 0.5
# Enforce topic names and patterns match no topic; librdkafka reports them as unavailable.
_ENFORCE_PATTERN = "__rebalance_sidecar_enforce_"
# A journal append is retried after these pauses before the member fails stop.
_JOURNAL_RETRY_SECONDS = (0.1, 0.5, 1.0)
JOURNAL_FAILED_EXIT = 70  # EX_SOFTWARE
_DEFAULT_SESSION_SECONDS = 45.0  # Kafka's session.timeout.ms default, both protocols
# While Kafka looks unreachable, ask it for metadata this often to notice it is back.
_CONTACT_PROBE_SECONDS = 5.0


def _presumed_session_seconds(settings: Settings) -> float:
    """How long the broker waits for us before fencing: librdkafka's ``session.timeout.ms``
    (classic), or under KIP-848 the broker's ``group.consumer.session.timeout.ms``, which
    ``SIDECAR_KAFKA_SESSION_TIMEOUT_MS`` should then repeat; Kafka's default otherwise."""
    value = settings.kafka.get("session.timeout.ms")
    return int(value) / 1000 if value else _DEFAULT_SESSION_SECONDS


class JournalFailed(RuntimeError):
    """The journal refused an append even after retries: the member must stop."""


def _exit_process(reason: str) -> None:
    log.critical("failing stop: exiting the process", reason=reason, code=JOURNAL_FAILED_EXIT)
    os._exit(JOURNAL_FAILED_EXIT)


# -- the member ---------------------------------------------------------------------------


class GroupMember:
    def __init__(
        self,
        settings: Settings,
        handoff: Handoff,
        metrics: Metrics,
        sources: StateSources,
        consumer_factory: Callable[[dict[str, Any]], Consumer] = Consumer,
        journal_factory: Callable[[Path], Journal] = lambda d: Journal(d, durable=True),
        fail_stop: Callable[[str], None] = _exit_process,
    ) -> None:
        self._settings = settings
        self._handoff = handoff
        self._metrics = metrics
        self._sources = sources
        self._consumer_factory = consumer_factory
        self._journal_factory = journal_factory
        self._fail_stop = fail_stop
        self._thread = threading.Thread(target=self._run, name="group-member", daemon=True)
        self._leaving = threading.Event()
        self.last_tick = time.monotonic()  # read by the liveness probe
        # Everything below is touched by the member thread only.
        self._consumer: Consumer | None = None
        self._journal: Journal | None = None
        self._core = Membership(
            GroupIdentity(
                group_id=settings.group_id,
                group_instance_id=settings.group_instance_id,
                protocol=settings.protocol_name,
                kip848=settings.group_protocol == "consumer",
            )
        )
        self._link = KafkaLink(metrics, sources, lambda: self._log)
        self._nonce = 0
        self._restore_subscription_at = 0.0
        self._failed: str | None = None  # set once the member fails stop
        self._deferred: list[PendingCommand] = []  # taken during a barrier, run after it
        self._next_contact_probe = 0.0
        # KIP-848 never calls on_lost when the coordinator is unreachable (librdkafka does
        # not expire the session itself): past the session timeout the broker has fenced
        # us, so we report the partitions lost and rejoin with a new consumer once Kafka
        # answers again.
        self._session_s = _presumed_session_seconds(settings)
        self._presumed_lost = False
        self._recreate = False
        self._log = log.bind(group_id=settings.group_id)

    # -- lifecycle (called from the loop; they touch no Consumer) --------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        self._journal = self._journal_factory(self._settings.data_dir)
        try:
            while not self._leaving.is_set():
                self._session()
                if self._leaving.is_set():
                    break
                if self._recreate:
                    self._recreate = False
                    continue
                self._log.error(
                    "consumer failed fatally; creating a new one",
                    error=self._link.error,
                    retry_in_s=_FATAL_RETRY_SECONDS,
                )
                deadline = time.monotonic() + _FATAL_RETRY_SECONDS
                while time.monotonic() < deadline and not self._leaving.is_set():
                    self._serve_commands()
                    self.last_tick = time.monotonic()
                    time.sleep(0.1)
        except Exception:
            self._log.exception("group member crashed")
            self._link.error = "group member crashed; see logs"
        finally:
            self._core.stopped()
            self._publish()
            self._handoff.close()
            self._journal.close()

    def _session(self) -> None:
        self._link.new_session()
        consumer = self._consumer_factory(self._config())
        self._consumer = consumer
        self._core.session_started()
        self._presumed_lost = False
        self._publish()
        try:
            self._subscribe()
            timeout = self._settings.poll_timeout_ms / 1000
            next_identity_check = 0.0
            while not self._leaving.is_set() and self._link.fatal is None and not self._recreate:
                self.last_tick = now = time.monotonic()
                self._serve_commands()
                self._check_session(now)
                if now >= next_identity_check and self._consumer is not None:
                    # KIP-848 bumps member epochs without a callback when nothing moves.
                    next_identity_check = now + _IDENTITY_CHECK_SECONDS
                    if self._read_identity(consumer):
                        self._completed(self._core.epoch_moved(time.monotonic()))
                        self._publish()
                    self._probe_contact(consumer, now)
                if self._restore_subscription_at and now >= self._restore_subscription_at:
                    self._restore_subscription_at = 0.0
                    if self._consumer is not None:
                        self._subscribe()
                if self._leaving.is_set() or self._consumer is None:
                    break
                # Partitions are paused: poll() serves callbacks, it returns no records.
                message = consumer.poll(timeout)
                error = message.error() if message is not None else None
                if error is not None and _ENFORCE_PATTERN not in error.str():
                    self._on_error(error)
        finally:
            if self._consumer is not None:
                self._close(reason=self._session_end_reason())

    def _config(self) -> dict[str, Any]:
        s = self._settings
        config: dict[str, Any] = {
            **s.kafka,
            "bootstrap.servers": s.bootstrap_servers,
            "group.id": s.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "group.protocol": s.group_protocol,
            "error_cb": self._on_error,
        }
        if s.statistics_interval_ms:
            config["statistics.interval.ms"] = s.statistics_interval_ms
            config["stats_cb"] = self._on_statistics
        if s.group_instance_id:
            config["group.instance.id"] = s.group_instance_id
        if s.group_protocol == "consumer":
            # Broker-side under KIP-848 (librdkafka refuses it): only our presumption.
            config.pop("session.timeout.ms", None)
        if s.assignment_strategy:
            config["partition.assignment.strategy"] = s.assignment_strategy
        return config

    def _subscribe(self, extra: tuple[str, ...] = ()) -> None:
        assert self._consumer is not None
        self._consumer.subscribe(
            list(self._settings.topics) + list(extra),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _close(self, reason: str) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        self._log.info("leaving the group", reason=reason)
        self._core.leaving(reason)
        try:
            # close() runs the revoke callback (barrier included) and leaves the group;
            # static members send no LeaveGroup, so a quick restart moves nothing.
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            self._log.warning("consumer close failed", error=str(exc))
        finally:
            self._consumer = None
        if self._core.owned and self._failed is None:
            # close() could not run the callback (fatal error): the partitions are gone.
            self._emit_without_consumer(reason)
        self._core.session_ended(fatal=self._link.fatal is not None)
        self._publish()

    def _session_end_reason(self) -> str:
        if self._link.fatal:
            return "fatal error"
        return "rejoining after a lost session" if self._recreate else "stopping"

    def _check_session(self, now: float) -> None:
        """Report the partitions lost once Kafka has been unreachable past the session."""
        since = self._link.unreachable_since
        if self._presumed_lost:
            if since is None:
                self._log.warning("Kafka answers again: rejoining with a new consumer")
                self._recreate = True
            return
        if since is None or not self._core.owned or now - since <= self._session_s:
            return
        self._presumed_lost = True
        self._link.error = (
            f"no answer from Kafka for {now - since:.0f} s, past the session timeout "
            f"({self._session_s:.0f} s): the partitions are presumed lost"
        )
        self._log.error("session presumed expired", unreachable_s=round(now - since, 1))
        started = time.perf_counter()
        self._metrics.failed_rebalances.inc()
        draft = self._core.taken(list(self._core.owned), EventType.LOST, time.monotonic())
        try:
            event = self._journal_event(draft)
        except JournalFailed as exc:
            self._failing(str(exc))
            return
        try:
            outcome = self._handoff.await_barrier(
                event, self._settings.revoke_timeout_ms / 1000, serve=self._serve_commits
            )
        finally:
            self._core.barrier_over()
        self._metrics.callback_seconds["lost"].observe(time.perf_counter() - started)
        self._log.warning(
            "partitions lost",
            partitions=len(draft.partitions),
            sequence=event.sequence,
            barrier_timed_out=outcome.timed_out,
        )

    def _probe_contact(self, consumer: Consumer, now: float) -> None:
        """Kafka looked unreachable: a metadata answer says it is back (no stats needed)."""
        if self._link.connected or now < self._next_contact_probe:
            return
        self._next_contact_probe = now + _CONTACT_PROBE_SECONDS
        try:
            consumer.list_topics(timeout=1.0)
        except KafkaException:
            return
        if self._link.contact():
            self._publish()

    # -- commands --------------------------------------------------------------------------

    def _serve_commands(self) -> None:
        deferred, self._deferred = self._deferred, []
        for pending in deferred + self._handoff.take_commands():
            self._run_command(pending)

    def _serve_commits(self) -> None:
        """Inside a revoke barrier: commits only (the app commits from its revoke handler).

        Anything else (enforce, leave) must not run inside a rebalance callback: it waits
        for the next turn of the poll loop.
        """
        for pending in self._handoff.take_commands():
            if isinstance(pending.command, Commit):
                self._run_command(pending)
            else:
                self._deferred.append(pending)

    def _run_command(self, pending: PendingCommand) -> None:
        try:
            result = self._execute(pending.command)
        except Exception as exc:
            if not pending.future.done():
                pending.future.set_exception(exc)
        else:
            if not pending.future.done():
                pending.future.set_result(result)

    def _execute(self, command: Command[Any]) -> Any:
        if isinstance(command, Commit):
            return self._commit_for_app(command)
        if isinstance(command, EnforceRebalance):
            return self._enforce(command.reason)
        if isinstance(command, Leave):
            self._leaving.set()
            self._close(reason=command.reason)
            self._core.stopped()
            self._publish()
            return self._handoff.snapshot
        raise TypeError(f"unknown command {command!r}")

    def _commit_for_app(self, command: Commit) -> tuple[PartitionOffset, ...]:
        if self._consumer is None:
            raise NotInGroup("not in the group")
        self._core.check_commit(command.offsets, command.generation_id)
        self._commit(command.offsets, source="api")
        return command.offsets

    def _commit(self, offsets: tuple[PartitionOffset, ...], source: str) -> None:
        assert self._consumer is not None
        try:
            commit_offsets(self._consumer, offsets)
        except CommitFailed:
            self._metrics.commits.labels(source, "failed").inc()
            raise
        self._link.contact()  # the coordinator answered
        self._metrics.commits.labels(source, "committed").inc()
        self._log.info("offsets committed", source=source, offsets=[po.as_dict() for po in offsets])

    def _enforce(self, reason: str) -> EnforceResult:
        if self._consumer is None:
            raise NotInGroup("not in a group yet (or stopping): nothing to rebalance")
        outcome, draft = self._core.enforce(reason, time.monotonic())
        if outcome is EnforceOutcome.COALESCED or draft is None:
            self._metrics.enforced.labels("coalesced").inc()
            self._log.info("enforce-rebalance joined the rebalance under way", reason=reason)
            return EnforceResult(self._core.generation, started=False)
        self._handoff.announce(self._journal_event(draft))
        self._rejoin()
        self._metrics.enforced.labels("started").inc()
        self._log.info("enforce-rebalance: rejoining the group", reason=reason)
        return EnforceResult(self._core.generation, started=True)

    def _rejoin(self) -> None:
        """librdkafka has no rejoin call (#3446): make it rejoin through subscribe().

        A classic coordinator answers a follower's JoinGroup with unchanged metadata with
        the current assignment, so the member must change what it sends:

        * eager: unsubscribe() and subscribe() again: it revokes everything (as Java's eager
          enforce does), leaves and rejoins as a new member; one rebalance for the group;
        * cooperative-sticky: subscribe with an extra topic name that does not exist (a new
          one each time, replacing the last): librdkafka sees the subscribed topics change
          and rejoins with new metadata; the sticky assignor moves nothing. (A pattern that
          matches nothing only works once: librdkafka's metadata then never looks stale.)
        * KIP-848: add such a pattern and remove it again a moment later: the broker bumps
          the group epoch and every member's epoch follows, with no callback and nothing
          moving (seen only through the generation; see ``_KIP848_RESTORE_SECONDS``).
        """
        assert self._consumer is not None
        if not self._settings.cooperative:
            self._consumer.unsubscribe()
            self._subscribe()
            return
        self._nonce += 1
        name = f"{_ENFORCE_PATTERN}{uuid.uuid4().hex}_{self._nonce}"
        if self._settings.group_protocol == "consumer":
            self._subscribe(extra=(f"^{name}$",))
            self._restore_subscription_at = time.monotonic() + _KIP848_RESTORE_SECONDS
        else:
            self._subscribe(extra=(name,))

    # -- callbacks (librdkafka calls them from poll()/close() on this thread) -------------

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        started = time.perf_counter()
        try:
            if self._settings.cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
            if partitions:
                consumer.pause(partitions)
            if self._failed is not None:
                return
            offsets = self._committed(consumer, partitions)
            self._read_identity(consumer)
            self._link.healthy()
            draft, completed = self._core.assigned(offsets, time.monotonic())
            self._completed(completed)
            event = self._journal_event(draft)
            self._handoff.announce(event)
            self._log.info(
                "partitions assigned",
                partitions=len(offsets),
                owned=len(self._core.owned),
                sequence=event.sequence,
                duration_s=round(time.perf_counter() - started, 4),
            )
        except JournalFailed as exc:
            self._failing(str(exc))
        except Exception:
            self._log.exception("on_assign failed")
        finally:
            self._metrics.callback_seconds["assigned"].observe(time.perf_counter() - started)

    def _on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self._on_taken(consumer, partitions, EventType.REVOKED)

    def _on_lost(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self._on_taken(consumer, partitions, EventType.LOST)

    def _on_taken(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition], kind: EventType
    ) -> None:
        started = time.perf_counter()
        label = "revoked" if kind is EventType.REVOKED else "lost"
        if self._failed is not None or self._presumed_lost:
            return  # failing, or the partitions were reported lost already
        try:
            self._read_identity(consumer)
            if kind is EventType.LOST:
                self._metrics.failed_rebalances.inc()
            draft = self._core.taken(
                (TopicPartition(p.topic, p.partition) for p in partitions),
                kind,
                time.monotonic(),
            )
            event = self._journal_event(draft)
            try:
                outcome = self._handoff.await_barrier(
                    event, self._settings.revoke_timeout_ms / 1000, serve=self._serve_commits
                )
                if outcome.offsets and kind is EventType.REVOKED:
                    self._commit_handed_back(event, outcome)
            finally:
                self._core.barrier_over()
            self._log.info(
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
            self._failing(str(exc))
        except Exception:
            self._log.exception(f"on_{label[:-1] if kind is EventType.REVOKED else label} failed")
        finally:
            self._metrics.callback_seconds[label].observe(time.perf_counter() - started)

    def _commit_handed_back(self, event: Event, outcome: BarrierOutcome) -> None:
        """Commit what the application handed back, as the member that still owns it."""
        assert self._journal is not None
        try:
            self._commit(outcome.offsets, source="revoke")
            outcome_name, error = "offsets_committed", None
        except CommitFailed as exc:
            outcome_name, error = "commit_failed", str(exc)
            self._log.error("committing offsets handed back on revoke failed", error=error)
        detail = error or ", ".join(f"{p.topic}[{p.partition}]={p.offset}" for p in outcome.offsets)
        for sub_id in outcome.acknowledged:
            self._journal.record(
                Delivery(
                    sub_id, event.sequence, event.id, outcome_name, 0, None, detail, time.time()
                )
            )

    def _on_error(self, error: KafkaError) -> None:
        self._link.on_error(error)
        self._publish()

    def _on_statistics(self, raw: str) -> None:
        changed, sample = self._link.on_statistics(raw)
        if self._core.sample(sample.join_state, sample.sampled_at, time.monotonic()):
            changed = True
        if changed:
            self._publish()

    # -- helpers ---------------------------------------------------------------------------

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
            self._log.warning(
                "committed offsets unknown after retries",
                unknown=read.unknown,
                attempts=read.attempts,
                error=read.error,
            )
        else:
            self._link.contact()  # the coordinator answered
        return read.offsets

    def _read_identity(self, consumer: Consumer) -> bool:
        """Refresh member id and generation; ``True`` when either changed."""
        identity = read_identity(consumer)
        if identity is None or not self._core.identify(*identity):
            return False
        self._log = log.bind(
            group_id=self._settings.group_id, member_id=identity[0], generation_id=identity[1]
        )
        return True

    def _completed(self, completed: RebalanceCompleted | None) -> None:
        if completed is None:
            return
        self._metrics.rebalances.inc()
        self._sources.last_rebalance_at = time.time()
        if completed.duration_s is not None:
            self._metrics.rebalance_duration.observe(completed.duration_s)
            self._log.info("rebalance completed", duration_s=round(completed.duration_s, 4))

    def _journal_event(self, draft: EventDraft) -> Event:
        """Journal ``draft`` (retrying a failing disk) and publish its sequence."""
        assert self._journal is not None
        for pause in (*_JOURNAL_RETRY_SECONDS, None):
            try:
                event = self._journal.append(draft)
            except Exception as exc:
                self._log.error("journal append failed", error=str(exc), retry_in_s=pause)
                if pause is None:
                    raise JournalFailed(f"journal append failed: {exc}") from exc
                time.sleep(pause)
            else:
                self._publish(sequence=event.sequence)
                return event
        raise AssertionError("unreachable")

    def _failing(self, reason: str) -> None:
        """Fail stop: no more callbacks journal, the loop ends, the process exits."""
        self._failed = reason
        self._link.error = reason
        self._leaving.set()
        self._publish()
        self._fail_stop(reason)

    def _emit_without_consumer(self, reason: str) -> None:
        """The consumer died holding partitions: tell subscribers they are lost (gated)."""
        started = time.perf_counter()
        self._metrics.failed_rebalances.inc()
        draft = self._core.lost_with_consumer(reason)
        try:
            event = self._journal_event(draft)
        except JournalFailed as exc:
            self._failing(str(exc))
            return
        outcome = self._handoff.await_barrier(event, self._settings.revoke_timeout_ms / 1000)
        self._metrics.callback_seconds["lost"].observe(time.perf_counter() - started)
        self._log.warning(
            "partitions lost with the consumer",
            partitions=len(draft.partitions),
            sequence=event.sequence,
            reason=reason,
            barrier_timed_out=outcome.timed_out,
        )

    def _publish(self, sequence: int | None = None) -> None:
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
                error=self._link.error,
                connected=self._link.connected,
            )
        )
