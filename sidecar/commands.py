"""What the HTTP side may ask of the group member: commands and their failures.

Commands are submitted through the handoff (``Handoff.submit``) and run on the member
thread between ``poll()`` calls; the exceptions travel back through the same future.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.handoff import Command
from sidecar.model import Assignment, PartitionOffset, TopicPartition


class NotInGroup(RuntimeError):
    """The member is not (or no longer) in the group: nothing to enforce or commit as."""


class NotOwned(RuntimeError):
    def __init__(self, foreign: list[TopicPartition]) -> None:
        self.foreign = foreign
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in foreign)
        super().__init__(f"this member does not own {names}")


class CommitFailed(RuntimeError):
    pass


class StaleGeneration(RuntimeError):
    """``/commit`` named a generation the member has moved on from (Kafka's own fencing)."""

    def __init__(self, requested: int, current: int) -> None:
        self.requested = requested
        self.current = current
        super().__init__(f"generation {requested} is stale: the member is at {current}")


@dataclass(frozen=True)
class EnforceResult:
    generation_id: int
    started: bool  # False: joined a rebalance already under way


@dataclass(frozen=True)
class EnforceRebalance(Command[EnforceResult]):
    reason: str


@dataclass(frozen=True)
class Commit(Command[tuple[PartitionOffset, ...]]):
    offsets: tuple[PartitionOffset, ...]
    generation_id: int | None = None  # fencing: refuse when the member moved on


@dataclass(frozen=True)
class Leave(Command[Assignment]):
    """Close the consumer: revoke (through the barrier), leave the group, stop the thread."""

    reason: str
