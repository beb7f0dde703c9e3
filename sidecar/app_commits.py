"""The application's commits, as the member thread runs them.

Between polls a ``POST /commit`` is sent asynchronously and answered by ``on_commit``
(the rules are ``sidecar.commits``'); inside a rebalance callback it is committed with a
bound by the listener (``sidecar.callback_commits``). Kafka's answer is judged as the
protocol means it (``commit_verdict``): a stale member epoch (KIP-848) is sent again
within the caller's bound, a fence (``UNKNOWN_MEMBER_ID``, ``FENCED_MEMBER_EPOCH``) is
final and answered ``CommitFenced`` (a 409 that names it), anything else ``CommitFailed``.

Member thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.callback_commits import Verdict, commit_verdict, fenced_message
from sidecar.commands import Commit, NotInGroup
from sidecar.commits import TAKEN_TOO_LATE, AppCommit, CommitsInFlight, Told
from sidecar.errors import CommitFailed, CommitFenced, KafkaRefused, MemberGone
from sidecar.handoff import Command, PendingCommand
from sidecar.kafka.group_calls import commit_failure, send_commit
from sidecar.listener import JournalFailed, RebalanceListener
from sidecar.membership import Membership

# A command whose caller is answered later (a commit, when Kafka answers it).
ANSWERED_LATER = object()


def command_error(command: Command[Any], exc: Exception, log: Any) -> tuple[Exception, str | None]:
    """What the command's caller is told, and the fail stop it calls for, if any.

    A journal that failed is the same fail stop as in a callback (``MemberGone``);
    librdkafka raising is Kafka's answer (``KafkaRefused``), for the caller to retry.
    Anything else is a bug and goes back as it is (a 500)."""
    if isinstance(exc, JournalFailed):
        return MemberGone(f"the group member stopped: {exc}"), str(exc)
    if isinstance(exc, KafkaException):
        log.warning("Kafka refused a command", command=type(command).__name__, error=str(exc))
        error = exc.args[0] if exc.args else exc
        text = error.str() if isinstance(error, KafkaError) else error
        return KafkaRefused(f"Kafka refused it: {text}"), None
    return exc, None


class AppCommits:
    def __init__(
        self,
        bound_s: float,
        core: Membership,
        listener: RebalanceListener,
        consumer: Callable[[], Consumer | None],
        closing: Callable[[], bool],
    ) -> None:
        self._core = core
        self._listener = listener
        self._consumer = consumer
        self._closing = closing
        self._commits = CommitsInFlight(bound_s)

    def next_deadline(self) -> float | None:
        return self._commits.next_deadline()

    def commit(self, command: Commit, caller: PendingCommand | None) -> Any:
        """Commit for the application: sent asynchronously and answered by ``on_commit``
        when there is a ``caller`` to answer later (between polls), else inside a callback
        with the listener's bound (``CommitUnanswered`` past it)."""
        consumer = self._consumer()
        if consumer is None:
            raise NotInGroup("not in the group")
        self._core.check_commit(command.offsets, command.generation_id)
        if caller is None or not any(po.offset is not None for po in command.offsets):
            self._listener.commit(consumer, command.offsets, source="api")
            return command.offsets
        self._commits.take(caller, command, caller.asked_at)
        self.send_held()
        return ANSWERED_LATER

    def send_held(self) -> None:
        """Send the held commits whose partitions have no commit in flight any more (none
        while the consumer closes: ``close()`` may answer commits, and a commit sent into
        it after a fatal error can abort librdkafka's termination)."""
        while not self._closing() and (ready := self._commits.sendable()):
            for commit in ready:  # one that is not sent may release the ones behind it
                self._send(commit)

    def _send(self, commit: AppCommit) -> None:
        offsets = commit.command.offsets
        try:
            consumer = self._consumer()
            if consumer is None:
                raise NotInGroup("not in the group")
            if time.monotonic() >= commit.deadline:
                raise CommitFailed(TAKEN_TOO_LATE)
            # Held a while, maybe: the partitions may have moved on meanwhile.
            self._core.check_commit(offsets, commit.command.generation_id)
            send_commit(consumer, offsets)
        except Exception as exc:
            if isinstance(exc, CommitFailed):
                self._listener.commit_done(offsets, "api", "failed")
            commit.tell(command_error(commit.command, exc, self._listener.log)[0])
        else:
            self._commits.sent(commit)

    def on_commit(self, error: KafkaError | None, partitions: list[KafkaTopicPartition]) -> None:
        """librdkafka answered an asynchronous commit (from ``poll()`` or ``close()``)."""
        try:
            commit = self._commits.answered(partitions)
            if commit is not None:
                self._answered(commit, error, partitions)
            elif self._listener.unconfirmed.answered(partitions):
                self._listener.log.warning(
                    "Kafka answered a commit made inside a rebalance callback after its "
                    "outcome was recorded unknown",
                    outcome=commit_failure(error, partitions) or "committed",
                )
            self.send_held()
        except Exception:  # raised in a librdkafka callback, it would end the member thread
            self._listener.log.exception("handling a commit's answer failed")

    def _answered(
        self, commit: AppCommit, error: KafkaError | None, partitions: list[KafkaTopicPartition]
    ) -> None:
        offsets = commit.command.offsets
        failure = commit_failure(error, partitions)
        if commit.caller is None:  # its caller was told "unknown" already, and counted
            self._listener.log.warning(
                "Kafka answered a commit after its caller was told the outcome is unknown",
                outcome=failure or "committed",
                offsets=[po.as_dict() for po in offsets],
            )
            return
        verdict, code = commit_verdict(error, partitions)
        if verdict is Verdict.RETRIABLE and time.monotonic() < commit.deadline:
            # KIP-848: the member's epoch moved on while the commit was on its way; the
            # partitions are still ours if the membership says so: send it again.
            self._listener.log.info("commit at a stale member epoch: sending it again")
            self._commits.retry(commit)
            self.send_held()
            return
        self._listener.commit_done(offsets, "api", "failed" if failure else "committed")
        if verdict is Verdict.FENCED:
            commit.tell(CommitFenced(fenced_message(code)))
        elif failure is not None:
            commit.tell(CommitFailed(failure))
        else:
            commit.succeed()

    def expire(self, now: float) -> None:
        self.told(self._commits.overdue(now))
        self.send_held()  # a held commit dropped may have held others back

    def interrupt(self) -> None:
        """A barrier opens: nothing can answer a commit until it is over (no ``poll()``
        inside a callback), so their callers are told now (``sidecar.commits``)."""
        self.told(self._commits.interrupt("a rebalance began"))

    def abandon(self, why: str) -> None:
        self.told(self._commits.abandon(why))
        self._listener.unconfirmed.clear()

    def told(self, told: Told) -> None:
        """Count and log the commits whose callers were answered without Kafka's word."""
        for commit in told.unknown:
            self._listener.commit_done(commit.command.offsets, "api", "unknown")
        for commit in told.not_sent:
            self._listener.commit_done(commit.command.offsets, "api", "failed")
        if told.unknown or told.not_sent:
            self._listener.log.warning(
                "commits answered without Kafka's answer",
                outcome_unknown=len(told.unknown),
                not_sent=len(told.not_sent),
                in_flight=len(self._commits),
            )
