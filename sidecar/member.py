"""The group member: the one thread that owns the confluent-kafka ``Consumer``.

Only this thread calls the ``Consumer`` (a call from another thread while ``poll()`` runs
can block or deadlock). It polls, runs the rebalance callbacks, drains commands between
polls, journals events and publishes immutable ``Assignment`` snapshots. It holds
membership and never fetches: whatever it is assigned, it pauses, with auto-commit off.
What the member *knows* (owned partitions, identity, reasons, rebalance counting) lives
in ``sidecar.membership``; what librdkafka calls back (rebalances, errors, statistics) is
handled by ``sidecar.listener``; the ``Consumer`` calls themselves are in
``sidecar.kafka.group_calls``. This module keeps the thread, the poll loop and the commands.

A journal that cannot append is a fail stop (``JOURNAL_FAILED_EXIT``): the process exits,
as if killed: the journal keeps what it had, the group reassigns after the session
timeout, and the application sees its sidecar die.

KIP-848 never calls on_lost when the coordinator is unreachable (librdkafka does not
expire the session itself): once no broker answered for longer than the session timeout,
the broker has fenced us, so the member reports the partitions lost and, once Kafka
answers again, rejoins with a new consumer. Each consumer is a numbered session with one
state (``sidecar.session``): once the member gave that consumer up it is not polled again,
and none of its callbacks is reported (no ``assigned`` for a consumer reported lost).
Every fail stop goes through one ``sidecar.fail_stop.FailStop``; the application's
commits are run by ``sidecar.app_commits``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaException

from sidecar.app_commits import AppCommits
from sidecar.command_runner import run_batch, runs_in_barrier
from sidecar.commands import Commit, EnforceRebalance, EnforceResult, Leave, NotInGroup
from sidecar.errors import JOURNAL_FAILED_EXIT
from sidecar.fail_stop import FailStop, exit_process
from sidecar.handoff import Handoff, PendingCommand
from sidecar.journal import Journal
from sidecar.kafka.group_calls import ENFORCE_PATTERN, consumer_config, generation_of, rejoin
from sidecar.kafka.wakeup import NO_WAKEUPS, PollWaker, poll_waker
from sidecar.listener import JournalFailed, RebalanceListener
from sidecar.membership import EnforceOutcome, GroupIdentity, Membership
from sidecar.metrics import Metrics, StateSources
from sidecar.model import EventType, MemberState
from sidecar.refusals import FatalRetries
from sidecar.session import Session, SessionEvent, SessionState
from sidecar.settings import Settings

__all__ = [
    "JOURNAL_FAILED_EXIT",
    "GroupMember",
    "JournalFailed",
    "exit_process",
    "generation_of",
]

# The process exit of a fail stop (older name).
_exit_process = exit_process

log = structlog.get_logger("sidecar.member")

_IDENTITY_CHECK_SECONDS = 0.5
# The poll timeout when commands wake the poll (sidecar.kafka.wakeup): how often the loop's own
# checks run (commit deadlines, session, identity). Under 0.2 s: confluent-kafka splits
# longer polls into 200 ms chunks and a wake-up would end only the current chunk.
WOKEN_POLL_SECONDS = 0.19
# While Kafka looks unreachable, ask it for metadata this often to notice it is back.
_CONTACT_PROBE_SECONDS = 5.0
# A subscription that could not be restored is tried again after this long.
_RESUBSCRIBE_SECONDS = 1.0

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
        fail_stop: Callable[[str], None] = exit_process,
    ) -> None:
        self._settings = settings
        self._handoff = handoff
        self._metrics = metrics
        self._sources = sources
        self._consumer_factory = consumer_factory
        self._journal_factory = journal_factory
        self._fail_stop = FailStop(fail_stop)
        self._thread = threading.Thread(target=self._run, name="group-member", daemon=True)
        self._leaving = threading.Event()
        self.last_tick = time.monotonic()  # read by the liveness probe
        # Everything below is touched by the member thread only.
        self._consumer: Consumer | None = None
        self._waker: PollWaker = NO_WAKEUPS  # wakes the consumer's poll() for commands
        self._left_because: str | None = None  # a Leave command's reason (a drain's)
        self._journal: Journal | None = None
        self._core = Membership(
            GroupIdentity(
                group_id=settings.group_id,
                group_instance_id=settings.group_instance_id,
                protocol=settings.protocol_name,
                kip848=settings.group_protocol == "consumer",
            )
        )
        # The consumer session (numbered; ``None`` before the first and between two).
        self._sessions = 0
        self._current: Session | None = None
        self._listener = RebalanceListener(
            settings,
            self._core,
            handoff,
            metrics,
            sources,
            self._serve_in_barrier,
            self._fail_stop,
            lambda: self._current,
            barrier_opening=lambda: self._commits.interrupt(),
        )
        self._commits = AppCommits(
            settings.commit_timeout_ms / 1000,
            self._core,
            self._listener,
            lambda: self._consumer,
            lambda: self._current is None or self._current.closing,
        )
        self._fail_stop.on_stop(self._stop_member)
        self._link = self._listener.link
        self._restore_subscription_at = 0.0
        self._next_contact_probe = 0.0
        self._session_s = settings.session_timeout_seconds
        self._retries = FatalRetries(self._session_s, settings.group_instance_id)

    # -- lifecycle (called from the loop; they touch no Consumer) --------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def kafka_wait_until(self) -> float | None:
        """Set while the thread waits in a synchronous librdkafka commit (read by the
        liveness probe): by when librdkafka's own timeouts end the wait."""
        return self._listener.kafka_wait_until

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        self._journal = self._listener.open(self._journal_factory(self._settings.data_dir))
        try:
            while not self._leaving.is_set():
                session = self._session()
                if self._leaving.is_set():
                    break
                if session.abandoned:
                    continue
                deadline = time.monotonic() + self._retries.next_consumer(self._link, self._log)
                while time.monotonic() < deadline and not self._leaving.is_set():
                    self._serve_commands()
                    self.last_tick = time.monotonic()
                    time.sleep(0.1)
        except Exception:
            self._log.exception("group member crashed")
            self._link.failed("group member crashed; see logs")
        finally:
            self._core.stopped()
            self._publish()
            if self._left_because is not None:  # a drain: the reason says it was asked for
                self._handoff.close(f"the member left the group: {self._left_because}")
            else:
                self._handoff.close()
            self._journal.close()

    def _session(self) -> Session:
        self._sessions += 1
        session = self._current = Session(self._sessions)
        self._link.new_session()
        consumer = self._consumer_factory(
            consumer_config(
                self._settings,
                self._listener.on_error,
                self._listener.on_statistics,
                self._commits.on_commit,
            )
        )
        self._consumer = consumer
        waker = poll_waker(consumer) if self._settings.poll_wakeup else None
        self._waker = waker or NO_WAKEUPS
        self._handoff.wake_with(self._waker)
        self._restore_subscription_at = 0.0
        self._core.session_started()
        self._publish()
        try:
            self._subscribe()
            longest = (
                WOKEN_POLL_SECONDS if waker is not None else self._settings.poll_timeout_ms / 1000
            )
            next_identity_check = 0.0
            while not self._leaving.is_set() and self._link.fatal is None and session.polling:
                self.last_tick = now = time.monotonic()
                self._serve_commands()
                self._commits.expire(now)
                if not self._check_session(session, now):
                    break  # given up: never polled again (its rejoin would be a zombie)
                if now >= next_identity_check and self._consumer is not None:
                    # KIP-848 bumps member epochs without a callback when nothing moves.
                    next_identity_check = now + _IDENTITY_CHECK_SECONDS
                    if self._listener.read_identity(consumer):
                        self._listener.completed(self._core.epoch_moved(time.monotonic()))
                        self._publish()
                    if (
                        not session.reported_lost
                        and self._core.joined_with_nothing(
                            now, self._settings.revoke_timeout_ms / 1000
                        )
                        and not consumer.assignment()
                    ):
                        self._listener.joined_with_nothing()
                    self._probe_contact(consumer, now)
                if self._restore_subscription_at and now >= self._restore_subscription_at:
                    self._restore_subscription()
                if self._leaving.is_set() or self._consumer is None:
                    break
                # Partitions are paused: poll() serves callbacks, it returns no records.
                message = consumer.poll(self._poll_timeout(longest, next_identity_check))
                if session.resubscribed and self._core.state is MemberState.STABLE:
                    session.move(SessionEvent.STABLE)
                error = message.error() if message is not None else None
                if error is not None and ENFORCE_PATTERN not in error.str():
                    self._listener.on_error(error)
            if self._link.fatal is not None and session.polling:
                session.move(SessionEvent.FATAL_ERROR)
        finally:
            try:
                if self._consumer is not None:
                    self._close(reason=session.end_reason(fatal=self._link.fatal is not None))
            finally:
                self._commits.abandon("the consumer closed")
        return session

    def _poll_timeout(self, longest: float, next_identity_check: float) -> float:
        """``longest``, or less when one of the loop's own timers is due sooner: a restore
        of the subscription, a commit's deadline, the identity check."""
        due = next_identity_check
        if self._restore_subscription_at:
            due = min(due, self._restore_subscription_at)
        if (deadline := self._commits.next_deadline()) is not None:
            due = min(due, deadline)
        # Whole milliseconds, rounded up: confluent-kafka rounds a timeout down, and a
        # poll that ends just short of the timer would be followed by polls of 0 ms until
        # it is due.
        return math.ceil(max(0.0, min(longest, due - time.monotonic())) * 1000) / 1000

    def _subscribe(self, extra: tuple[str, ...] = ()) -> None:
        assert self._consumer is not None and self._current is not None
        number, listener = self._current.number, self._listener
        self._consumer.subscribe(
            list(self._settings.topics) + list(extra),
            on_assign=lambda consumer, parts: listener.on_assign(consumer, parts, number),
            on_revoke=lambda consumer, parts: listener.on_revoke(consumer, parts, number),
            on_lost=lambda consumer, parts: listener.on_lost(consumer, parts, number),
        )

    def _resubscribed(self) -> None:
        """Subscribed again (an enforce, or its restore): eager rejoins, not yet stable."""
        if not self._settings.cooperative and self._current is not None:
            self._current.move(SessionEvent.ENFORCED_EAGER)

    def _restore_subscription(self) -> None:
        self._restore_subscription_at = 0.0
        if self._consumer is None:
            return
        try:
            self._subscribe()
            self._resubscribed()
        except KafkaException as exc:  # not a crash of the member thread: again shortly
            self._log.warning("restoring the subscription failed", error=str(exc))
            self._restore_subscription_at = time.monotonic() + _RESUBSCRIBE_SECONDS

    def _close(self, reason: str) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        self._log.info("leaving the group", reason=reason)
        # Before close(): it forwards the queue a wake-up yields to its own, and a yield
        # would cut the close short.
        self._handoff.wake_with(NO_WAKEUPS)
        self._waker.close()
        self._waker = NO_WAKEUPS
        self._core.leaving(reason)
        session = self._current
        assert session is not None
        session.move(SessionEvent.CLOSE)
        if session.resubscribed:
            # An eager enforce's subscribe() right after its unsubscribe() is postponed by
            # librdkafka behind the rebalance the unsubscribe() starts, and applied even
            # while the consumer closes: its destructor then aborts the process
            # (rd_kafka_cgrp_destroy_final: assert !rkcg_subscription). An unsubscribe()
            # replaces the postponed subscribe; the member has left the group already.
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.unsubscribe()
        try:
            # close() runs the revoke callback (barrier included) and leaves the group;
            # static members send no LeaveGroup, so a quick restart moves nothing.
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            self._log.warning("consumer close failed", error=str(exc))
        finally:
            self._consumer = None
            session.move(SessionEvent.CLOSED)
        if self._core.owned and self._listener.failed is None:
            # close() could not run the callback (fatal error): the partitions are gone.
            self._listener.lose(
                self._core.lost_with_consumer(reason), "partitions lost with the consumer"
            )
        if session.ignored:
            self._log.info("callbacks of the consumer given up on", ignored=len(session.ignored))
        # A session presumed expired stays "lost" until the new consumer joins.
        self._core.session_ended(fatal=self._link.fatal is not None or session.abandoned)
        self._publish()

    def _check_session(self, session: Session, now: float) -> bool:
        """Report the partitions lost once Kafka has been unreachable past the session;
        once it answers again, give the consumer up (``False``: close it, poll no more)."""
        since = self._link.unreachable_since
        if session.state is SessionState.PRESUMED_LOST:
            if since is None:
                self._log.warning("Kafka answers again: rejoining with a new consumer")
                session.move(SessionEvent.KAFKA_BACK)
            return session.polling
        if since is None or not self._core.owned or now - since <= self._session_s:
            return True
        session.move(SessionEvent.SESSION_EXPIRED)
        self._link.presumed_lost(
            f"no answer from Kafka for {now - since:.0f} s, past the session timeout "
            f"({self._session_s:.0f} s): the partitions are presumed lost"
        )
        self._log.error("session presumed expired", unreachable_s=round(now - since, 1))
        draft = self._core.taken(list(self._core.owned), EventType.LOST, time.monotonic())
        self._listener.lose(draft, "partitions lost")
        return True

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
        batch = self._handoff.take_commands()
        run_batch(batch, lambda p: self._execute(p, True), self._fail_stop, self._log)

    def _serve_in_barrier(self) -> None:
        """Inside a revoke barrier: what may run there (``runs_in_barrier``)."""
        closing = self._current is None or self._current.closing
        batch = self._handoff.take_commands(accept=lambda c: runs_in_barrier(c, closing=closing))
        run_batch(batch, lambda p: self._execute(p, False), self._fail_stop, self._log)

    def _execute(self, pending: PendingCommand, between_polls: bool) -> Any:
        command = pending.command
        if isinstance(command, Commit):
            return self._commits.commit(command, pending if between_polls else None)
        if isinstance(command, EnforceRebalance):
            return self._enforce(command.reason, in_barrier=not between_polls)
        if isinstance(command, Leave):
            self._leaving.set()
            self._close(reason=command.reason)
            self._left_because = command.reason  # left as asked: not a failure
            self._core.stopped()
            self._publish()
            return self._handoff.snapshot
        raise TypeError(f"unknown command {command!r}")

    def _enforce(self, reason: str, *, in_barrier: bool) -> EnforceResult:
        """Between polls, or inside a barrier (``_serve_in_barrier``: nothing is asked of
        the consumer inside its own callback; the membership answers "coalesced")."""
        session = self._current
        if self._consumer is None or session is None or (in_barrier and session.closing):
            raise NotInGroup("not in a group yet (or stopping): nothing to rebalance")
        outcome, draft = self._core.enforce(reason, time.monotonic(), in_barrier=in_barrier)
        if outcome is EnforceOutcome.COALESCED or draft is None:
            self._metrics.enforced.labels("coalesced").inc()
            self._log.info(
                "enforce-rebalance joined the rebalance under way",
                reason=reason,
                in_barrier=in_barrier,
            )
            return EnforceResult(self._core.generation, started=False)
        assert self._consumer is not None
        try:
            self._restore_subscription_at = rejoin(self._consumer, self._settings, self._subscribe)
            self._resubscribed()
        except KafkaException:
            self._core.enforce_refused()  # a retry must start one, not "join" this one
            raise
        # Journaled once Kafka took the rejoin: its revoke comes with the next poll only,
        # so the event still precedes it, and a refused enforce leaves no event behind.
        self._handoff.announce(self._listener.record(draft))
        self._metrics.enforced.labels("started").inc()
        self._log.info("enforce-rebalance: rejoining the group", reason=reason)
        return EnforceResult(self._core.generation, started=True)

    # -- helpers ---------------------------------------------------------------------------

    @property
    def _log(self) -> Any:
        return self._listener.log

    def _publish(self) -> None:
        self._listener.publish()

    def _stop_member(self, reason: str) -> None:
        """The member's step of a fail stop (``sidecar.fail_stop``): the loop ends, then
        the process. Commands still queued, and any sent from now on, are answered
        ``MemberGone``."""
        self._leaving.set()
        self._handoff.close(f"the group member stopped: {reason}")
        self._commits.abandon("the member stopped")
