"""The subscriber kit against a real sidecar on the real broker: commits, fencing, watchdog."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.subscriber import (
    Assigned,
    EventInfo,
    Fenced,
    Offset,
    Partition,
    SidecarClient,
    Subscriber,
    Watchdog,
)
from tests.support.kafka import committed
from tests.support.sidecars import Sidecar, wait_until

pytestmark = pytest.mark.kafka

SECRET = "whsec_" + "a2l0LXRlc3Qtc2VjcmV0LTEyMzQ1Njc4OTA="


class Lost:
    def __init__(self) -> None:
        self.lost: list[Partition] = []
        self.assigned: list[Assigned] = []
        self.changed = threading.Event()

    def on_assigned(self, partitions: list[Assigned], info: EventInfo) -> None:
        self.assigned.extend(partitions)

    def on_revoked(self, partitions: list[Partition], info: EventInfo) -> None:
        return None

    def on_lost(self, partitions: list[Partition], info: EventInfo) -> None:
        self.lost.extend(partitions)
        self.changed.set()


def test_commit_is_fenced_to_what_the_member_owns(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    topic = topic_factory(2)
    sidecar = sidecar_factory(group_id, topic)
    state = sidecar.wait_stable()
    client = SidecarClient(f"http://127.0.0.1:{sidecar.port}")
    client.commit([Offset(topic, 0, 0), Offset(topic, 1, 0)], generation_id=state["generation_id"])
    assert committed(kafka_bootstrap, group_id, topic, 2) == {0: 0, 1: 0}
    with pytest.raises(Fenced) as refused:
        client.commit([Offset(topic + "-other", 0, 5)], generation_id=state["generation_id"])
    assert refused.value.detail.get("not_owned")


def test_the_watchdog_drops_the_partitions_when_the_sidecar_dies(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    tmp_path: Path,
) -> None:
    topic = topic_factory(2)
    sidecar = sidecar_factory(group_id, topic)
    sidecar.wait_stable()
    listener = Lost()
    subscriber = Subscriber(SECRET, listener)
    watchdog = Watchdog(subscriber, SidecarClient(f"http://127.0.0.1:{sidecar.port}")).start()
    try:
        # Started after the sidecar: the kit learns the assignment from GET /assignment.
        wait_until(lambda: len(listener.assigned) == 2, 30, "re-synced")
        assert {a.status for a in listener.assigned} == {"unknown"}
        sidecar.kill()
        assert listener.changed.wait(30)
        assert sorted(listener.lost) == [Partition(topic, 0), Partition(topic, 1)]
        assert subscriber.assignment == frozenset()
    finally:
        watchdog.stop()
