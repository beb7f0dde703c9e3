"""The group member: the one thread that owns the confluent-kafka ``Consumer``.

Only this thread calls the ``Consumer`` (a call from another thread while ``poll()`` runs
can block or deadlock). It polls, runs the rebalance callbacks, drains commands between
polls, journals events and publishes immutable ``Assignment`` snapshots. It holds
membership and never fetches: whatever it is assigned, it pauses, with auto-commit off.
What the member *knows* (owned partitions, identity, reasons, rebalance counting) lives
in ``sidecar.membership``; what librdkafka calls back (rebalances, errors, statistics) is
handled by ``sidecar.listener``; the ``Consumer`` calls themselves are in
``sidecar.group_calls``. This module keeps the thread, the poll loop and the commands.

A journal that cannot append is a fail stop (``JOURNAL_FAILED_EXIT``): the process exits,
as if killed: the journal keeps what it had, the group reassigns after the session
timeout, and the application sees its sidecar die.

KIP-848 never calls on_lost when the coordinator is unreachable (librdkafka does not
expire the session itself): once no broker answered for longer than the session timeout,
the broker has fenced us, so the member reports the partitions lost and, once Kafka
answers again, rejoins with a new consumer.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commands import Commit, EnforceRebalance, EnforceResult, Leave, NotInGroup
from sidecar.commits import TAKEN_TOO_LATE, AppCommit, CommitsInFlight, Told
from sidecar.errors import JOURNAL_FAILED_EXIT, CommitFailed, KafkaRefused, MemberGone
from sidecar.group_calls import (
    ENFORCE_PATTERN,
    commit_failure,
    consumer_config,
    generation_of,
    rejoin,
    send_commit,
)
from sidecar.handoff import Command, Handoff, PendingCommand
from sidecar.journal import Journal
from sidecar.listener import JournalFailed, RebalanceListener
from sidecar.membership import EnforceOutcome, GroupIdentity, Membership
from sidecar.metrics import Metrics, StateSources
from sidecar.model import EventType, MemberState
from sidecar.refusals import FatalRetries
from sidecar.settings import Settings
from sidecar.wakeup import NO_WAKEUPS, PollWaker, poll_waker

__all__ = ["JOURNAL_FAILED_EXIT", "GroupMember", "JournalFailed", "generation_of"]

log = structlog.get_logger("sidecar.member")

_IDENTITY_CHECK_SECONDS = 0.5
# The poll timeout when commands wake the poll (sidecar.wakeup): how often the loop's own
# checks run (commit deadlines, session, identity). Under 0.2 s: confluent-kafka splits
# longer polls into 200 ms chunks and a wake-up would end only the current chunk.
WOKEN_POLL_SECONDS = 0.19
# While Kafka looks unreachable, ask it for metadata this often to notice it is back.
_CONTACT_PROBE_SECONDS = 5.0
# A subscription that could not be restored is tried again after this long.
_RESUBSCRIBE_SECONDS = 1.0
# A fail stop leaves the loop this long to send the answers already given (a command's
# 409) before the process exits: best effort (the snapshot says "stopped" meanwhile).
_EXIT_GRACE_SECONDS = 0.2


def _exit_process(reason: str) -> None:
    log.critical("failing stop: exiting the process", reason=reason, code=JOURNAL_FAILED_EXIT)
    time.sleep(_EXIT_GRACE_SECONDS)
    os._exit(JOURNAL_FAILED_EXIT)


# A command whose caller is answered later (a commit, when Kafka answers it).
_ANSWERED_LATER = object()

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
        self._commits = CommitsInFlight(settings.commit_timeout_ms / 1000)
        self._listener = RebalanceListener(
            settings,
            self._core,
            handoff,
            metrics,
            sources,
            self._serve_in_barrier,
            self._fail,
            barrier_opening=self._interrupt_commits,
        )
        self._link = self._listener.link
        self._restore_subscription_at = 0.0
        self._next_contact_probe = 0.0
        self._closing = False  # close() runs: it may answer commits, none may be sent
        self._session_s = settings.session_timeout_seconds
        self._recreate = False
        self._retries = FatalRetries(self._session_s, settings.group_instance_id)
        # Subscribed again by an eager enforce (or its restore), not yet stable since.
        self._rejoining = False
        # A command that failed the journal: the fail stop comes once its batch is answered.
        self._fail_after_commands: str | None = None

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
        self._journal = self._listener.journal = self._journal_factory(self._settings.data_dir)
        try:
            while not self._leaving.is_set():
                self._session()
                if self._leaving.is_set():
                    break
                if self._recreate:
                    self._recreate = False
                    continue
                deadline = time.monotonic() + self._retries.next_consumer(self._link, self._log)
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
            if self._left_because is not None:  # a drain: the reason says it was asked for
                self._handoff.close(f"the member left the group: {self._left_because}")
            else:
                self._handoff.close()
            self._journal.close()

    def _session(self) -> None:
        self._link.new_session()
        consumer = self._consumer_factory(
            consumer_config(
                self._settings,
                self._listener.on_error,
                self._listener.on_statistics,
                self._on_commit,
            )
        )
        self._consumer = consumer
        waker = poll_waker(consumer) if self._settings.poll_wakeup else None
        self._waker = waker or NO_WAKEUPS
        self._handoff.wake_with(self._waker)
        self._closing = False
        self._rejoining = False
        self._restore_subscription_at = 0.0
        self._core.session_started()
        self._listener.presumed_lost = False
        self._publish()
        try:
            self._subscribe()
            longest = (
                WOKEN_POLL_SECONDS if waker is not None else self._settings.poll_timeout_ms / 1000
            )
            next_identity_check = 0.0
            while not self._leaving.is_set() and self._link.fatal is None and not self._recreate:
                self.last_tick = now = time.monotonic()
                self._serve_commands()
                self._expire_commits(now)
                self._check_session(now)
                if now >= next_identity_check and self._consumer is not None:
                    # KIP-848 bumps member epochs without a callback when nothing moves.
                    next_identity_check = now + _IDENTITY_CHECK_SECONDS
                    if self._listener.read_identity(consumer):
                        self._listener.completed(self._core.epoch_moved(time.monotonic()))
                        self._publish()
                    if (
                        self._core.joined_with_nothing(now, self._settings.revoke_timeout_ms / 1000)
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
                if self._rejoining and self._core.state is MemberState.STABLE:
                    self._rejoining = False
                error = message.error() if message is not None else None
                if error is not None and ENFORCE_PATTERN not in error.str():
                    self._listener.on_error(error)
        finally:
            try:
                if self._consumer is not None:
                    self._close(reason=self._session_end_reason())
            finally:
                self._told(self._commits.abandon("the consumer closed"))

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
        assert self._consumer is not None
        self._consumer.subscribe(
            list(self._settings.topics) + list(extra),
            on_assign=self._listener.on_assign,
            on_revoke=self._listener.on_revoke,
            on_lost=self._listener.on_lost,
        )

    def _restore_subscription(self) -> None:
        self._restore_subscription_at = 0.0
        if self._consumer is None:
            return
        try:
            self._subscribe()
            self._rejoining = not self._settings.cooperative
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
        self._closing = True
        if self._rejoining:
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
        if self._core.owned and self._listener.failed is None:
            # close() could not run the callback (fatal error): the partitions are gone.
            self._listener.lose(
                self._core.lost_with_consumer(reason), "partitions lost with the consumer"
            )
        # A session presumed expired stays "lost" until the new consumer joins.
        self._core.session_ended(fatal=self._link.fatal is not None or self._recreate)
        self._publish()

    def _session_end_reason(self) -> str:
        if self._link.fatal:
            return "fatal error"
        return "rejoining after a lost session" if self._recreate else "stopping"

    def _check_session(self, now: float) -> None:
        """Report the partitions lost once Kafka has been unreachable past the session."""
        since = self._link.unreachable_since
        if self._listener.presumed_lost:
            if since is None:
                self._log.warning("Kafka answers again: rejoining with a new consumer")
                self._recreate = True
            return
        if since is None or not self._core.owned or now - since <= self._session_s:
            return
        self._listener.presumed_lost = True
        self._link.error = (
            f"no answer from Kafka for {now - since:.0f} s, past the session timeout "
            f"({self._session_s:.0f} s): the partitions are presumed lost"
        )
        self._log.error("session presumed expired", unreachable_s=round(now - since, 1))
        draft = self._core.taken(list(self._core.owned), EventType.LOST, time.monotonic())
        self._listener.lose(draft, "partitions lost")

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
        self._run_commands(self._handoff.take_commands(), between_polls=True)

    def _serve_in_barrier(self) -> None:
        """Inside a revoke barrier: commits (the app commits from its revoke handler), and
        enforces (its handler may ask for a rebalance: it joins the one under way, as
        Java's ``enforceRebalance()`` from ``onPartitionsRevoked``), else the handler and
        its own barrier would wait for each other until the revoke timeout.

        Anything else must not run inside a rebalance callback: a leave closes the
        consumer. It stays queued for the next turn of the poll loop, and its caller's
        deadline can still withdraw it (``MemberBusy``: never run). So does an enforce
        while the consumer closes (a drain's revoke): there is no rebalance to join.
        """
        self._run_commands(
            self._handoff.take_commands(accept=self._runs_in_barrier), between_polls=False
        )

    def _runs_in_barrier(self, command: Command[Any]) -> bool:
        if isinstance(command, EnforceRebalance):
            return not self._closing
        return isinstance(command, Commit)

    def _run_commands(self, batch: list[PendingCommand], *, between_polls: bool) -> None:
        """Run ``batch``; a command that calls for a fail stop gets it once every command
        of the batch is answered (the ones after it without running: ``MemberGone``).
        ``between_polls``: not inside a rebalance callback, so ``poll()`` can answer an
        asynchronous commit (``sidecar.commits``)."""
        for pending in batch:
            self._run_command(pending, between_polls)
        if self._fail_after_commands is not None:
            self._listener.failing(self._fail_after_commands)

    def _run_command(self, pending: PendingCommand, between_polls: bool) -> None:
        failed = self._listener.failed or self._fail_after_commands
        if failed is not None:
            # Failing stop: nothing more runs (a queued commit must not commit, a second
            # enforce must not "join" a rebalance that will never come).
            if not pending.future.done():
                pending.future.set_exception(MemberGone(f"the group member stopped: {failed}"))
            return
        try:
            result = self._execute(pending, between_polls)
        except Exception as exc:
            error, self._fail_after_commands = self._command_error(pending.command, exc)
            if not pending.future.done():
                pending.future.set_exception(error)
        else:
            if result is not _ANSWERED_LATER and not pending.future.done():
                pending.future.set_result(result)

    def _command_error(self, command: Command[Any], exc: Exception) -> tuple[Exception, str | None]:
        """What the command's caller is told, and the fail stop it calls for, if any.

        A journal that failed is the same fail stop as in a callback (``MemberGone``);
        librdkafka raising is Kafka's answer (``KafkaRefused``), for the caller to retry.
        Anything else is a bug and goes back as it is (a 500)."""
        if isinstance(exc, JournalFailed):
            return MemberGone(f"the group member stopped: {exc}"), str(exc)
        if isinstance(exc, KafkaException):
            self._log.warning(
                "Kafka refused a command", command=type(command).__name__, error=str(exc)
            )
            error = exc.args[0] if exc.args else exc
            text = error.str() if isinstance(error, KafkaError) else error
            return KafkaRefused(f"Kafka refused it: {text}"), None
        return exc, None

    def _execute(self, pending: PendingCommand, between_polls: bool) -> Any:
        command = pending.command
        if isinstance(command, Commit):
            return self._commit_for_app(command, pending if between_polls else None)
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

    def _commit_for_app(self, command: Commit, caller: PendingCommand | None) -> Any:
        """Commit for the application: sent asynchronously and answered by ``on_commit``
        when there is a ``caller`` to answer later (between polls), else synchronously."""
        if self._consumer is None:
            raise NotInGroup("not in the group")
        self._core.check_commit(command.offsets, command.generation_id)
        if caller is None or not any(po.offset is not None for po in command.offsets):
            self._listener.commit(self._consumer, command.offsets, source="api")
            return command.offsets
        self._commits.take(caller, command, caller.asked_at)
        self._send_held()
        return _ANSWERED_LATER

    def _send_held(self) -> None:
        """Send the held commits whose partitions have no commit in flight any more (none
        while the consumer closes: ``close()`` may answer commits, and a commit sent into
        it after a fatal error can abort librdkafka's termination)."""
        while not self._closing and (ready := self._commits.sendable()):
            for commit in ready:  # one that is not sent may release the ones behind it
                self._send(commit)

    def _send(self, commit: AppCommit) -> None:
        offsets = commit.command.offsets
        try:
            if self._consumer is None:
                raise NotInGroup("not in the group")
            if time.monotonic() >= commit.deadline:
                raise CommitFailed(TAKEN_TOO_LATE)
            # Held a while, maybe: the partitions may have moved on meanwhile.
            self._core.check_commit(offsets, commit.command.generation_id)
            send_commit(self._consumer, offsets)
        except Exception as exc:
            if isinstance(exc, CommitFailed):
                self._listener.commit_done(offsets, "api", "failed")
            commit.tell(self._command_error(commit.command, exc)[0])
        else:
            self._commits.sent(commit)

    def _on_commit(self, error: KafkaError | None, partitions: list[KafkaTopicPartition]) -> None:
        """librdkafka answered an asynchronous commit (from ``poll()`` or ``close()``)."""
        try:
            commit = self._commits.answered(partitions)
            if commit is not None:
                self._commit_answered(commit, commit_failure(error, partitions))
            self._send_held()
        except Exception:  # raised in a librdkafka callback, it would end the member thread
            self._log.exception("handling a commit's answer failed")

    def _commit_answered(self, commit: AppCommit, failure: str | None) -> None:
        offsets = commit.command.offsets
        if commit.caller is None:  # its caller was told "unknown" already, and counted
            self._log.warning(
                "Kafka answered a commit after its caller was told the outcome is unknown",
                outcome=failure or "committed",
                offsets=[po.as_dict() for po in offsets],
            )
            return
        self._listener.commit_done(offsets, "api", "failed" if failure else "committed")
        if failure is not None:
            commit.tell(CommitFailed(failure))
        else:
            commit.succeed()

    def _expire_commits(self, now: float) -> None:
        self._told(self._commits.overdue(now))
        self._send_held()  # a held commit dropped may have held others back

    def _interrupt_commits(self) -> None:
        """A barrier opens: nothing can answer a commit until it is over (no ``poll()``
        inside a callback), so their callers are told now (``sidecar.commits``)."""
        self._told(self._commits.interrupt("a rebalance began"))

    def _told(self, told: Told) -> None:
        """Count and log the commits whose callers were answered without Kafka's word."""
        for commit in told.unknown:
            self._listener.commit_done(commit.command.offsets, "api", "unknown")
        for commit in told.not_sent:
            self._listener.commit_done(commit.command.offsets, "api", "failed")
        if told.unknown or told.not_sent:
            self._log.warning(
                "commits answered without Kafka's answer",
                outcome_unknown=len(told.unknown),
                not_sent=len(told.not_sent),
                in_flight=len(self._commits),
            )

    def _enforce(self, reason: str, *, in_barrier: bool) -> EnforceResult:
        """Between polls, or inside a barrier (``_serve_in_barrier``: nothing is asked of
        the consumer inside its own callback; the membership answers "coalesced")."""
        if self._consumer is None or (in_barrier and self._closing):
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
            self._rejoining = not self._settings.cooperative
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

    def _fail(self, reason: str) -> None:
        """Fail stop (the listener could not journal): the loop ends, then the process.
        Commands still queued, and any sent from now on, are answered ``MemberGone``."""
        self._leaving.set()
        self._handoff.close(f"the group member stopped: {reason}")
        self._told(self._commits.abandon("the member stopped"))
        self._fail_stop(reason)
