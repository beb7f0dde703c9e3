"""The group member: the one thread that owns the confluent-kafka ``Consumer``.

Only this thread calls the ``Consumer`` (a call from another thread while ``poll()`` runs
can block or deadlock). It polls, runs the rebalance callbacks, drains commands between
polls, journals events and publishes immutable ``Assignment`` snapshots. It holds
membership and never fetches: whatever it is assigned, it pauses, with auto-commit off.

The generation id has no accessor in confluent-kafka: we read it from the serialized
consumer group metadata (``consumer_group_metadata()``, librdkafka's
``rd_kafka_consumer_group_metadata_write``: ``"CGMDv2:"``, then the int32 generation id
in host byte order, then the NUL-terminated group id, member id and instance id). Under
``group.protocol=consumer`` that field holds the member epoch. ``generation_of`` checks
the magic and answers -1 for anything it does not recognise.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
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
    NotOwned,
)
from sidecar.handoff import BarrierOutcome, Command, Handoff
from sidecar.journal import Journal
from sidecar.link import KafkaLink
from sidecar.metrics import Metrics, StateSources
from sidecar.model import (
    Delivery,
    DeliveryOutcome,
    Event,
    EventDraft,
    EventType,
    MemberState,
    PartitionOffset,
    TopicPartition,
)
from sidecar.settings import Settings

log = structlog.get_logger("sidecar.member")

_CGMD_MAGIC = b"CGMDv2:"
_FATAL_RETRY_SECONDS = 5.0
_IDENTITY_CHECK_SECONDS = 0.5
# An enforce whose rebalance never completed stops coalescing new requests after this.
_ENFORCE_COALESCE_SECONDS = 60.0
# KIP-848 bumps the group epoch when the pattern goes away again, not when it is added.
_KIP848_RESTORE_SECONDS = 0.5
# Enforce topic names and patterns match no topic; librdkafka reports them as unavailable.
_ENFORCE_PATTERN = "__rebalance_sidecar_enforce_"


def generation_of(cgmd: bytes) -> int:
    if not cgmd.startswith(_CGMD_MAGIC) or len(cgmd) < len(_CGMD_MAGIC) + 4:
        return -1
    (generation,) = struct.unpack_from("=i", cgmd, len(_CGMD_MAGIC))
    return int(generation)


# -- the member ---------------------------------------------------------------------------


class GroupMember:
    def __init__(
        self,
        settings: Settings,
        handoff: Handoff,
        metrics: Metrics,
        sources: StateSources,
        consumer_factory: Callable[[dict[str, Any]], Consumer] = Consumer,
    ) -> None:
        self._settings = settings
        self._handoff = handoff
        self._metrics = metrics
        self._sources = sources
        self._consumer_factory = consumer_factory
        self._thread = threading.Thread(target=self._run, name="group-member", daemon=True)
        self._leaving = threading.Event()
        self.last_tick = time.monotonic()  # read by the liveness probe
        # Everything below is touched by the member thread only.
        self._consumer: Consumer | None = None
        self._journal: Journal | None = None
        self._owned: dict[TopicPartition, None] = {}
        self._generation = -1
        self._member_id: str | None = None
        self._state = MemberState.STARTING
        self._link = KafkaLink(metrics, sources, lambda: self._log)
        self._rebalance_started: float | None = None
        self._counted_generation: int | None = None
        self._enforce_pending: str | None = None
        self._nonce = 0
        self._leave_reason: str | None = None
        self._assigned_at = 0.0  # monotonic time of the last assignment
        self._rebalancing_seen_in_stats = False
        self._enforced_at = 0.0
        self._restore_subscription_at = 0.0
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
        self._journal = Journal(self._settings.data_dir, durable=True)
        try:
            while not self._leaving.is_set():
                self._session()
                if self._leaving.is_set():
                    break
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
            self._state = MemberState.STOPPED
            self._owned.clear()
            self._publish()
            self._handoff.close()
            self._journal.close()

    def _session(self) -> None:
        self._link.new_session()
        consumer = self._consumer_factory(self._config())
        self._consumer = consumer
        self._state = MemberState.JOINING
        self._publish()
        try:
            self._subscribe()
            timeout = self._settings.poll_timeout_ms / 1000
            next_identity_check = 0.0
            while not self._leaving.is_set() and self._link.fatal is None:
                self.last_tick = now = time.monotonic()
                self._serve_commands()
                if now >= next_identity_check and self._consumer is not None:
                    # KIP-848 bumps member epochs without a callback when nothing moves.
                    next_identity_check = now + _IDENTITY_CHECK_SECONDS
                    if self._read_identity(consumer):
                        self._on_identity_changed()
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
                self._close(reason="fatal error" if self._link.fatal else "stopping")

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
        self._leave_reason = reason
        try:
            # close() runs the revoke callback (barrier included) and leaves the group;
            # static members send no LeaveGroup, so a quick restart moves nothing.
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            self._log.warning("consumer close failed", error=str(exc))
        finally:
            self._consumer = None
        if self._owned:
            # close() could not run the callback (fatal error): the partitions are gone.
            self._emit_without_consumer(EventType.LOST, reason)
        self._state = MemberState.LOST if self._link.fatal else MemberState.STOPPED
        self._publish()

    # -- commands --------------------------------------------------------------------------

    def _serve_commands(self) -> None:
        for pending in self._handoff.take_commands():
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
            return self._commit_for_app(command.offsets)
        if isinstance(command, EnforceRebalance):
            return self._enforce(command.reason)
        if isinstance(command, Leave):
            self._leaving.set()
            self._close(reason=command.reason)
            self._state = MemberState.STOPPED
            self._publish()
            return self._handoff.snapshot
        raise TypeError(f"unknown command {command!r}")

    def _commit_for_app(self, offsets: tuple[PartitionOffset, ...]) -> tuple[PartitionOffset, ...]:
        if self._consumer is None or self._state is MemberState.STOPPED:
            raise NotInGroup("not in the group")
        foreign = sorted({po.tp for po in offsets} - set(self._owned))
        if foreign:
            raise NotOwned(foreign)
        self._commit(offsets, source="api")
        return offsets

    def _commit(self, offsets: tuple[PartitionOffset, ...], source: str) -> None:
        assert self._consumer is not None
        request = [
            KafkaTopicPartition(po.topic, po.partition, po.offset)
            for po in offsets
            if po.offset is not None
        ]
        try:
            results = self._consumer.commit(offsets=request, asynchronous=False)
        except KafkaException as exc:
            self._metrics.commits.labels(source, "failed").inc()
            raise CommitFailed(f"commit failed: {exc.args[0]}") from None
        failed = [f"{r.topic}[{r.partition}]: {r.error}" for r in results or () if r.error]
        if failed:
            self._metrics.commits.labels(source, "failed").inc()
            raise CommitFailed("commit failed for " + "; ".join(failed))
        self._metrics.commits.labels(source, "committed").inc()
        self._log.info("offsets committed", source=source, offsets=[po.as_dict() for po in offsets])

    def _enforce(self, reason: str) -> EnforceResult:
        if (
            self._consumer is None
            or self._member_id is None
            or self._state in (MemberState.STARTING, MemberState.STOPPED)
        ):
            raise NotInGroup("not in a group yet (or stopping): nothing to rebalance")
        pending = self._enforce_pending is not None and (
            time.monotonic() - self._enforced_at < _ENFORCE_COALESCE_SECONDS
        )
        if pending or self._state in (MemberState.REBALANCING, MemberState.JOINING):
            # KIP-568: a rebalance is already under way; this request joins it.
            self._metrics.enforced.labels("coalesced").inc()
            self._log.info("enforce-rebalance joined the rebalance under way", reason=reason)
            return EnforceResult(self._generation, started=False)
        self._enforce_pending = reason
        self._enforced_at = self._rebalance_started = time.monotonic()
        self._append(EventType.REBALANCE_REQUESTED, (), reason=reason)
        self._rejoin()
        self._metrics.enforced.labels("started").inc()
        self._log.info("enforce-rebalance: rejoining the group", reason=reason)
        return EnforceResult(self._generation, started=True)

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
            offsets = self._committed(consumer, partitions)
            self._read_identity(consumer)
            if not self._settings.cooperative:
                self._owned.clear()
            for po in offsets:
                self._owned[po.tp] = None
            self._state = MemberState.STABLE
            self._assigned_at = time.monotonic()
            self._rebalancing_seen_in_stats = False
            self._link.healthy()
            reason = self._reason()
            self._count_rebalance()  # before the snapshot shows it: readers see both at once
            event = self._append(EventType.ASSIGNED, offsets, reason=reason)
            self._log.info(
                "partitions assigned",
                partitions=len(offsets),
                owned=len(self._owned),
                sequence=event.sequence,
                duration_s=round(time.perf_counter() - started, 4),
            )
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
        try:
            if self._rebalance_started is None:
                self._rebalance_started = time.monotonic()
            self._read_identity(consumer)
            taken = tuple(PartitionOffset(p.topic, p.partition, None) for p in partitions)
            for po in taken:
                self._owned.pop(po.tp, None)
            self._state = MemberState.LOST if kind is EventType.LOST else MemberState.REBALANCING
            if kind is EventType.LOST:
                self._metrics.failed_rebalances.inc()
            event = self._append(kind, taken, reason=self._reason())
            outcome = self._handoff.await_barrier(event, self._settings.revoke_timeout_ms / 1000)
            if outcome.offsets and kind is EventType.REVOKED:
                self._commit_handed_back(event, outcome)
            self._log.info(
                f"partitions {label}",
                partitions=len(taken),
                sequence=event.sequence,
                acknowledged=len(outcome.acknowledged),
                gave_up=len(outcome.gave_up),
                barrier_timed_out=outcome.timed_out,
                waiting=list(outcome.waiting),
                duration_s=round(time.perf_counter() - started, 4),
            )
        except Exception:
            self._log.exception(f"on_{label[:-1] if kind is EventType.REVOKED else label} failed")
        finally:
            self._metrics.callback_seconds[label].observe(time.perf_counter() - started)

    def _commit_handed_back(self, event: Event, outcome: BarrierOutcome) -> None:
        """Commit what the application handed back, as the member that still owns it."""
        assert self._journal is not None
        try:
            self._commit(outcome.offsets, source="revoke")
            outcome_name, error = DeliveryOutcome.OFFSETS_COMMITTED, None
        except CommitFailed as exc:
            outcome_name, error = DeliveryOutcome.COMMIT_FAILED, str(exc)
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
        # A sample taken before our last assignment says nothing about now.
        if sample.sampled_at > self._assigned_at:
            if sample.join_state not in (None, "steady", "init") and (
                self._state is MemberState.STABLE
            ):
                self._state = MemberState.REBALANCING
                self._rebalancing_seen_in_stats = True
                if self._rebalance_started is None:
                    self._rebalance_started = time.monotonic()
                changed = True
            elif (
                sample.join_state == "steady"
                and self._state is MemberState.REBALANCING
                and self._rebalancing_seen_in_stats
            ):
                self._state = MemberState.STABLE  # a rebalance that moved nothing here
                self._rebalancing_seen_in_stats = False
                changed = True
        if changed:
            self._publish()

    # -- helpers ---------------------------------------------------------------------------

    def _reason(self) -> str | None:
        """Why: the enforce reason when this member asked (KIP-800); else unknown here."""
        return self._enforce_pending or self._leave_reason

    def _committed(
        self, consumer: Consumer, partitions: list[KafkaTopicPartition]
    ) -> tuple[PartitionOffset, ...]:
        if not partitions:
            return ()
        try:
            found = consumer.committed(
                [KafkaTopicPartition(p.topic, p.partition) for p in partitions],
                timeout=self._settings.committed_timeout_ms / 1000,
            )
        except KafkaException as exc:
            self._log.warning("could not read committed offsets", error=str(exc))
            found = [KafkaTopicPartition(p.topic, p.partition) for p in partitions]
        return tuple(
            sorted(
                PartitionOffset(p.topic, p.partition, p.offset if p.offset >= 0 else None)
                for p in found
            )
        )

    def _read_identity(self, consumer: Consumer) -> bool:
        """Refresh member id and generation; ``True`` when either changed."""
        try:
            member_id = consumer.memberid() or None
            generation = generation_of(bytes(consumer.consumer_group_metadata()))
        except (KafkaException, RuntimeError, TypeError):
            return False
        if member_id == self._member_id and generation == self._generation:
            return False
        self._member_id, self._generation = member_id, generation
        self._log = log.bind(
            group_id=self._settings.group_id, member_id=member_id, generation_id=generation
        )
        return True

    def _on_identity_changed(self) -> None:
        """KIP-848: the member epoch moves without a callback when nothing moves here."""
        if (
            self._settings.group_protocol == "consumer"
            and self._state is MemberState.STABLE
            and self._generation > (self._counted_generation or -1)
        ):
            self._count_rebalance()
        self._publish()

    def _count_rebalance(self) -> None:
        if self._generation == self._counted_generation:
            return
        self._counted_generation = self._generation
        self._metrics.rebalances.inc()
        self._sources.last_rebalance_at = time.time()
        if self._rebalance_started is not None:
            self._metrics.rebalance_duration.observe(time.monotonic() - self._rebalance_started)
            self._log.info(
                "rebalance completed",
                duration_s=round(time.monotonic() - self._rebalance_started, 4),
            )
        self._rebalance_started = None
        self._enforce_pending = None

    def _append(
        self, kind: EventType, partitions: tuple[PartitionOffset, ...], reason: str | None
    ) -> Event:
        assert self._journal is not None
        draft = EventDraft(
            type=kind,
            group_id=self._settings.group_id,
            member_id=self._member_id,
            group_instance_id=self._settings.group_instance_id,
            generation_id=self._generation,
            protocol=self._settings.protocol_name,
            partitions=partitions,
            assignment=tuple(sorted(self._owned)),
            reason=reason,
        )
        event = self._journal.append(draft)
        self._publish(sequence=event.sequence)
        self._handoff.announce(event)
        return event

    def _emit_without_consumer(self, kind: EventType, reason: str) -> None:
        """The consumer died holding partitions: tell subscribers they are lost (gated)."""
        started = time.perf_counter()
        taken = tuple(PartitionOffset(tp.topic, tp.partition, None) for tp in self._owned)
        self._owned.clear()
        self._metrics.failed_rebalances.inc()
        event = self._append(kind, taken, reason=reason)
        outcome = self._handoff.await_barrier(event, self._settings.revoke_timeout_ms / 1000)
        self._metrics.callback_seconds["lost"].observe(time.perf_counter() - started)
        self._log.warning(
            "partitions lost with the consumer",
            partitions=len(taken),
            sequence=event.sequence,
            reason=reason,
            barrier_timed_out=outcome.timed_out,
        )

    def _publish(self, sequence: int | None = None) -> None:
        current = self._handoff.snapshot
        self._handoff.publish(
            replace(
                current,
                member_id=self._member_id,
                generation_id=self._generation,
                state=self._state,
                partitions=tuple(sorted(self._owned)),
                sequence=sequence if sequence is not None else current.sequence,
                updated_at=time.time(),
                error=self._link.error,
                connected=self._link.connected,
            )
        )
