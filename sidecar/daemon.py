"""Lifecycle of one sidecar process: start, ready, drain, stop — with deadlines.

``Sidecar.run()`` wires the parts (journal, dispatcher, registry, feed, fleet journal,
group member, HTTP server), then waits for SIGTERM/SIGINT. Stopping is ordered so the
guarantee holds to the end: the member leaves the group first (its ``revoked`` goes
through the barrier while the dispatcher still delivers), then deliveries stop, then HTTP.
The whole stop has a deadline; past it, or on a second signal, the process exits hard.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator

import structlog
import uvicorn
from prometheus_client import CollectorRegistry

from sidecar.api import create_app
from sidecar.commands import Leave
from sidecar.delivery import Dispatcher, RetryPolicy
from sidecar.feed import Feed
from sidecar.fleet import FleetJournal
from sidecar.handoff import BarrierOutcome, Handoff, MemberGone
from sidecar.journal import Journal
from sidecar.member import GroupMember
from sidecar.metrics import Metrics, StateSources
from sidecar.model import Assignment, Event, MemberState
from sidecar.settings import Settings
from sidecar.subscriptions import Registry

log = structlog.get_logger("sidecar.daemon")

_PRUNE_EVERY_SECONDS = 60.0


class StartupError(Exception):
    """The sidecar cannot start (port taken, data dir unwritable, ...)."""


class _Server(uvicorn.Server):
    """uvicorn, minus its signal handling: the daemon owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _LoopSide:
    """Where the handoff delivers: one event goes to webhooks, SSE and the fleet topic."""

    def __init__(self, dispatcher: Dispatcher, feed: Feed, fleet: FleetJournal | None) -> None:
        self._dispatcher = dispatcher
        self._feed = feed
        self._fleet = fleet

    def on_event(self, event: Event) -> None:
        self._dispatcher.wake()
        self._feed.publish(event)
        if self._fleet is not None:
            self._fleet.wake()

    def open_barrier(self, event: Event, done: Callable[[BarrierOutcome], None]) -> None:
        self._dispatcher.open_barrier(event, done)

    def barrier_expired(self, event: Event) -> BarrierOutcome:
        return self._dispatcher.barrier_expired(event)


class Sidecar:
    def __init__(self, settings: Settings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.metrics_registry = registry or CollectorRegistry()
        self.metrics = Metrics(self.metrics_registry)
        self._stopping = False
        self._stop_requested: asyncio.Event | None = None
        self._signals = 0
        self.bound_port: int | None = None

    # -- what the API reads -----------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def liveness(self) -> tuple[bool, str]:
        member = self._member
        if member.alive:
            # A callback may legitimately hold the thread for the revoke timeout.
            budget = 30.0 + 1.5 * self.settings.revoke_timeout_ms / 1000
            silent = time.monotonic() - member.last_tick
            if silent > budget:
                return False, f"poll loop silent for {silent:.0f} s"
            return True, "poll loop alive"
        if self.handoff.snapshot.state is MemberState.STOPPED and (self._stopping or self._drained):
            return True, "left the group on request"
        return False, "group member thread died"

    async def drain(self, deadline: float) -> Assignment | None:
        self._drained = True
        try:
            return await self.handoff.submit(Leave("drain requested"), timeout=deadline)
        except MemberGone:
            return self.handoff.snapshot
        except TimeoutError:
            return None

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self, ready: Callable[[Sidecar], None] | None = None) -> int:
        s = self.settings
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._drained = False
        sock = _bind(s.api_host, s.api_port)
        self.bound_port = sock.getsockname()[1]
        try:
            self.journal = Journal(s.data_dir, durable=False)
        except OSError as exc:
            sock.close()
            raise StartupError(f"SIDECAR_DATA_DIR={s.data_dir}: {exc}") from None
        initial = Assignment(
            group_id=s.group_id,
            member_id=None,
            group_instance_id=s.group_instance_id,
            generation_id=-1,
            protocol=s.protocol_name,
            state=MemberState.STARTING,
            partitions=(),
            sequence=self.journal.last_sequence(),
        )
        self.handoff = Handoff(loop, initial)
        self.feed = Feed()
        sources = StateSources(pending_events=self.journal.pending_events)
        self.metrics.observe_state(lambda: self.handoff.snapshot, sources)
        self.dispatcher = Dispatcher(
            self.journal,
            self.metrics,
            RetryPolicy(
                s.webhook_backoff_initial_ms / 1000,
                s.webhook_backoff_max_ms / 1000,
                s.webhook_max_attempts,
                s.webhook_max_age_ms / 1000,
            ),
        )
        self.registry = Registry(self.journal, self.dispatcher, s.webhook_allowed_hosts)
        fleet = FleetJournal(s, self.journal, self.metrics) if s.events_topic else None
        self.handoff.attach(_LoopSide(self.dispatcher, self.feed, fleet))
        self.dispatcher.start()
        self.registry.declare(s.webhooks)
        if fleet is not None:
            fleet.start()
        self._member = GroupMember(s, self.handoff, self.metrics, sources)
        self._member.start()

        server = _Server(
            uvicorn.Config(
                create_app(self),
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
            )
        )
        serving = loop.create_task(server.serve(sockets=[sock]), name="http")
        pruning = loop.create_task(self._prune_forever(), name="prune")
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        log.info(
            "sidecar started",
            api=f"http://{s.api_host}:{self.bound_port}",
            group_id=s.group_id,
            topics=list(s.topics),
            protocol=s.protocol_name,
            group_instance_id=s.group_instance_id,
            data_dir=str(s.data_dir),
        )
        if ready is not None:
            ready(self)
        stop_waiter = loop.create_task(self._stop_requested.wait())
        await asyncio.wait({serving, stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
        exit_code = 0 if stop_waiter.done() else 1
        watchdog = _hard_exit_after(s.shutdown_timeout_ms / 1000)
        try:
            await self._stop(server, serving, pruning, fleet)
        finally:
            watchdog.cancel()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        return exit_code

    def request_stop(self) -> None:
        if self._stop_requested is not None:
            self._stop_requested.set()

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            log.error("second signal: exiting now", signal=signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info(
            "signal received: leaving the group and stopping", signal=signal.Signals(signum).name
        )
        self.request_stop()

    async def _stop(
        self,
        server: uvicorn.Server,
        serving: asyncio.Task[None],
        pruning: asyncio.Task[None],
        fleet: FleetJournal | None,
    ) -> None:
        self._stopping = True
        budget = self.settings.shutdown_timeout_ms / 1000
        started = time.monotonic()
        with contextlib.suppress(MemberGone, TimeoutError):
            await self.handoff.submit(Leave("sidecar stopping"), timeout=budget)
        self._member.join(timeout=max(0.1, budget - (time.monotonic() - started)))
        pruning.cancel()
        await self.dispatcher.close()
        if fleet is not None:
            await fleet.close(timeout=5.0)
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        self.journal.close()
        log.info("sidecar stopped", seconds=round(time.monotonic() - started, 3))

    async def _prune_forever(self) -> None:
        s = self.settings
        while True:
            await asyncio.sleep(_PRUNE_EVERY_SECONDS)
            dropped = self.journal.prune(
                keep_events=s.journal_retention_events,
                max_age_seconds=s.journal_retention_hours * 3600,
            )
            if dropped:
                log.info("journal pruned", events=dropped)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio only sets TCP_NODELAY on sockets that say they are TCP,
    # and without it every response waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot listen on {host}:{port} (SIDECAR_API_HOST/SIDECAR_API_PORT): {exc.strerror}"
        ) from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def _hard_exit_after(seconds: float) -> threading.Timer:
    def hard_exit() -> None:
        log.error("shutdown deadline passed: exiting now", deadline_s=seconds)
        os._exit(1)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()
    return timer
