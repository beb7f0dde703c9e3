"""Commits made inside a rebalance callback, bounded whatever the coordinator does.

Two commits run inside a callback: the offsets blocking subscribers hand back on
``revoked``, and a ``POST /commit`` served while the revoke barrier waits. librdkafka's
synchronous commit has no timeout of its own (a stalled coordinator held a revoke
callback 40 s with a revoke timeout of 10 s and a commit timeout of 10 s), and
``on_commit`` cannot answer inside a callback (no ``poll()`` runs there; a nested one
would corrupt confluent-kafka's per-thread call state). So such a commit is sent
*asynchronously* and its outcome read back: the committed offsets are fetched (each
fetch bounded by the time left) until they are the ones sent. Past the bound the
outcome is ``unknown``: the callback returns, the commit stays in flight (librdkafka
holds the rejoin until it is answered, so it lands, or fails, before the partitions
move), and Kafka's late answer (``on_commit``, from a later ``poll()``) is logged.

The bound: ``SIDECAR_COMMIT_TIMEOUT_MS`` from the commit, and never past the callback's
own end (its start plus the revoke timeout plus the commit timeout), so the group is
held no longer than that however many commits the barrier serves.

Commit errors under KIP-848 (``commit_verdict``): ``STALE_MEMBER_EPOCH`` is retriable
(the member's epoch moved on while the commit was on its way; librdkafka sends the next
one with the new epoch), ``UNKNOWN_MEMBER_ID`` and ``FENCED_MEMBER_EPOCH`` are final (the
member is out of the group: nothing it commits will be taken before it rejoins).

Member thread only.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commits import CommitKey, commit_key
from sidecar.kafka.group_calls import send_commit
from sidecar.model import PartitionOffset

# Between two reads of the committed offsets that did not show the commit yet.
_READ_BACK_PAUSE_SECONDS = 0.05


class Verdict(enum.Enum):
    COMMITTED = "committed"
    RETRIABLE = "retriable"  # STALE_MEMBER_EPOCH: send again within the bound
    FENCED = "fenced"  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH: final, the member is out
    FAILED = "failed"  # any other error: Kafka refused it


_RETRIABLE = frozenset({KafkaError.STALE_MEMBER_EPOCH})
_FENCED = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_MEMBER_EPOCH})


def _code(error: object) -> int | None:
    return error.code() if isinstance(error, KafkaError) else None


def verdict_of_codes(codes: Iterable[int | None]) -> tuple[Verdict, int | None]:
    """The verdict on an answered commit from its error codes (``None``: no error), and
    the code that decided it. A fence anywhere is final; a stale epoch is retried."""
    seen = [c for c in codes if c is not None]
    if not seen:
        return Verdict.COMMITTED, None
    for code in seen:
        if code in _FENCED:
            return Verdict.FENCED, code
    for code in seen:
        if code not in _RETRIABLE:
            return Verdict.FAILED, code
    return Verdict.RETRIABLE, seen[0]


def commit_verdict(
    error: KafkaError | None, partitions: list[KafkaTopicPartition]
) -> tuple[Verdict, int | None]:
    """``verdict_of_codes`` of ``on_commit``'s answer (its error and partitions')."""
    return verdict_of_codes([_code(error), *(_code(p.error) for p in partitions)])


def fenced_message(code: int | None) -> str:
    """The 409's words for a final KIP-848 commit error."""
    name = _NAMES.get(code, str(code)) if code is not None else "an unknown error"
    return (
        f"Kafka fenced the commit ({name}): this member is no longer in the group at the "
        "epoch it committed with; nothing was committed. Wait for the member to rejoin and "
        "for the partitions' next assignment, then commit what that assignment says"
    )


_NAMES = {
    KafkaError.UNKNOWN_MEMBER_ID: "UNKNOWN_MEMBER_ID",
    KafkaError.FENCED_MEMBER_EPOCH: "FENCED_MEMBER_EPOCH",
    KafkaError.STALE_MEMBER_EPOCH: "STALE_MEMBER_EPOCH",
}


class Outcome(enum.Enum):
    COMMITTED = "committed"
    UNKNOWN = "unknown"  # not confirmed within the bound: it may still land
    FAILED = "failed"  # librdkafka refused to send it


@dataclass(frozen=True)
class BoundedCommit:
    outcome: Outcome
    error: str | None = None


def commit_bounded(
    consumer: Consumer, offsets: tuple[PartitionOffset, ...], deadline: float
) -> BoundedCommit:
    """Send ``offsets`` asynchronously, then read them back until ``deadline``
    (monotonic). Never waits past it (each read is bounded by the time left)."""
    wanted = {(po.topic, po.partition): po.offset for po in offsets if po.offset is not None}
    if not wanted:
        return BoundedCommit(Outcome.COMMITTED)
    try:
        send_commit(consumer, offsets)
    except Exception as exc:  # CommitFailed: librdkafka refused to send it at all
        return BoundedCommit(Outcome.FAILED, str(exc))
    ask = [KafkaTopicPartition(t, p) for t, p in sorted(wanted)]
    while (left := deadline - time.monotonic()) > 0:
        try:
            answers = consumer.committed(ask, timeout=left)
        except (KafkaException, RuntimeError):
            answers = []
        read = {(a.topic, a.partition): a.offset for a in answers if a.error is None}
        if read == wanted:
            return BoundedCommit(Outcome.COMMITTED)
        if deadline - time.monotonic() > _READ_BACK_PAUSE_SECONDS:
            time.sleep(_READ_BACK_PAUSE_SECONDS)
        else:
            break
    return BoundedCommit(
        Outcome.UNKNOWN,
        "no answer from Kafka within the bound inside the rebalance callback: the outcome "
        "of the commit is unknown (it may still be applied)",
    )


class UnconfirmedCommits:
    """Commits made inside callbacks whose outcome was recorded ``unknown``: Kafka's late
    answer (``on_commit``) is matched here and logged, not taken for another commit."""

    def __init__(self) -> None:
        self._keys: list[CommitKey] = []

    def add(self, offsets: tuple[PartitionOffset, ...]) -> None:
        self._keys.append(commit_key(offsets))

    def answered(self, partitions: list[KafkaTopicPartition]) -> bool:
        key = commit_key(partitions)
        if key in self._keys:
            self._keys.remove(key)
            return True
        return False

    def clear(self) -> None:
        self._keys.clear()
