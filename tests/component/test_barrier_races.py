"""Races between the member thread's revoke barrier and the loop (found in review).

A real broker cannot place an answer or a command at a chosen instant inside a barrier,
so these drive the real ``Handoff``, ``Barriers`` and ``GroupMember`` with a scripted
consumer (the seam the member offers for failure paths) and a loop-side stand-in.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecar.barrier import Barriers
from sidecar.commands import EnforceRebalance, Leave
from sidecar.errors import MemberBusy
from sidecar.handoff import BarrierDone, BarrierOutcome, Handoff
from sidecar.journal import Journal
from sidecar.member import GroupMember
from sidecar.metrics import Metrics, StateSources
from sidecar.model import (
    Event,
    EventType,
    MemberState,
    PartitionOffset,
)
from sidecar.retry import RetryPolicy
from sidecar.settings import Settings
from sidecar.testkit.events import draft
from tests.support.scripted import ScriptedConsumer as _ScriptedConsumer
from tests.support.scripted import initial


class _SlowApp:
    """A blocking subscriber that acknowledges every barrier after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def on_event(self, event: Event) -> None: ...

    def open_barrier(self, event: Event, done: BarrierDone) -> None:
        asyncio.get_running_loop().call_later(
            self.delay, done, BarrierOutcome(acknowledged=("app",))
        )

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        return BarrierOutcome(timed_out=True)


def test_a_command_sent_during_a_barrier_is_withdrawn_at_its_deadline_never_run(
    tmp_path: Path,
) -> None:
    """An enforce that arrives while a revoke barrier holds the thread answers MemberBusy at
    its deadline (503) and is never carried out afterwards."""
    consumers: list[_ScriptedConsumer] = []

    def consumer(config: dict[str, Any]) -> Any:
        consumers.append(_ScriptedConsumer(config))
        return consumers[-1]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop, initial())
        handoff.attach(_SlowApp(delay=1.5))
        settings = Settings(
            bootstrap_servers="127.0.0.1:9",
            group_id="g",
            topics=("t",),
            data_dir=tmp_path,
            revoke_timeout_ms=10_000,
        )
        member = GroupMember(
            settings,
            handoff,
            Metrics(CollectorRegistry()),
            StateSources(lambda: 0),
            consumer_factory=consumer,
            journal_factory=lambda d: Journal(d, durable=False),
        )
        member.start()
        assert await handoff.wait_until(lambda a: a.state is MemberState.STABLE, 5)
        leaving = loop.create_task(handoff.submit(Leave("drain"), timeout=10))
        await asyncio.sleep(0.3)  # the Leave is inside close() -> on_revoke -> the barrier
        with pytest.raises(MemberBusy):
            await handoff.submit(EnforceRebalance("late"), timeout=0.3)
        await asyncio.wait_for(leaving, 10)
        await asyncio.to_thread(member.join, 5)
        assert not member.alive
        assert consumers[0].unsubscribed == 0, "the withdrawn enforce ran after all"

    asyncio.run(main())


def test_an_answer_settled_while_the_expiry_is_in_flight_keeps_its_offsets() -> None:
    """The app's 200 with offsets is settled on a busy loop just after the member thread's
    last wait ended and just before the expiry callback runs: the offsets must survive."""
    offsets = (PartitionOffset("t", 0, 42),)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop, initial())
        barriers = Barriers()

        class LateApp:
            def on_event(self, event: Event) -> None: ...

            def open_barrier(self, event: Event, done: BarrierDone) -> None:
                barriers.open(event, ["app"], done)

                def busy_then_answer() -> None:
                    time.sleep(0.3)  # the loop is busy across the thread's deadline
                    barriers.settle("app", event, True, offsets)

                loop.call_later(0.15, busy_then_answer)

            def barrier_expired(self, event: Event) -> BarrierOutcome:  # as the dispatcher
                return barriers.expire(event) or BarrierOutcome(timed_out=True)

        handoff.attach(LateApp())
        outcome = await asyncio.to_thread(handoff.await_barrier, _revoked_event(), 0.2)
        assert outcome.offsets == offsets, outcome
        assert not outcome.timed_out

    asyncio.run(main())


def test_an_answer_after_the_member_stopped_waiting_is_refused_not_lost() -> None:
    """The loop is busy past the member thread's deadline *and* its 2 s wait for the
    expiry; then the app's 200 with offsets settles the barrier. Nobody waits for that
    outcome any more: the offsets were dropped without a word (the delivery recorded as
    delivered, nothing committed). Now the settle says not taken, and the courier records
    the offsets as rejected (``offsets_rejected``), as for any late answer."""
    offsets = (PartitionOffset("t", 0, 42),)
    taken: list[bool] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop, initial())
        barriers = Barriers()

        class BusyApp:
            def on_event(self, event: Event) -> None: ...

            def open_barrier(self, event: Event, done: BarrierDone) -> None:
                barriers.open(event, ["app"], done)

                def busy_then_answer() -> None:
                    time.sleep(2.6)  # past the deadline and the thread's wait for expiry
                    taken.append(barriers.settle("app", event, True, offsets))

                loop.call_later(0.05, busy_then_answer)

            def barrier_expired(self, event: Event) -> BarrierOutcome:
                return barriers.expire(event) or BarrierOutcome(timed_out=True)

        handoff.attach(BusyApp())
        outcome = await asyncio.to_thread(handoff.await_barrier, _revoked_event(), 0.2)
        assert outcome.timed_out and outcome.offsets == (), outcome
        await asyncio.sleep(0.1)  # the loop ran the answer (and the expiry after it)
        assert taken == [False], "the answer's offsets were taken by a barrier nobody awaits"

    asyncio.run(main())


def _revoked_event() -> Event:
    journal = Journal(Path(tempfile.mkdtemp()), durable=False)
    try:
        return journal.append(draft(EventType.REVOKED))
    finally:
        journal.close()


def test_backoff_survives_a_thousand_attempts() -> None:
    policy = RetryPolicy(initial=0.5, maximum=30.0, max_attempts=0, max_age=86_400.0)
    assert 0 <= policy.delay(1100, None) <= 30.0
