"""Commands wake the member thread out of ``poll()`` (sidecar.wakeup) on a real broker:
librdkafka's own poll ends when woken, the member polls on the long timeout only when it
can be woken, every command wakes it, and no wake-up reaches a consumer that closes."""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry

from sidecar import member as member_module
from sidecar import wakeup
from sidecar.commands import Commit, Leave
from sidecar.handoff import Handoff
from sidecar.member import GroupMember
from sidecar.metrics import Metrics, StateSources
from sidecar.model import Assignment, MemberState, PartitionOffset
from sidecar.settings_sources import load_settings
from tests.support.members import member_settings

pytestmark = pytest.mark.kafka

# Far longer than any wait below: a poll that ends before it was woken.
_LONG_POLL_MS = 120_000


def _consumer_poll(consumer: Consumer, timeout_ms: int) -> threading.Thread:
    """librdkafka's ``rd_kafka_consumer_poll()`` on ``consumer``, blocked in a thread
    (through ctypes: confluent-kafka's own poll() cuts waits past 200 ms into chunks and
    polls on after a wake-up ends one, so the member never polls that long)."""
    library = wakeup._librdkafka()
    assert library is not None, "the loaded librdkafka was not found"
    library.rd_kafka_consumer_poll.argtypes = [ctypes.c_void_p, ctypes.c_int]
    library.rd_kafka_consumer_poll.restype = ctypes.c_void_p
    rk = ctypes.c_void_p.from_address(id(consumer) + wakeup._RK_OFFSET).value
    thread = threading.Thread(target=library.rd_kafka_consumer_poll, args=(rk, timeout_ms))
    thread.start()
    return thread


def test_a_wake_up_ends_librdkafkas_blocked_consumer_poll(
    kafka_bootstrap: str, group_id: str
) -> None:
    """The call the member relies on: a poll blocked for two minutes returns when woken
    from another thread, and a wake-up sent while nobody polls ends the next poll at
    once. After ``close()`` of the waker, its consumer can close and be freed, and a late
    ``wake()`` touches nothing. (Not subscribed: no Python callback can run in the ctypes
    poll.)"""
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
    waker = wakeup.poll_waker(consumer)
    assert isinstance(waker, wakeup.QueueYield), "this consumer cannot be woken"
    try:
        polling = _consumer_poll(consumer, _LONG_POLL_MS)
        polling.join(0.5)
        assert polling.is_alive(), "the poll returned before it was woken"
        waker.wake()
        polling.join(60)
        assert not polling.is_alive(), "the wake-up did not end the poll"

        waker.wake()  # nobody polls: the next poll sees it
        polling = _consumer_poll(consumer, _LONG_POLL_MS)
        polling.join(60)
        assert not polling.is_alive(), "a wake-up sent between polls was lost"
    finally:
        waker.close()
    assert waker.closed
    consumer.close()
    del consumer
    waker.wake()  # the consumer is gone: a no-op, not a use after free


class PollsWatched(Consumer):
    """Records each poll's timeout, and whether the member's waker was closed (no
    wake-up can reach librdkafka any more) when ``close()`` began."""

    wakers: list[wakeup.QueueYield] = []

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.timeouts: set[float] = set()
        self.waker_closed_at_close: bool | None = None

    def poll(self, timeout: float = -1) -> Any:
        self.timeouts.add(timeout)
        return super().poll(timeout)

    def close(self) -> None:
        self.waker_closed_at_close = all(w.closed for w in PollsWatched.wakers)
        super().close()


def _member_run(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, commands: int
) -> tuple[PollsWatched, list[Any], int]:
    """A member stable in the group answers ``commands`` commits, one after the other,
    then leaves. Returns its consumer, the answers, and how many wakers were made."""
    made: list[wakeup.QueueYield] = []
    PollsWatched.wakers = made

    def spied(consumer: Any) -> wakeup.PollWaker | None:
        waker = wakeup.poll_waker(consumer)
        if isinstance(waker, wakeup.QueueYield):
            made.append(waker)
        return waker

    monkeypatch.setattr(member_module, "poll_waker", spied)
    consumers: list[PollsWatched] = []

    def factory(config: dict[str, Any]) -> PollsWatched:
        consumers.append(PollsWatched(config))
        return consumers[-1]

    async def main() -> list[Any]:
        handoff = Handoff(
            asyncio.get_running_loop(),
            Assignment("g", None, None, -1, "eager", MemberState.STARTING, (), 0),
        )
        settings = load_settings(env)
        member = GroupMember(
            settings,
            handoff,
            Metrics(CollectorRegistry()),
            StateSources(pending_events=lambda: 0),
            consumer_factory=factory,
            fail_stop=lambda reason: None,
        )
        member.start()
        try:
            stable = await handoff.wait_until(lambda a: a.state is MemberState.STABLE, 60)
            assert stable is not None and stable.partitions, "the member never owned anything"
            [first, *_] = stable.partitions
            answers = []
            for offset in range(1, commands + 1):
                commit = Commit((PartitionOffset(first.topic, first.partition, offset),))
                answers.append(await handoff.submit(commit, timeout=30))
            return answers
        finally:
            await handoff.submit(Leave("test over"), timeout=60)
            assert await asyncio.to_thread(member.join, 60), "the member kept running"

    answers = asyncio.run(main())
    [consumer] = consumers
    return consumer, answers, len(made)


@pytest.mark.parametrize(
    ("settings", "timeouts", "wakers"),
    [
        pytest.param({}, {member_module.WOKEN_POLL_SECONDS}, 1, id="woken"),
        pytest.param(
            {"SIDECAR_POLL_WAKEUP": "false", "SIDECAR_POLL_TIMEOUT_MS": "30"}, {0.03}, 0, id="off"
        ),
    ],
)
def test_a_member_polls_long_only_when_it_can_be_woken_and_answers_every_command(
    settings: dict[str, str],
    timeouts: set[float],
    wakers: int,
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Default settings: the member's consumer is woken for commands, so it polls with
    the long timeout only (never the 20 ms of plain polling), answers each commit, and its
    waker is closed before the consumer closes. With wake-ups off it polls with
    ``SIDECAR_POLL_TIMEOUT_MS`` and answers the same."""
    env = member_settings(kafka_bootstrap, group_id, topic_factory(2), tmp_path) | settings
    consumer, answers, made = _member_run(env, monkeypatch, commands=5)
    assert made == wakers
    assert consumer.timeouts == timeouts
    assert len(answers) == 5
    assert consumer.waker_closed_at_close is True
