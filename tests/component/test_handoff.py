"""The thread boundary: commands run on the member thread, events and barriers reach the loop.

A plain thread stands in for the consumer thread: the point is *which thread* runs what.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from sidecar.handoff import BarrierDone, BarrierOutcome, Command, Handoff, MemberBusy, MemberGone
from sidecar.kafka.wakeup import NO_WAKEUPS
from sidecar.model import Event, EventType, MemberState, PartitionOffset
from tests.support.scripted import initial


@dataclass(frozen=True)
class WhoRunsMe(Command[str]):
    pass


class Side:
    def __init__(self, answer: BarrierOutcome | None) -> None:
        self.answer = answer
        self.events: list[tuple[str, Event]] = []

    def on_event(self, event: Event) -> None:
        self.events.append((threading.current_thread().name, event))

    def open_barrier(self, event: Event, done: BarrierDone) -> None:
        if self.answer is not None:
            asyncio.get_running_loop().call_later(0.05, done, self.answer)

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        return BarrierOutcome(waiting=("slow",), timed_out=True)


def member_thread(handoff: Handoff, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            for pending in handoff.take_commands():
                pending.future.set_result(threading.current_thread().name)
            time.sleep(0.005)
        handoff.close()

    thread = threading.Thread(target=run, name="group-member")
    thread.start()
    return thread


def test_commands_run_on_the_member_thread_and_fail_once_it_stopped() -> None:
    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        stop = threading.Event()
        thread = member_thread(handoff, stop)
        assert await handoff.submit(WhoRunsMe(), timeout=5) == "group-member"
        stop.set()
        await asyncio.to_thread(thread.join, 5)
        with pytest.raises(MemberGone, match="the group member has stopped"):
            await handoff.submit(WhoRunsMe(), timeout=5)
        # The first reason stays: a drain's close after a fail stop does not hide it.
        handoff.close("the member left the group: drain requested")
        with pytest.raises(MemberGone, match="the group member has stopped"):
            await handoff.submit(WhoRunsMe(), timeout=5)

    asyncio.run(main())


@pytest.mark.parametrize("acknowledged", [True, False])
def test_barrier_answers_or_times_out_and_events_arrive_on_the_loop(acknowledged: bool) -> None:
    event = Event(1, "id-1", EventType.REVOKED, b"{}")

    async def main() -> None:
        loop_thread = threading.current_thread().name
        handoff = Handoff(asyncio.get_running_loop(), initial())
        side = Side(BarrierOutcome(acknowledged=("app",)) if acknowledged else None)
        handoff.attach(side)
        outcome = await asyncio.to_thread(handoff.await_barrier, event, 0.5)
        if acknowledged:
            assert outcome.acknowledged == ("app",) and not outcome.timed_out
        else:
            assert outcome.timed_out and outcome.waiting == ("slow",)
        assert side.events == [(loop_thread, event)]

    asyncio.run(main())


def test_long_poll_wakes_on_a_published_snapshot() -> None:
    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        waiter = asyncio.create_task(handoff.wait_for_change(0, 10))
        await asyncio.sleep(0.05)
        changed = replace(initial(), sequence=1, state=MemberState.STABLE)
        await asyncio.to_thread(handoff.publish, changed)
        assert (await asyncio.wait_for(waiter, 5)).sequence == 1
        assert (await handoff.wait_for_change(1, 0.05)).sequence == 1  # times out, answers

    asyncio.run(main())


@pytest.mark.parametrize("kind", [EventType.ASSIGNED, EventType.REVOKED])
def test_an_event_and_its_snapshot_cross_to_the_loop_in_one_call(kind: EventType) -> None:
    """Each crossing wakes the loop, which then holds the GIL the member thread needs for
    what comes next: an event journaled with its snapshot crosses once, and the
    snapshot's long-poll waiters still wake."""
    event = Event(1, "id-1", kind, b"{}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        crossings: list[str] = []
        schedule = loop.call_soon_threadsafe

        def counted(callback: Callable[..., object], *args: object) -> asyncio.Handle:
            if getattr(callback, "__self__", None) is handoff:  # not asyncio.to_thread's
                crossings.append(callback.__name__)
            return schedule(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        handoff = Handoff(loop, initial())
        side = Side(BarrierOutcome(acknowledged=("app",)))
        handoff.attach(side)
        waiter = asyncio.create_task(handoff.wait_for_change(0, 10))
        await asyncio.sleep(0.05)

        def member() -> None:
            handoff.publish(replace(initial(), sequence=1), announcing=True)
            if kind is EventType.REVOKED:
                handoff.await_barrier(event, 2.0)
            else:
                handoff.announce(event)

        await asyncio.to_thread(member)
        assert (await asyncio.wait_for(waiter, 5)).sequence == 1
        assert [e for _, e in side.events] == [event]
        assert len(crossings) == 1, crossings

    asyncio.run(main())


def test_a_failing_barrier_still_announces_the_event_and_wakes_the_waiters() -> None:
    """Opening the barrier, announcing and waking share one loop callback now: a step
    that raises must not swallow the ones after it."""
    event = Event(1, "id-1", EventType.REVOKED, b"{}")

    class Broken(Side):
        def open_barrier(self, event: Event, done: BarrierDone) -> None:
            raise RuntimeError("broken barrier")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, _context: None)  # the raise is expected
        handoff = Handoff(loop, initial())
        side = Broken(None)
        handoff.attach(side)
        waiter = asyncio.create_task(handoff.wait_for_change(0, 10))
        await asyncio.sleep(0.05)

        def member() -> BarrierOutcome:
            handoff.publish(replace(initial(), sequence=1), announcing=True)
            return handoff.await_barrier(event, 0.2)

        outcome = await asyncio.to_thread(member)
        assert outcome.timed_out
        assert [e for _, e in side.events] == [event]
        assert (await asyncio.wait_for(waiter, 5)).sequence == 1

    asyncio.run(main())


def test_thread_side_never_raises_once_the_loop_is_gone() -> None:
    loop = asyncio.new_event_loop()
    handoff = Handoff(loop, initial())
    handoff.attach(Side(None))
    loop.close()
    handoff.publish(initial())
    handoff.announce(Event(1, "x", EventType.ASSIGNED, b"{}"))
    assert handoff.await_barrier(Event(2, "y", EventType.REVOKED, b"{}"), 1.0) == BarrierOutcome()


class FastSide(Side):
    """A subscriber that answers the moment it is told of the event, handing offsets back."""

    def __init__(self) -> None:
        super().__init__(None)
        self.open: BarrierDone | None = None
        self.answers_without_a_barrier = 0

    def open_barrier(self, event: Event, done: BarrierDone) -> None:
        self.open = done

    def on_event(self, event: Event) -> None:
        super().on_event(event)
        if self.open is None:
            self.answers_without_a_barrier += 1  # the answer would be excluded, offsets lost
            return
        self.open(BarrierOutcome(acknowledged=("app",), offsets=(PartitionOffset("t", 0, 9),)))


def test_the_barrier_opens_before_the_event_is_announced() -> None:
    event = Event(1, "id-1", EventType.REVOKED, b"{}")

    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        side = FastSide()
        handoff.attach(side)
        outcome = await asyncio.to_thread(handoff.await_barrier, event, 2.0)
        assert side.answers_without_a_barrier == 0
        assert outcome.offsets == (PartitionOffset("t", 0, 9),)
        assert not outcome.timed_out

    asyncio.run(main())


def test_the_waiting_thread_serves_commands_and_the_barrier_waits_for_their_answer() -> None:
    """A revoke handler that commits first and answers after: the commit must run while
    the member thread waits on the barrier, on that thread."""
    event = Event(1, "id-1", EventType.REVOKED, b"{}")

    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        side = FastSide()
        side.on_event = Side.on_event.__get__(side)  # type: ignore[method-assign]
        handoff.attach(side)

        def serve() -> None:
            for pending in handoff.take_commands():
                pending.future.set_result(threading.current_thread().name)

        def member() -> BarrierOutcome:
            return handoff.await_barrier(event, 5.0, serve=serve)

        waiting = asyncio.create_task(asyncio.to_thread(member))
        while side.open is None:
            if waiting.done():
                waiting.result()  # the barrier ended before it opened: show why
            await asyncio.sleep(0.01)
        ran_on = await handoff.submit(WhoRunsMe(), timeout=2)
        side.open(BarrierOutcome(acknowledged=("app",)))
        outcome = await waiting
        assert ran_on != threading.current_thread().name
        assert not outcome.timed_out and outcome.acknowledged == ("app",)

    asyncio.run(main())


def test_a_command_not_taken_in_time_is_withdrawn_and_never_runs() -> None:
    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        with pytest.raises(MemberBusy):
            await handoff.submit(WhoRunsMe(), timeout=0.05)  # nobody takes commands
        # The member thread comes back: the withdrawn command is not handed to it.
        taken = await asyncio.to_thread(handoff.take_commands)
        assert taken == []

    asyncio.run(main())


def test_a_command_taken_but_unfinished_at_the_deadline_times_out_and_runs_on() -> None:
    """Not MemberBusy: it was taken, so it runs to the end (a drain still leaving)."""

    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        took, release, finished = threading.Event(), threading.Event(), threading.Event()

        def slow_member() -> None:
            while not (taken := handoff.take_commands()):
                time.sleep(0.005)
            took.set()
            release.wait(10)
            taken[0].future.set_result("ran")
            finished.set()

        thread = threading.Thread(target=slow_member)
        thread.start()
        submitted = asyncio.create_task(handoff.submit(WhoRunsMe(), timeout=1.0))
        assert await asyncio.to_thread(took.wait, 10)
        with pytest.raises(TimeoutError) as raised:
            await submitted
        assert not isinstance(raised.value, MemberBusy)
        release.set()
        assert await asyncio.to_thread(finished.wait, 10)
        await asyncio.to_thread(thread.join, 5)

    asyncio.run(main())


class Woken:
    def __init__(self, name: str, woken: list[str]) -> None:
        self.name, self.woken = name, woken

    def wake(self) -> None:
        self.woken.append(self.name)

    def close(self) -> None:
        pass


def test_every_command_wakes_the_installed_waker_and_no_other() -> None:
    """Each command submitted wakes the member thread's poll through the waker it
    installed; once it installed another (``NO_WAKEUPS`` before its consumer closes),
    the old one is not woken again."""
    woken: list[str] = []

    async def main() -> None:
        handoff = Handoff(asyncio.get_running_loop(), initial())
        stop = threading.Event()
        thread = member_thread(handoff, stop)
        handoff.wake_with(Woken("first", woken))
        for _ in range(3):
            await handoff.submit(WhoRunsMe(), timeout=5)
        handoff.wake_with(NO_WAKEUPS)
        await handoff.submit(WhoRunsMe(), timeout=5)
        handoff.wake_with(Woken("second", woken))
        await handoff.submit(WhoRunsMe(), timeout=5)
        stop.set()
        await asyncio.to_thread(thread.join, 5)

    asyncio.run(main())
    assert woken == ["first", "first", "first", "second"]
