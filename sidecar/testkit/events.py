"""Event drafts to journal in tests and benchmarks: what a member's callback would draft,
with every field the caller does not care about given a plain value."""

from __future__ import annotations

import time as _time
from collections.abc import Iterable

from sidecar.model import EventDraft, EventType, PartitionOffset, TopicPartition


def draft(
    kind: EventType = EventType.ASSIGNED,
    partitions: Iterable[PartitionOffset] = (PartitionOffset("t", 0, None),),
    *,
    assignment: Iterable[TopicPartition] = (),
    group_id: str = "g",
    member_id: str = "m-1",
    group_instance_id: str | None = None,
    generation_id: int = 1,
    reason: str | None = None,
    time: float | None = None,
) -> EventDraft:
    """A draft of ``kind`` for ``partitions`` (eager protocol), journaled ``time`` (now)."""
    return EventDraft(
        type=kind,
        group_id=group_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        generation_id=generation_id,
        protocol="eager",
        partitions=tuple(partitions),
        assignment=tuple(assignment),
        reason=reason,
        time=_time.time() if time is None else time,
    )
