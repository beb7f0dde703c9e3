"""What the HTTP side may ask of the group member: commands and their failures.

Commands are submitted through the handoff (``Handoff.submit``) and run on the member
thread between ``poll()`` calls; the exceptions travel back through the same future.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.errors import CommitFailed, NotInGroup, NotOwned, StaleGeneration
from sidecar.handoff import Command
from sidecar.model import Assignment, PartitionOffset


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


__all__ = [  # the errors live in sidecar.errors; re-exported for existing imports
    "Commit",
    "CommitFailed",
    "EnforceRebalance",
    "EnforceResult",
    "Leave",
    "NotInGroup",
    "NotOwned",
    "StaleGeneration",
]
