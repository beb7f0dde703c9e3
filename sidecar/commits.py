"""The application's commits the member took between polls: held, in flight, answered.

librdkafka's synchronous commit has no timeout of its own: it waits for a coordinator,
then for an answer, a minute and more when the coordinator is slow, and the member
thread would sit in it, every other command and rebalance waiting behind. So a
``POST /commit`` served between polls is sent *asynchronously*: the member thread goes
on polling, librdkafka's ``on_commit`` (served by ``poll()``) answers the caller, and a
caller still waiting ``SIDECAR_COMMIT_TIMEOUT_MS`` after it asked is told the outcome is
unknown (``CommitUnanswered``, a 503).

Rules this module keeps:

- **One commit in flight per partition.** librdkafka retries a commit that timed out, so
  two commits of one partition in flight could land in either order and move its
  committed offset backwards. A commit whose partitions an earlier one still has in
  flight is *held* until that one is answered; one still held at its deadline is not
  sent at all (``CommitFailed``: nothing was committed).
- **Answers are matched by offsets.** ``on_commit`` names no request: an answer belongs
  to the commit in flight with the same partitions and offsets (librdkafka does not
  report synchronous commits there). A commit whose caller was told "unknown" stays in
  flight until Kafka answers, and that late answer is logged, not answered twice.
- **Nothing is answered inside a rebalance callback** (no ``poll()`` runs there): when a
  revoke barrier opens, callers still waiting are told the outcome is unknown at once
  (their commit was sent first and librdkafka holds the rejoin until it is answered, so
  it lands, or fails, before the partitions move), held commits are not sent, and
  commits made during the barrier are synchronous (``sidecar.kafka.group_calls``). Those are
  *not* held behind a commit in flight (nothing could release them before the
  partitions move, and the application's last commit before a handover is the one that
  matters): sent after it on the same connection, they land after it, unless librdkafka
  has to retry the earlier one (a timed-out request, a moved coordinator).

Member thread only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commands import Commit
from sidecar.errors import CommitFailed, CommitUnanswered
from sidecar.handoff import PendingCommand

CommitKey = tuple[tuple[str, int, int], ...]
PartitionKey = tuple[str, int]


class _Offset(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int | None: ...


def commit_key(partitions: Iterable[_Offset]) -> CommitKey:
    """What identifies a commit in ``on_commit``: its partitions and offsets."""
    return tuple(
        sorted((p.topic, p.partition, p.offset) for p in partitions if p.offset is not None)
    )


@dataclass(slots=True)
class AppCommit:
    """One ``POST /commit`` taken between polls."""

    command: Commit
    caller: PendingCommand | None  # None once answered (or told "unknown")
    deadline: float  # monotonic: when its caller is told, whatever happened
    key: CommitKey = field(init=False)
    partitions: frozenset[PartitionKey] = field(init=False)

    def __post_init__(self) -> None:
        self.key = commit_key(self.command.offsets)
        self.partitions = frozenset((t, p) for t, p, _ in self.key)

    def succeed(self) -> None:
        caller, self.caller = self.caller, None
        if caller is not None and not caller.future.done():
            caller.future.set_result(self.command.offsets)

    def tell(self, error: Exception) -> bool:
        """Answer the caller with ``error`` once; ``True`` when there was one to tell."""
        caller, self.caller = self.caller, None
        if caller is None:
            return False
        if not caller.future.done():
            caller.future.set_exception(error)
        return True


@dataclass
class Told:
    """Callers answered without Kafka's word: ``unknown`` ones had their commit sent,
    ``not_sent`` ones did not (nothing of theirs was committed)."""

    unknown: list[AppCommit] = field(default_factory=list)
    not_sent: list[AppCommit] = field(default_factory=list)


class CommitsInFlight:
    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._held: list[AppCommit] = []
        self._sent: list[AppCommit] = []

    def __len__(self) -> int:
        return len(self._held) + len(self._sent)

    def take(self, caller: PendingCommand, command: Commit, asked_at: float) -> None:
        """Hold a commit its caller asked for at ``asked_at`` (monotonic)."""
        self._held.append(AppCommit(command, caller, asked_at + self.bound_s))

    def sendable(self) -> list[AppCommit]:
        """The held commits to send now, oldest first, out of the held list: those whose
        partitions no commit in flight, and no older held one, touches."""
        busy: set[PartitionKey] = set()
        for commit in self._sent:
            busy |= commit.partitions
        ready: list[AppCommit] = []
        still: list[AppCommit] = []
        for commit in self._held:
            (still if commit.partitions & busy else ready).append(commit)
            busy |= commit.partitions
        self._held = still
        return ready

    def sent(self, commit: AppCommit) -> None:
        self._sent.append(commit)

    def retry(self, commit: AppCommit) -> None:
        """Send ``commit`` again (Kafka answered it retriable, ``sidecar.app_commits``):
        held first, ahead of any newer commit of its partitions."""
        self._held.insert(0, commit)

    def answered(self, partitions: list[KafkaTopicPartition]) -> AppCommit | None:
        """The commit this ``on_commit`` answers, out of flight (``None``: not ours)."""
        key = commit_key(partitions)
        for index, commit in enumerate(self._sent):
            if commit.key == key:
                return self._sent.pop(index)
        return None

    def next_deadline(self) -> float | None:
        """When ``overdue`` next has a caller to tell (monotonic), if any."""
        waiting = [c.deadline for c in self._sent if c.caller is not None]
        waiting += [c.deadline for c in self._held]
        return min(waiting, default=None)

    def overdue(self, now: float) -> Told:
        """Tell the callers whose deadline passed; held ones are dropped (never sent),
        sent ones stay in flight for Kafka's late answer."""
        told = Told()
        for commit in self._sent:
            if commit.caller is not None and now >= commit.deadline:
                commit.tell(CommitUnanswered(self._unknown(f"within {self.bound_s:g} s")))
                told.unknown.append(commit)
        late = [c for c in self._held if now >= c.deadline]
        self._held = [c for c in self._held if now < c.deadline]
        for commit in late:
            if commit.tell(CommitFailed(_NOT_SENT.format(within=f"within {self.bound_s:g} s"))):
                told.not_sent.append(commit)
        return told

    def interrupt(self, why: str) -> Told:
        """``why`` (a rebalance began, the consumer closed): nothing can answer for now.
        Every caller still waiting is told; held commits are dropped."""
        told = Told()
        for commit in self._sent:
            if commit.tell(CommitUnanswered(self._unknown(f"before {why}"))):
                told.unknown.append(commit)
        held, self._held = self._held, []
        for commit in held:
            if commit.tell(CommitFailed(_NOT_SENT.format(within=f"before {why}"))):
                told.not_sent.append(commit)
        return told

    def abandon(self, why: str) -> Told:
        """The consumer is gone: tell every caller still waiting, forget every commit."""
        told = self.interrupt(why)
        self._sent.clear()
        return told

    @staticmethod
    def _unknown(when: str) -> str:
        return (
            f"no answer from Kafka {when}: the outcome of the commit is unknown (it may "
            "still be applied; commit the same or newer offsets again)"
        )


#: A commit the member could only send after its caller's bound had passed.
TAKEN_TOO_LATE = (
    "not committed: the member could only send the commit after SIDECAR_COMMIT_TIMEOUT_MS "
    "had passed since it was asked (it was busy); commit again"
)

_NOT_SENT = (
    "not committed: an earlier commit of the same partitions was still unanswered by "
    "Kafka {within}, and only one commit of a partition is sent at a time (so that its "
    "committed offset never moves backwards); commit again"
)
