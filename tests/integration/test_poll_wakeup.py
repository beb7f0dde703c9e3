"""Commands wake the member thread out of ``poll()`` (sidecar.kafka.wakeup) on a real broker:
librdkafka's own poll ends when woken, the member polls on the long timeout only when it
can be woken, every command wakes it, and no wake-up reaches a consumer that closes."""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry

from sidecar import member as member_module
from sidecar.commands import Commit, Leave
from sidecar.handoff import Handoff
from sidecar.kafka import wakeup
from sidecar.member import GroupMember
from sidecar.metrics import Metrics, StateSources
from sidecar.model import Assignment, MemberState, PartitionOffset
from sidecar.settings_sources import load_settings
from tests.support.members import member_settings

pytestmark = pytest.mark.kafka

# Trials of each timed wake-up below; the verdicts use their median, so one stall of a
# loaded machine cannot decide them.
_TRIALS = 15


def _median_poll(consumer: Consumer, waker: wakeup.PollWaker, wake_after: float | None) -> float:
    """Median seconds of ``poll(WOKEN_POLL_SECONDS)`` on this thread, woken from another
    thread ``wake_after`` seconds in (None: woken before the poll starts)."""
    took = []
    for _ in range(_TRIALS):
        timer = threading.Timer(wake_after, waker.wake) if wake_after is not None else None
        if timer is None:
            waker.wake()
        else:
            timer.start()
        started = time.monotonic()
        consumer.poll(member_module.WOKEN_POLL_SECONDS)
        took.append(time.monotonic() - started)
        if timer is not None:
            timer.join()
            consumer.poll(0)  # a wake-up that came after the poll ended would end the next
    return statistics.median(took)


def test_a_wake_up_ends_the_consumers_poll(kafka_bootstrap: str, group_id: str) -> None:
    """The call the member relies on, through confluent-kafka's own ``poll()`` with the
    member's idle timeout: woken 20 ms in, a poll ends long before its 190 ms (the
    median of 15); a wake-up sent while nobody polls ends the next poll. After the
    waker's ``close()`` its consumer can close and be freed, and a late ``wake()``
    touches nothing."""
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
    waker = wakeup.poll_waker(consumer)
    assert isinstance(waker, wakeup.QueueYield), "this consumer cannot be woken"
    try:
        consumer.subscribe([f"{group_id}-absent"])
        assert _median_poll(consumer, waker, 0.02) < 0.1
        assert _median_poll(consumer, waker, None) < 0.1
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
        self.timeouts.add(round(timeout, 6))
        return super().poll(timeout)

    def close(self) -> None:
        self.waker_closed_at_close = all(w.closed for w in PollsWatched.wakers)
        super().close()


def _member_run(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, commands: int
) -> tuple[PollsWatched, list[Any], int]:
    """A member stable in the group answers ``commands`` commits, one after the other,
    then leaves. Returns its consumer, how long each commit took to be answered, and how
    many wakers were made."""
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
                # At a random moment of the member's poll, as an application's would be.
                await asyncio.sleep(random.uniform(0, 0.2))
                commit = Commit((PartitionOffset(first.topic, first.partition, offset),))
                started = time.monotonic()
                await handoff.submit(commit, timeout=30)
                answers.append(time.monotonic() - started)
            return answers
        finally:
            await handoff.submit(Leave("test over"), timeout=60)
            assert await asyncio.to_thread(member.join, 60), "the member kept running"

    answers = asyncio.run(main())
    [consumer] = consumers
    return consumer, answers, len(made)


@pytest.mark.parametrize(
    ("settings", "longest", "wakers"),
    [
        pytest.param({}, member_module.WOKEN_POLL_SECONDS, 1, id="woken"),
        pytest.param(
            {"SIDECAR_POLL_WAKEUP": "false", "SIDECAR_POLL_TIMEOUT_MS": "30"}, 0.03, 0, id="off"
        ),
    ],
)
def test_a_member_polls_long_only_when_it_can_be_woken_and_answers_every_command(
    settings: dict[str, str],
    longest: float,
    wakers: int,
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Default settings: the member's consumer is woken for commands, so it polls with
    the long timeout at most (never the 20 ms of plain polling), answers each commit sent
    at a random moment of its poll well within that timeout (median of 15: the commit's
    broker round trip, not a wait for the poll), and its waker is closed before the
    consumer closes. With wake-ups off it polls with ``SIDECAR_POLL_TIMEOUT_MS`` and
    answers the same."""
    env = member_settings(kafka_bootstrap, group_id, topic_factory(2), tmp_path) | settings
    consumer, took, made = _member_run(env, monkeypatch, commands=_TRIALS)
    assert made == wakers
    assert max(consumer.timeouts) == longest  # shorter ones: a timer of the loop was due
    # Never a fraction of a millisecond, which confluent-kafka rounds down to a poll of 0
    # ms: the loop would spin until its timer is due.
    assert not [t for t in consumer.timeouts if 0 < t < 0.001]
    assert len(took) == _TRIALS
    if wakers:
        assert statistics.median(took) < 0.06
    assert consumer.waker_closed_at_close is True
