"""The kit's values: event types, partitions, offsets, the :class:`Listener` protocol, parsing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

ASSIGNED = "kafka.partitions.assigned"
REVOKED = "kafka.partitions.revoked"
LOST = "kafka.partitions.lost"

OffsetStatus = Literal["committed", "none", "unknown"]


@dataclass(frozen=True, order=True, slots=True)
class Partition:
    topic: str
    partition: int


@dataclass(frozen=True, order=True, slots=True)
class Assigned:
    """A partition handed to this member, with where to start reading it."""

    topic: str
    partition: int
    offset: int | None  # the group's committed offset (None: none, or not known)
    status: OffsetStatus  # "unknown": do not start from a default; read it yourself or wait

    @property
    def tp(self) -> Partition:
        return Partition(self.topic, self.partition)


@dataclass(frozen=True, order=True, slots=True)
class Offset:
    """The next offset to read: one past the last record whose effects are safe."""

    topic: str
    partition: int
    offset: int

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class EventInfo:
    """What an application may want to know about the event it is handling."""

    id: str
    type: str
    sequence: int | None
    generation_id: int
    member_id: str | None
    reason: str | None
    synthesized: bool = False  # made by the kit (sidecar unreachable, re-sync), not the sidecar


class Listener(Protocol):
    """The application's rebalance listener (``ConsumerRebalanceListener`` over HTTP).

    The calls come one at a time, in the sidecar's order, on a webhook request thread.
    ``on_revoked`` should stop processing the partitions, flush their state and return the
    offsets to commit (the sidecar commits them as the member that still owns them, before any
    other member is told ``assigned``).
    """

    def on_assigned(self, partitions: list[Assigned], info: EventInfo) -> None: ...

    def on_revoked(
        self, partitions: list[Partition], info: EventInfo
    ) -> Iterable[Offset] | None: ...

    def on_lost(self, partitions: list[Partition], info: EventInfo) -> None: ...


# -- parsing --------------------------------------------------------------------------------------


def parse_partitions(items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        return []
    return [p for p in items if isinstance(p, dict) and "topic" in p and "partition" in p]


def parse_assigned(item: Mapping[str, Any]) -> Assigned:
    offset = item.get("offset")
    offset = int(offset) if offset is not None else None
    raw = item.get("offset_status")
    status: OffsetStatus
    if raw == "unknown":
        status = "unknown"
    elif raw == "none":
        status = "none"
    else:
        status = "committed" if offset is not None else "none"
    if status != "committed":
        offset = None
    return Assigned(str(item["topic"]), int(item["partition"]), offset, status)
