"""Stand-ins for the member thread's seams: a scripted consumer and the first assignment."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sidecar.model import Assignment, MemberState


def initial() -> Assignment:
    return Assignment(
        group_id="g",
        member_id=None,
        group_instance_id=None,
        generation_id=-1,
        protocol="eager",
        state=MemberState.STARTING,
        partitions=(),
        sequence=0,
    )


class Partition:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition, self.offset, self.error = topic, partition, -1001, None


class ScriptedConsumer:
    """Assigns t[0] at the first poll; ``close()`` runs the revoke callback, as librdkafka
    does; counts the rejoins an enforce would make."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.assigned = False
        self.unsubscribed = 0

    def subscribe(self, topics: list[str], **callbacks: Callable[..., None]) -> None:
        self.callbacks = callbacks

    def poll(self, timeout: float) -> None:
        if not self.assigned:
            self.assigned = True
            self.callbacks["on_assign"](self, [Partition("t", 0)])
        time.sleep(min(timeout, 0.02))

    def assign(self, partitions: list[Partition]) -> None: ...

    def pause(self, partitions: list[Partition]) -> None: ...

    def committed(self, partitions: list[Partition], timeout: float) -> list[Partition]:
        return partitions

    def memberid(self) -> str:
        return "m-1"

    def consumer_group_metadata(self) -> bytes:
        return b"CGMDv2:\x01\x00\x00\x00g\x00m-1\x00\x01"

    def list_topics(self, timeout: float) -> None: ...

    def unsubscribe(self) -> None:
        self.unsubscribed += 1

    def close(self) -> None:
        self.callbacks["on_revoke"](self, [Partition("t", 0)])
