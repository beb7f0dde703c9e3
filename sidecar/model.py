"""Value types shared by every part: partitions, the assignment snapshot, the event.

All of them are immutable, so the consumer thread can hand them to the asyncio loop
without locks: publishing a new snapshot is replacing one reference.
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

Protocol = Literal["eager", "cooperative"]

#: The largest offset Kafka (a signed 64-bit integer) and librdkafka take.
MAX_OFFSET = 2**63 - 1
#: The largest partition number an offset may name (Kafka allows far fewer per topic).
MAX_PARTITION = 1_000_000
#: From here on a JSON number with a fraction or an exponent (``1e17``) is no longer
#: every whole number (``9007199254740993.0`` reads as 2**53): a float would commit a
#: neighbouring offset. Every whole number below it is exact.
EXACT_FLOAT_LIMIT = 2**53


def whole_number(value: Any) -> int | None:
    """``value`` as a whole number when JSON wrote one: ``5`` or ``5.0``; ``None`` for a
    boolean (``true`` is not 1), a string, a fraction, or a float too large to be exact."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < EXACT_FLOAT_LIMIT:
        return int(value)
    return None


#: Digits of the ``sequence`` extension: SQLite's largest INTEGER (2**63 - 1) has 19, so
#: every sequence fits and string order is numeric order, as the CloudEvents sequence
#: extension requires of its values.
SEQUENCE_DIGITS = 19


def sequence_text(sequence: int) -> str:
    """The ``sequence`` extension's value: fixed-width, zero-padded, still an integer."""
    return f"{sequence:0{SEQUENCE_DIGITS}d}"


def event_source(group_id: str, member: str) -> str:
    """``kafka://<group>/<member>``, a valid URI-reference for any group or member id.

    Group ids may hold any character (spaces, ``/``, ``%``, non-ASCII): everything but
    RFC 3986's unreserved characters is percent-encoded (UTF-8), so consumers can split
    on ``/`` and ``unquote`` each part.
    """
    return f"kafka://{quote(group_id, safe='')}/{quote(member, safe='')}"


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition}


class OffsetStatus(enum.StrEnum):
    """What an ``assigned`` event's offset means; ``offset`` is null unless committed."""

    COMMITTED = "committed"
    NONE = "none"  # the group has committed nothing for this partition
    UNKNOWN = "unknown"  # could not be read in time: NOT "nothing committed"


@dataclass(frozen=True, order=True, slots=True)
class PartitionOffset:
    """A partition with an offset: the committed one (``None`` when there is none)."""

    topic: str
    partition: int
    offset: int | None
    status: OffsetStatus | None = None  # set on assignment, where null is ambiguous

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
        }
        if self.status is not None:
            entry["offset_status"] = self.status.value
        return entry


class MemberState(enum.StrEnum):
    STARTING = "starting"
    JOINING = "joining"
    STABLE = "stable"
    REBALANCING = "rebalancing"
    LOST = "lost"
    STOPPED = "stopped"


class EventType(enum.StrEnum):
    ASSIGNED = "kafka.partitions.assigned"
    REVOKED = "kafka.partitions.revoked"
    LOST = "kafka.partitions.lost"
    REBALANCE_REQUESTED = "kafka.rebalance.requested"

    @property
    def gates_rebalance(self) -> bool:
        """Revoked and lost hold the group until blocking subscribers acknowledge."""
        return self in (EventType.REVOKED, EventType.LOST)


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the consumer thread last published; the HTTP side only ever reads this."""

    group_id: str
    member_id: str | None
    group_instance_id: str | None
    generation_id: int
    protocol: Protocol
    state: MemberState
    partitions: tuple[TopicPartition, ...]
    sequence: int
    updated_at: float = field(default_factory=time.time)
    error: str | None = None
    connected: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "generation_id": self.generation_id,
            "protocol": self.protocol,
            "state": self.state.value,
            "partitions": [tp.as_dict() for tp in self.partitions],
            "sequence": self.sequence,
            "updated_at": rfc3339(self.updated_at),
            "error": self.error,
            "connected": self.connected,
        }


@dataclass(frozen=True, slots=True)
class EventDraft:
    """An event before the journal gave it a sequence number."""

    type: EventType
    group_id: str
    member_id: str | None
    group_instance_id: str | None
    generation_id: int
    protocol: Protocol
    partitions: tuple[PartitionOffset, ...]
    assignment: tuple[TopicPartition, ...]
    reason: str | None
    time: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    #: W3C trace context (CloudEvents distributed-tracing extension), ``sidecar.tracing``.
    traceparent: str | None = None

    @property
    def source(self) -> str:
        return event_source(self.group_id, self.group_instance_id or self.member_id or "unknown")

    def cloudevent(self, sequence: int) -> dict[str, Any]:
        partitions: list[dict[str, Any]] = [
            p.as_dict() if self.type is EventType.ASSIGNED else p.tp.as_dict()
            for p in self.partitions
        ]
        document: dict[str, Any] = {
            "specversion": "1.0",
            "id": self.id,
            "source": self.source,
            "type": self.type.value,
            "time": rfc3339(self.time),
            "sequence": sequence_text(sequence),
            "datacontenttype": "application/json",
        }
        if self.traceparent is not None:
            document["traceparent"] = self.traceparent
        document["data"] = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "generation_id": self.generation_id,
            "protocol": self.protocol,
            "partitions": partitions,
            "assignment": [tp.as_dict() for tp in self.assignment],
            "reason": self.reason,
        }
        return document


@dataclass(frozen=True, slots=True)
class Event:
    """A journaled event: its sequence, type and the CloudEvent body exactly as delivered."""

    sequence: int
    id: str
    type: EventType
    body: bytes

    @property
    def cloudevent(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(
            TopicPartition(p["topic"], p["partition"])
            for p in self.cloudevent["data"]["partitions"]
        )


def rfc3339(epoch_seconds: float) -> str:
    return (
        datetime.fromtimestamp(epoch_seconds, tz=UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


def encode(document: dict[str, Any]) -> bytes:
    """The one JSON encoding of events: compact, so the signed bytes are the sent bytes."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Subscription:
    """A registered webhook. ``cursor`` is the last sequence acknowledged or given up."""

    id: str
    url: str
    events: tuple[EventType, ...]
    mode: Literal["blocking", "async"]
    secret: str
    timeout_ms: int
    origin: Literal["api", "settings"]
    created_at: float
    cursor: int
    disabled_reason: str | None = None

    @property
    def blocking(self) -> bool:
        return self.mode == "blocking"

    def wants(self, event_type: EventType) -> bool:
        return self.disabled_reason is None and event_type in self.events

    def public(self) -> dict[str, Any]:
        """The listing form: never the secret."""
        return {
            "id": self.id,
            "url": self.url,
            "events": [e.value for e in self.events],
            "mode": self.mode,
            "timeout_ms": self.timeout_ms,
            "origin": self.origin,
            "created_at": rfc3339(self.created_at),
            "cursor": self.cursor,
            "disabled": self.disabled_reason is not None,
            "disabled_reason": self.disabled_reason,
        }


class DeliveryOutcome(enum.StrEnum):
    """What one line of a delivery log says happened (the metric's ``outcome`` label)."""

    DELIVERED = "delivered"  # acknowledged (2xx): the cursor moves past the event
    FAILED = "failed"  # one attempt that did not succeed; retried
    GAVE_UP = "gave_up"  # attempts or age exhausted: the cursor moves on without an ack
    DISABLED = "disabled"  # 410 Gone: the subscription stops
    BARRIER_TIMEOUT = "barrier_timeout"  # the rebalance went on without this ack
    OFFSETS_REJECTED = "offsets_rejected"  # handed-back offsets not committed, and why
    OFFSETS_COMMITTED = "offsets_committed"
    COMMIT_FAILED = "commit_failed"
    # Handed-back offsets sent, not confirmed within the bound: they may still land.
    COMMIT_UNKNOWN = "commit_unknown"

    @property
    def moves_cursor(self) -> bool:
        return self in (DeliveryOutcome.DELIVERED, DeliveryOutcome.GAVE_UP)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One line of a subscription's delivery log."""

    subscription_id: str
    sequence: int
    event_id: str
    outcome: DeliveryOutcome
    attempts: int
    status_code: int | None
    error: str | None
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "event_id": self.event_id,
            "outcome": self.outcome.value,
            "attempts": self.attempts,
            "status_code": self.status_code,
            "error": self.error,
            "at": rfc3339(self.at),
        }
