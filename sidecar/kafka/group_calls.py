"""The ``Consumer`` calls the group member makes, as plain functions of the member thread.

Nothing here keeps state and nothing here may run on another thread: the member thread
passes its own ``Consumer`` in. What they answer is in the domain's types.

The generation id has no accessor in confluent-kafka: we read it from the serialized
consumer group metadata (``consumer_group_metadata()``, librdkafka's
``rd_kafka_consumer_group_metadata_write``: ``"CGMDv2:"``, then the int32 generation id
in host byte order, then the NUL-terminated group id and member id, a byte that is 1 when
there is no instance id, and the NUL-terminated instance id when there is). Under
``group.protocol=consumer`` that field holds the member epoch. ``generation_of`` checks
the magic and answers -1 for anything it does not recognise.

The member id comes from the same metadata, not from ``memberid()``: one request to
librdkafka's main thread instead of two (docs/decisions/0102-member-id-from-group-metadata.md).
A format this code does not recognise (a librdkafka that changed it) costs the generation
(-1) and a second request for the member id, never the member id itself.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sidecar.commands import CommitFailed
from sidecar.credentials import observing
from sidecar.kafka.enforce import ENFORCE_PATTERN as ENFORCE_PATTERN  # re-exported
from sidecar.kafka.enforce import rejoin as rejoin  # re-exported
from sidecar.logs import kafka_logger
from sidecar.model import OffsetStatus, PartitionOffset
from sidecar.settings import Settings

_CGMD_MAGIC = b"CGMDv2:"
# Between two reads of committed offsets that failed, within the bound.
_COMMITTED_RETRY_SECONDS = 0.25


def generation_of(cgmd: bytes) -> int:
    if not cgmd.startswith(_CGMD_MAGIC) or len(cgmd) < len(_CGMD_MAGIC) + 4:
        return -1
    (generation,) = struct.unpack_from("=i", cgmd, len(_CGMD_MAGIC))
    return int(generation)


def identity_of(cgmd: bytes) -> tuple[str | None, int] | None:
    """The member id (``None`` before the first join) and generation in serialized group
    metadata; ``None`` for anything not in librdkafka's format."""
    start = len(_CGMD_MAGIC) + 4
    if not cgmd.startswith(_CGMD_MAGIC) or len(cgmd) < start:
        return None
    fields = cgmd[start:].split(b"\0", 2)  # group id, member id, the rest
    if len(fields) < 3:
        return None
    return fields[1].decode("utf-8", "replace") or None, generation_of(cgmd)


_warned: list[bool] = []


def _unknown_format_once() -> None:
    """Say it once per process: without the generation, rebalances are counted once and
    their durations not at all, events carry generation -1 and analytics drops them."""
    if not _warned:
        _warned.append(True)
        structlog.get_logger("sidecar.member").warning(
            "librdkafka's group metadata is in a format this sidecar does not know: "
            "generation unknown (-1) from now on; upgrade rebalance-sidecar"
        )


def read_identity(consumer: Consumer) -> tuple[str | None, int] | None:
    """The member id and generation librdkafka holds now (one request to its main thread);
    ``None`` while it cannot say."""
    try:
        identity = identity_of(bytes(consumer.consumer_group_metadata()))
        if identity is None:  # a format this code does not know: the member id at least
            _unknown_format_once()
            return consumer.memberid() or None, -1
    except (KafkaException, RuntimeError, TypeError):
        return None
    return identity


@dataclass(frozen=True)
class CommittedOffsets:
    offsets: tuple[PartitionOffset, ...]
    attempts: int
    error: str | None  # the last failure, when some offsets stayed unknown

    @property
    def unknown(self) -> int:
        return sum(1 for po in self.offsets if po.status is OffsetStatus.UNKNOWN)


def committed_offsets(
    consumer: Consumer, partitions: list[KafkaTopicPartition], bound_s: float
) -> CommittedOffsets:
    """The committed offsets of ``partitions``, retried until ``bound_s`` has passed.

    What is still unreadable then is ``OffsetStatus.UNKNOWN`` (offset ``None``), never
    ``NONE``: "nothing committed" would make an application start from the reset policy
    and reprocess (or skip) a partition someone else committed.
    """
    wanted = {(p.topic, p.partition) for p in partitions}
    found: dict[tuple[str, int], PartitionOffset] = {}
    deadline = time.monotonic() + bound_s
    attempts, error = 0, None
    while wanted - found.keys():
        attempts += 1
        ask = sorted(wanted - found.keys())
        try:
            answers = consumer.committed(
                [KafkaTopicPartition(t, p) for t, p in ask],
                timeout=max(deadline - time.monotonic(), 0.001),
            )
        except KafkaException as exc:
            error, answers = str(exc.args[0]), []
        for answer in answers:
            if answer.error is not None:
                error = str(answer.error)
                continue
            found[(answer.topic, answer.partition)] = (
                PartitionOffset(
                    answer.topic, answer.partition, answer.offset, OffsetStatus.COMMITTED
                )
                if answer.offset >= 0
                else PartitionOffset(answer.topic, answer.partition, None, OffsetStatus.NONE)
            )
        if time.monotonic() + _COMMITTED_RETRY_SECONDS >= deadline:
            break
        if wanted - found.keys():
            time.sleep(_COMMITTED_RETRY_SECONDS)
    for topic, partition in wanted - found.keys():
        found[(topic, partition)] = PartitionOffset(topic, partition, None, OffsetStatus.UNKNOWN)
    missing = any(po.status is OffsetStatus.UNKNOWN for po in found.values())
    return CommittedOffsets(tuple(sorted(found.values())), attempts, error if missing else None)


def _commit_request(offsets: tuple[PartitionOffset, ...]) -> list[KafkaTopicPartition]:
    return [
        KafkaTopicPartition(po.topic, po.partition, po.offset)
        for po in offsets
        if po.offset is not None
    ]


def commit_offsets(consumer: Consumer, offsets: tuple[PartitionOffset, ...]) -> None:
    """Commit synchronously; ``CommitFailed`` says which partitions failed and why."""
    try:
        results = consumer.commit(offsets=_commit_request(offsets), asynchronous=False)
    except KafkaException as exc:
        raise CommitFailed(f"commit failed: {exc.args[0]}") from None
    failure = commit_failure(None, results or [])
    if failure is not None:
        raise CommitFailed(failure)


def commit_failure(error: KafkaError | None, partitions: list[KafkaTopicPartition]) -> str | None:
    """Why an answered commit failed (``None``: every partition committed)."""
    if error is not None:
        return f"commit failed: {error.str()}"
    failed = [f"{p.topic}[{p.partition}]: {p.error}" for p in partitions if p.error]
    return "commit failed for " + "; ".join(failed) if failed else None


def send_commit(consumer: Consumer, offsets: tuple[PartitionOffset, ...]) -> None:
    """Commit asynchronously: ``on_commit`` answers (``sidecar.commits``); ``CommitFailed``
    when librdkafka refuses to send it at all."""
    try:
        consumer.commit(offsets=_commit_request(offsets), asynchronous=True)
    except KafkaException as exc:
        raise CommitFailed(f"commit failed: {exc.args[0]}") from None


def consumer_config(
    settings: Settings,
    on_error: Callable[[KafkaError], None],
    on_statistics: Callable[[str], None],
    on_commit: Callable[[KafkaError | None, list[KafkaTopicPartition]], None],
) -> dict[str, Any]:
    """The member's ``Consumer`` configuration: it holds membership, never auto-commits."""
    # The same configuration the CLI has librdkafka judge before start-up, plus callbacks.
    config: dict[str, Any] = {
        **settings.consumer_config(),
        "error_cb": observing(on_error, settings.consumer_config()),
        "on_commit": on_commit,
        "logger": kafka_logger("member"),
    }
    if settings.statistics_interval_ms:
        config["stats_cb"] = on_statistics
    return config
