"""The one place where the consumer thread and the asyncio loop meet.

Everything crossing the boundary goes through a ``Handoff``:

* consumer thread -> loop: events (``announce``), assignment snapshots (``publish``), and
  revoke barriers (``await_barrier``), all scheduled with ``loop.call_soon_threadsafe``;
  the barrier is the one place the consumer thread *waits* on the loop, on a
  ``concurrent.futures.Future`` bounded by the revoke timeout (the in-process listener's
  semantics: the group does not move on until the application handled the revocation);
* loop -> consumer thread: commands (``submit``) on a queue that the poll loop drains
  between ``poll()`` calls (``take_commands``); the caller awaits a future. Each command
  wakes the thread out of its ``poll()`` when the consumer can be woken
  (``sidecar.kafka.wakeup``, installed by the thread with ``wake_with``).

No other module crosses the member thread's boundary: none calls
``call_soon_threadsafe`` for it, creates a thread-crossing future with it, or touches the
other side's objects. (The lag reader, ``sidecar.positions``, has a thread and a consumer
of its own that never joins the group; it hands its answers to the loop the same way.)
The thread-side methods never block on the loop except
``await_barrier``, and none of them raise when the loop is already gone (shutdown).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from sidecar.errors import MemberBusy as MemberBusy  # re-exported: the old home
from sidecar.errors import MemberGone as MemberGone
from sidecar.kafka.wakeup import NO_WAKEUPS, PollWaker
from sidecar.model import Assignment, Event, PartitionOffset

T = TypeVar("T")

# While a barrier holds the consumer thread, it looks for commands this often.
BARRIER_SLICE_SECONDS = 0.05


class Command(Generic[T]):
    """Something only the consumer thread may do; ``T`` is what it answers."""


@dataclass(frozen=True, slots=True)
class BarrierOutcome:
    """How a revoke barrier ended, as the consumer thread needs to know it."""

    acknowledged: tuple[str, ...] = ()
    gave_up: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()  # still unacknowledged when the timeout struck
    offsets: tuple[PartitionOffset, ...] = ()
    handed_back: tuple[str, ...] = ()  # the acknowledging subscribers that gave offsets
    timed_out: bool = False


#: How a barrier hands its outcome to the consumer thread; ``False`` when the thread had
#: stopped waiting already (the outcome, offsets and all, went nowhere).
BarrierDone = Callable[[BarrierOutcome], bool]

# The consumer thread's own mark, set on a barrier's future when it stops waiting: an
# outcome that comes after it finds the future done and is refused (``done`` → False).
_ABANDONED = BarrierOutcome(timed_out=True)


class LoopSide(Protocol):
    """What the loop side offers the handoff (implemented by the dispatcher/daemon)."""

    def on_event(self, event: Event) -> None: ...

    def open_barrier(self, event: Event, done: BarrierDone) -> None: ...

    def barrier_expired(self, event: Event) -> BarrierOutcome: ...


@dataclass(slots=True)
class PendingCommand:
    """A submitted command. Its future is *running* once the member thread took it: from
    then on it can no longer be withdrawn, and before that it can never be run."""

    command: Command[Any]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    asked_at: float = field(default_factory=time.monotonic)  # when its caller submitted it


def _nobody_waits(answer: asyncio.Future[Any]) -> None:
    """The caller gave up: its command's failure is the member's to log, not asyncio's."""
    if not answer.cancelled():
        answer.exception()


class Handoff:
    def __init__(self, loop: asyncio.AbstractEventLoop, initial: Assignment) -> None:
        self._loop = loop
        self._commands: queue.SimpleQueue[PendingCommand] = queue.SimpleQueue()
        self._waker: PollWaker = NO_WAKEUPS
        self._held: list[PendingCommand] = []  # consumer thread only: not runnable yet
        # Why the consumer thread is done (``close``); ``None`` while it runs. One field,
        # written once, so the loop never sees it closed without its reason.
        self._closed: str | None = None
        self._side: LoopSide | None = None
        # Read from both sides; replaced (never mutated) by the consumer thread.
        self._snapshot = initial
        # Loop-side only.
        self._changed = asyncio.Event()

    def attach(self, side: LoopSide) -> None:
        self._side = side

    # -- consumer thread -----------------------------------------------------------------

    def publish(self, snapshot: Assignment, *, announcing: bool = False) -> None:
        """Replace the snapshot. ``announcing``: an event's announcement follows at once and
        wakes the snapshot's waiters too, so an event costs one crossing, not two (each
        crossing wakes the loop, which then holds the GIL this thread needs next)."""
        self._snapshot = snapshot
        if not announcing or self._side is None:
            self._call(self._snapshot_changed)

    def announce(self, event: Event) -> None:
        if self._side is not None:
            self._call(self._announce, self._side, event, None)

    def await_barrier(
        self, event: Event, timeout: float, serve: Callable[[], None] | None = None
    ) -> BarrierOutcome:
        """Block the consumer thread until blocking subscribers acknowledged ``event``.

        The barrier opens *before* the event is announced (in the same loop callback), so
        no answer can arrive for an event whose barrier does not exist yet.
        ``serve`` runs on this thread every ``BARRIER_SLICE_SECONDS`` while it waits: the
        application may commit from its revoke handler, and only this thread can commit.
        """
        side = self._side
        if side is None:
            return BarrierOutcome()
        future: concurrent.futures.Future[BarrierOutcome] = concurrent.futures.Future()

        def done(outcome: BarrierOutcome) -> bool:
            try:
                future.set_result(outcome)
            except concurrent.futures.InvalidStateError:
                return False  # the consumer thread stopped waiting a moment ago
            return True

        if not self._call(self._announce, side, event, done):
            return BarrierOutcome()
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return future.result(timeout=min(remaining, BARRIER_SLICE_SECONDS))
            except TimeoutError:
                if serve is not None:
                    serve()
        # Ask the loop which subscribers are still missing, briefly: it may be busy.
        expired: concurrent.futures.Future[BarrierOutcome] = concurrent.futures.Future()

        def expire() -> None:
            try:
                expired.set_result(side.barrier_expired(event))
            except Exception as exc:  # never leave the consumer thread hanging
                expired.set_exception(exc)

        if self._call(expire):
            with contextlib.suppress(Exception):  # timing out here must not stop the rebalance
                outcome = expired.result(timeout=2.0)
                # The loop runs callbacks in order: an answer that settled the barrier just
                # before the expiry ran is in ``future`` by now, offsets and all.
                return future.result() if future.done() else outcome
        # The loop did not run the expiry in time (busy). Stop waiting, atomically against
        # a last answer: one that settled first is taken; one after finds ``_ABANDONED``
        # and its subscriber's offsets are recorded as rejected, not silently dropped.
        try:
            future.set_result(_ABANDONED)
        except concurrent.futures.InvalidStateError:
            return future.result()
        return _ABANDONED

    def take_commands(
        self, accept: Callable[[Command[Any]], bool] | None = None
    ) -> list[PendingCommand]:
        """The commands to run now, oldest first; withdrawn ones (``MemberBusy``) are skipped
        for good. With ``accept``, the others are held back for a later call, not taken: a
        command the thread cannot run yet stays withdrawable by its caller's deadline."""
        candidates, self._held = self._held, []
        while True:
            try:
                candidates.append(self._commands.get_nowait())
            except queue.Empty:
                break
        pending: list[PendingCommand] = []
        for taken in candidates:
            if accept is not None and not accept(taken.command):
                if not taken.future.cancelled():
                    self._held.append(taken)
            # Atomic against the submitter's cancel(): either withdrawn, or ours to run.
            elif _claim(taken):
                pending.append(taken)
        return pending

    def wake_with(self, waker: PollWaker) -> None:
        """What wakes the consumer thread's ``poll()`` for a command (``NO_WAKEUPS``: it
        cannot be woken; it takes commands when its poll times out)."""
        self._waker = waker

    def close(self, why: str = "the group member has stopped") -> None:
        """The consumer thread is done: fail whatever is still queued or held back, and
        every command sent from now on, with ``MemberGone(why)``. The first reason given
        stays (a fail stop during a drain is a failure, not the drain)."""
        if self._closed is None:
            self._closed = why
        self._fail_queued()

    def _call(self, callback: Callable[..., Any], *args: Any) -> bool:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # loop closed: nobody is listening any more
            return False
        return True

    def _fail_queued(self) -> None:
        for pending in self.take_commands():
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                pending.future.set_exception(MemberGone(self._closed or "closed"))

    # -- loop ----------------------------------------------------------------------------

    @property
    def snapshot(self) -> Assignment:
        return self._snapshot

    async def submit(self, command: Command[T], timeout: float | None = None) -> T:
        """Run ``command`` on the consumer thread and wait for its answer.

        When the thread has not *taken* the command within ``timeout`` (it is inside a
        long rebalance callback, say), the command is withdrawn and ``MemberBusy`` raised:
        it will never run. When it was taken but has not finished, a plain ``TimeoutError``
        says the deadline passed while it runs on (a drain still leaving the group).
        """
        if self._closed is not None:
            raise MemberGone(self._closed)
        pending = PendingCommand(command)
        self._commands.put(pending)
        self._waker.wake()
        if self._closed is not None:
            self._fail_queued()
        answer = asyncio.wrap_future(pending.future)
        try:
            result: T = await asyncio.wait_for(asyncio.shield(answer), timeout)
        except TimeoutError:
            if pending.future.cancel():
                raise MemberBusy(
                    f"the group member did not take the command within {timeout} s"
                ) from None
            answer.add_done_callback(_nobody_waits)
            raise
        return result

    async def wait_for_change(self, after_sequence: int, timeout: float) -> Assignment:
        """Return once the snapshot's sequence passes ``after_sequence`` or on timeout."""
        await self.wait_until(lambda a: a.sequence > after_sequence, timeout)
        return self._snapshot

    async def wait_until(
        self, predicate: Callable[[Assignment], bool], timeout: float
    ) -> Assignment | None:
        """Wait for a snapshot that satisfies ``predicate``; ``None`` on timeout."""
        deadline = time.monotonic() + timeout
        while not predicate(self._snapshot):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return None
        return self._snapshot

    def _announce(self, side: LoopSide, event: Event, done: BarrierDone | None) -> None:
        # Each step runs even if one before it raised; the loop's exception handler logs
        # what raised.
        try:
            if done is not None:
                side.open_barrier(event, done)  # before the event is out: no answer finds none
        finally:
            try:
                side.on_event(event)
            finally:
                self._snapshot_changed()

    def _snapshot_changed(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def _claim(pending: PendingCommand) -> bool:
    """Mark ``pending`` as running; ``False`` when its caller withdrew it (or another
    thread claimed it first, when the loop fails what is left at shutdown)."""
    try:
        return pending.future.set_running_or_notify_cancel()
    except RuntimeError:  # already running: claimed by the other side
        return False
