"""Commits the member sent for the application and Kafka has not answered yet.

librdkafka's synchronous commit has no timeout of its own: it waits for a coordinator,
then for an answer, a minute and more when the coordinator is slow, and the member
thread would sit in it, every other command and rebalance waiting behind. So a
``POST /commit`` served between polls is sent *asynchronously*: the member thread goes
on polling, librdkafka's ``on_commit`` (served by ``poll()``) answers the caller, and a
caller Kafka has not answered within ``SIDECAR_COMMIT_TIMEOUT_MS`` is told the outcome
is unknown (``CommitUnanswered``, a 503: committing the same offsets again is safe).

A commit Kafka answers after that is logged, not answered twice. ``on_commit`` names no
request, so an answer is matched to the oldest commit in flight with the same offsets.
librdkafka holds a rejoin until the commits in flight are answered
(``wait_commit_cnt``), so a commit sent before a revocation still lands before the
partitions move, as a synchronous one did.

Inside a rebalance callback ``poll()`` cannot run, so nothing could answer an
asynchronous commit there: commits made during a revoke barrier stay synchronous
(``sidecar.group_calls.commit_offsets``). Member thread only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.errors import CommitUnanswered
from sidecar.handoff import PendingCommand
from sidecar.model import PartitionOffset

CommitKey = tuple[tuple[str, int, int], ...]


def commit_key(partitions: Iterable[KafkaTopicPartition | PartitionOffset]) -> CommitKey:
    """What identifies a commit in ``on_commit``: its partitions and offsets."""
    return tuple(
        sorted((p.topic, p.partition, p.offset) for p in partitions if p.offset is not None)
    )


def commit_failure(error: KafkaError | None, partitions: list[KafkaTopicPartition]) -> str | None:
    """Why an answered commit failed (``None``: every partition committed)."""
    if error is not None:
        return f"commit failed: {error.str()}"
    failed = [f"{p.topic}[{p.partition}]: {p.error}" for p in partitions if p.error]
    return "commit failed for " + "; ".join(failed) if failed else None


@dataclass(slots=True)
class CommitInFlight:
    key: CommitKey
    offsets: tuple[PartitionOffset, ...]
    caller: PendingCommand | None  # None once the caller was told the outcome is unknown
    deadline: float


class CommitsInFlight:
    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._flights: list[CommitInFlight] = []

    def __len__(self) -> int:
        return len(self._flights)

    def sent(
        self, caller: PendingCommand, offsets: tuple[PartitionOffset, ...], now: float
    ) -> None:
        self._flights.append(
            CommitInFlight(commit_key(offsets), offsets, caller, now + self.bound_s)
        )

    def answered(self, partitions: list[KafkaTopicPartition]) -> CommitInFlight | None:
        """The commit this ``on_commit`` answers, out of flight (``None``: not one of ours,
        e.g. a synchronous commit's, which librdkafka reports here too)."""
        key = commit_key(partitions)
        for index, flight in enumerate(self._flights):
            if flight.key == key:
                return self._flights.pop(index)
        return None

    def overdue(self, now: float) -> list[CommitInFlight]:
        """Commits whose callers waited the bound: each is answered ``CommitUnanswered``
        here, once (the commit stays in flight for its late answer to be logged)."""
        late = [f for f in self._flights if f.caller is not None and now >= f.deadline]
        for flight in late:
            self._tell_unknown(
                flight,
                f"no answer from Kafka within {self.bound_s:g} s: the outcome of the commit "
                "is unknown (committing the same offsets again is safe)",
            )
        return late

    def abandon(self, why: str) -> int:
        """The consumer is gone: callers still waiting are told the outcome is unknown."""
        waiting = 0
        for flight in self._flights:
            if flight.caller is not None:
                waiting += 1
                self._tell_unknown(
                    flight, f"{why} before Kafka answered the commit: its outcome is unknown"
                )
        self._flights.clear()
        return waiting

    @staticmethod
    def _tell_unknown(flight: CommitInFlight, message: str) -> None:
        caller, flight.caller = flight.caller, None
        if caller is not None and not caller.future.done():
            caller.future.set_exception(CommitUnanswered(message))
