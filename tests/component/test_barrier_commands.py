"""Commands a subscriber sends from inside its own revoke barrier (found in review).

A revoke handler that calls ``POST /enforce-rebalance`` and waits for the answer used to
deadlock with the barrier: the member thread served only commits while it waited, so
the enforce was answered (``coalesced``) only after the revoke timeout, and the barrier
timed out. Java allows ``enforceRebalance()`` inside ``onPartitionsRevoked``.

As in ``test_barrier_races``, the real ``GroupMember``, ``Handoff`` and ``Journal`` run
with a scripted consumer (a real broker cannot hold a handler inside a barrier at will)
and a loop-side stand-in for the dispatcher whose handler submits its command through
the handoff exactly as the HTTP route does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecar.commands import EnforceRebalance, EnforceResult, Leave
from sidecar.errors import MemberGone
from sidecar.handoff import BarrierDone, BarrierOutcome, Command, Handoff
from sidecar.journal import Journal
from sidecar.member import GroupMember
from sidecar.metrics import Metrics, StateSources
from sidecar.model import Event, EventType, MemberState
from sidecar.settings import Settings
from tests.support.scripted import Partition as _Partition
from tests.support.scripted import ScriptedConsumer as _ScriptedConsumer
from tests.support.scripted import initial

_REVOKE_TIMEOUT_S = 3.0


class _RebalancingConsumer(_ScriptedConsumer):
    """Takes t[0] away (``on_revoke`` or ``on_lost``) at the poll after ``take`` is set,
    then assigns it again at the next one, as a rebalance does."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.take: str | None = None
        self.closed = False

    def poll(self, timeout: float) -> None:
        take, self.take = self.take, None
        if take is None:
            super().poll(timeout)
            return
        self.callbacks[take](self, [_Partition("t", 0)])
        self.assigned = False  # the next poll assigns again

    def close(self) -> None:
        self.closed = True
        super().close()


class _HandlerThatCalls:
    """A blocking subscriber whose revoke (or lost) handler sends ``command`` to the
    sidecar, waits for the answer, then acknowledges: what an application that calls
    ``POST /enforce-rebalance`` from its handler does."""

    def __init__(self, handoff: Handoff, command: Command[Any]) -> None:
        self._handoff = handoff
        self._command = command
        self.answers: list[tuple[EventType, object, float]] = []
        self.expired: list[int] = []
        self.tasks: list[asyncio.Task[None]] = []

    def on_event(self, event: Event) -> None: ...

    def open_barrier(self, event: Event, done: BarrierDone) -> None:
        if not self.tasks:  # the first revoke only: later ones are acknowledged at once
            self.tasks.append(asyncio.get_running_loop().create_task(self._handle(event, done)))
        else:
            done(BarrierOutcome(acknowledged=("app",)))

    async def _handle(self, event: Event, done: BarrierDone) -> None:
        started = time.monotonic()
        answer: object
        try:
            answer = await self._handoff.submit(self._command, timeout=10.0)
        except Exception as exc:  # the answer, whatever it is, is what the test looks at
            answer = exc
        self.answers.append((event.type, answer, time.monotonic() - started))
        done(BarrierOutcome(acknowledged=("app",)))

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        self.expired.append(event.sequence)
        return BarrierOutcome(waiting=("app",), timed_out=True)


def _member(
    tmp_path: Path, handoff: Handoff, consumers: list[_RebalancingConsumer]
) -> tuple[GroupMember, Metrics]:
    def consumer(config: dict[str, Any]) -> Any:
        consumers.append(_RebalancingConsumer(config))
        return consumers[-1]

    settings = Settings(
        bootstrap_servers="127.0.0.1:9",
        group_id="g",
        topics=("t",),
        data_dir=tmp_path,
        revoke_timeout_ms=int(_REVOKE_TIMEOUT_S * 1000),
    )
    metrics = Metrics(CollectorRegistry())
    member = GroupMember(
        settings,
        handoff,
        metrics,
        StateSources(lambda: 0),
        consumer_factory=consumer,
        journal_factory=lambda d: Journal(d, durable=False),
    )
    return member, metrics


@pytest.mark.parametrize("callback", ["on_revoke", "on_lost"])
def test_an_enforce_from_inside_a_revoke_handler_is_answered_coalesced_at_once(
    tmp_path: Path, callback: str
) -> None:
    """The handler's enforce joins the rebalance under way and is answered while the
    barrier waits (not after the revoke timeout); the barrier closes on the handler's
    acknowledgement, and nothing is asked of the consumer inside its callback."""
    consumers: list[_RebalancingConsumer] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop, initial())
        app = _HandlerThatCalls(handoff, EnforceRebalance("asked from the revoke handler"))
        handoff.attach(app)
        member, metrics = _member(tmp_path, handoff, consumers)
        member.start()
        try:
            assert await handoff.wait_until(lambda a: a.state is MemberState.STABLE, 5)
            consumers[0].take = callback
            taken = EventType.REVOKED if callback == "on_revoke" else EventType.LOST
            for _ in range(int(2 * _REVOKE_TIMEOUT_S / 0.05)):
                if app.answers:
                    break
                await asyncio.sleep(0.05)
            assert app.answers, "the handler's enforce was never answered"
            kind, answer, seconds = app.answers[0]
            assert kind is taken
            assert seconds < _REVOKE_TIMEOUT_S / 2, f"answered only after {seconds:.2f} s"
            assert isinstance(answer, EnforceResult), answer
            assert not answer.started, "an enforce inside a barrier must join, not start"
            assert await handoff.wait_until(
                lambda a: a.state is MemberState.STABLE and a.sequence >= 3, 5
            ), "the rebalance did not complete after the barrier"
            assert app.expired == [], "the barrier timed out waiting for the handler"
            assert consumers[0].unsubscribed == 0, "a rejoin was started inside the callback"
            coalesced = metrics.enforced.labels("coalesced")._value.get()
            assert coalesced == 1
        finally:
            await handoff.submit(Leave("test over"), timeout=10)
            await asyncio.to_thread(member.join, 5)

    asyncio.run(main())


def test_a_leave_from_inside_a_revoke_handler_waits_for_the_barrier(tmp_path: Path) -> None:
    """A leave (drain) closes the consumer, which must not happen inside its own
    callback: it stays queued until the barrier is over, then runs."""
    consumers: list[_RebalancingConsumer] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop, initial())
        app = _HandlerThatCalls(handoff, Leave("drained from the revoke handler"))
        handoff.attach(app)
        member, _ = _member(tmp_path, handoff, consumers)
        member.start()
        assert await handoff.wait_until(lambda a: a.state is MemberState.STABLE, 5)
        consumers[0].take = "on_revoke"
        await asyncio.sleep(0.5)
        assert app.tasks, "the revoke never reached the handler"
        assert not app.answers, "the leave was answered inside the barrier"
        assert not consumers[0].closed, "the consumer was closed inside its own callback"
        await asyncio.wait_for(app.tasks[0], 2 * _REVOKE_TIMEOUT_S)
        _, answer, _ = app.answers[0]
        assert not isinstance(answer, Exception), answer
        assert consumers[0].closed
        assert len(app.expired) == 1  # it waited for its own leave: the revoke timeout
        await asyncio.to_thread(member.join, 5)
        assert not member.alive
        # What comes after says the member left on request (it read as a failure).
        with pytest.raises(MemberGone, match="left the group: drained from the revoke handler"):
            await handoff.submit(EnforceRebalance("after the drain"), timeout=1)

    asyncio.run(main())
