"""Lifecycle of one sidecar process: start, ready, drain, stop — with deadlines.

``Sidecar.run()`` binds both listeners, builds the parts (``build_components``), starts the
group member and the HTTP servers, then waits for SIGTERM/SIGINT. Stopping follows
``STOP_STEPS`` in order so the guarantee holds to the end: the member leaves the group
first (its ``revoked`` goes through the barrier while the dispatcher still delivers),
then deliveries stop, the fleet topic is flushed, and HTTP closes last. Every step has its
own deadline inside the whole stop's (``SIDECAR_SHUTDOWN_TIMEOUT_MS``); past that, or on a
second signal, the process exits hard.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from sidecar import credentials, http_listeners, rotation
from sidecar.api import create_admin_app, create_app
from sidecar.commands import Leave
from sidecar.components import Components, build_components
from sidecar.errors import MemberBusy, MemberGone, StartupError
from sidecar.feed import Feed
from sidecar.fleet import CURSOR as FLEET_CURSOR
from sidecar.handoff import Handoff
from sidecar.http_listeners import BoundListener, HttpServer, bind_listeners
from sidecar.http_protocol import deadlined_h11
from sidecar.journal import Journal
from sidecar.member import GroupMember
from sidecar.model import Assignment, MemberState
from sidecar.positions import PositionsView
from sidecar.probes import Lifecycle, Probes
from sidecar.settings import Settings
from sidecar.subscriptions import Registry

log = structlog.get_logger("sidecar.daemon")

_PRUNE_EVERY_SECONDS = 60.0
_JOIN_WATCH_SECONDS = 3600.0

__all__ = ["STOP_STEPS", "Sidecar", "StartupError"]

# Their names from before ``sidecar.http_listeners``: tests reach them through this module.
_bind = http_listeners.bind
_url = http_listeners.url


@dataclass(frozen=True, slots=True)
class StopStep:
    """One step of the stop: ``run(sidecar, seconds)`` must be done within ``seconds``."""

    name: str
    cap_seconds: float | None  # None: whatever is left of the whole stop's deadline
    run: Callable[[Sidecar, float], Awaitable[None]]


class Sidecar:
    def __init__(self, settings: Settings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.metrics_registry = registry or CollectorRegistry()
        self._lifecycle = Lifecycle.CREATED
        self._drains = 0  # drain calls under way (the phase says "draining" meanwhile)
        self._drained_at: float | None = None  # monotonic
        self._parts: Components | None = None
        self._member: GroupMember | None = None
        self._stop_requested = asyncio.Event()
        self._exit_code = 0  # request_stop's: credentials refused, renewed TLS files
        self._signals = 0
        self._listeners: list[BoundListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._over_size = False  # the journal was over its size budget at the last prune
        self.probes = Probes(
            settings,
            lambda: self.lifecycle,
            lambda: self.handoff.snapshot,
            lambda: self._member,
            lambda: self._drained_at,
        )

    # -- what the API reads -----------------------------------------------------------------

    @property
    def lifecycle(self) -> Lifecycle:
        """``DRAINING`` while a drain call runs on a running sidecar (not ready)."""
        if self._drains and self._lifecycle is Lifecycle.RUNNING:
            return Lifecycle.DRAINING
        return self._lifecycle

    @property
    def parts(self) -> Components:
        if self._parts is None:
            raise RuntimeError("the sidecar has not started")
        return self._parts

    @property
    def handoff(self) -> Handoff:
        return self.parts.handoff

    @property
    def registry(self) -> Registry:
        return self.parts.registry

    @property
    def journal(self) -> Journal:
        return self.parts.journal

    @property
    def feed(self) -> Feed:
        return self.parts.feed

    @property
    def positions(self) -> PositionsView:
        return self.parts.positions

    @property
    def stopping(self) -> bool:
        return self._lifecycle.stopping

    @property
    def bound_port(self) -> int | None:
        """The control API's port (useful with ``SIDECAR_API_PORT=0``)."""
        return self._port("api")

    @property
    def admin_port(self) -> int | None:
        return self._port("admin")

    def _port(self, name: str) -> int | None:
        return next((lst.port for lst in self._listeners if lst.name == name), None)

    async def drain(self, deadline: float) -> Assignment | None:
        self._drains += 1  # not ready from now on: the pod is going
        left = True  # the member left, or leaves (forward only: RUNNING, then DRAINED)
        try:
            return await self.handoff.submit(Leave("drain requested"), timeout=deadline)
        except MemberGone:
            return self.handoff.snapshot
        except MemberBusy:  # withdrawn, never run: still in the group, so still ready
            left = False
            return None
        except TimeoutError:  # taken, still leaving: the caller answers 504
            return None
        finally:
            self._drains -= 1
            if left and self._lifecycle is Lifecycle.RUNNING:
                self._lifecycle = Lifecycle.DRAINED
            if self._lifecycle is Lifecycle.DRAINED:
                # drained_restart_after_ms counts from the end of the latest drain call
                # (never while one runs, whatever its ?deadline=).
                self._drained_at = time.monotonic()

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self, ready: Callable[[Sidecar], None] | None = None) -> int:
        s = self.settings
        loop = asyncio.get_running_loop()
        self._lifecycle = Lifecycle.STARTING
        self._listeners = bind_listeners(s)
        try:
            self._parts = parts = build_components(s, self.metrics_registry)
        except StartupError:
            for listener in self._listeners:
                listener.sock.close()
            raise
        parts.start()
        self._member = GroupMember(s, parts.handoff, parts.metrics, parts.sources)
        self._member.start()
        self._lifecycle = Lifecycle.RUNNING
        apps: dict[str, Callable[[Sidecar], FastAPI]] = {
            "api": create_app,
            "admin": create_admin_app,
        }
        for listener in self._listeners:
            listener.server = HttpServer(
                uvicorn.Config(
                    apps[listener.name](self),
                    log_config=None,
                    access_log=False,
                    lifespan="off",
                    timeout_graceful_shutdown=5,
                    # Peers are who they are: no X-Forwarded-For may pose as loopback.
                    proxy_headers=False,
                    # h11 even where httptools is installed (it gives up on an unfinished
                    # request head past 16 kB, httptools took a 200 MB header into memory),
                    # with a deadline for reading each request (sidecar.http_protocol).
                    http=deadlined_h11(s.http_request_timeout_ms / 1000),
                    # Nothing here speaks WebSocket: an upgrade is never taken, wherever a
                    # WebSocket library happens to be installed.
                    ws="none",
                )
            )
            listener.task = loop.create_task(
                listener.server.serve(sockets=[listener.sock]), name=f"http-{listener.name}"
            )
        self._tasks = [
            loop.create_task(self._prune_forever(), name="prune"),
            loop.create_task(self._watch_first_join(), name="first-join"),
            loop.create_task(credentials.watch(self), name="credentials"),
            loop.create_task(rotation.watch(self), name="tls-files"),
        ]
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        log.info(
            "sidecar started",
            api=_url(s.api_host, self.bound_port),
            admin=_url(s.admin_host, self.admin_port) if self.admin_port else None,
            group_id=s.group_id,
            topics=list(s.topics),
            protocol=s.protocol_name,
            group_instance_id=s.group_instance_id,
            data_dir=str(s.data_dir),
        )
        if ready is not None:
            ready(self)
        stop_waiter = loop.create_task(self._stop_requested.wait())
        serving = {lst.task for lst in self._listeners if lst.task is not None}
        await asyncio.wait({*serving, stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
        exit_code = self._exit_code if stop_waiter.done() else 1
        stop_waiter.cancel()
        watchdog = _hard_exit_after(s.shutdown_timeout_ms / 1000)
        try:
            await self._stop()
        finally:
            watchdog.cancel()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        return exit_code

    def request_stop(self, exit_code: int = 0) -> None:
        self._exit_code = self._exit_code or exit_code
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

    async def _stop(self) -> None:
        self._lifecycle = Lifecycle.STOPPING
        # A little under the hard exit, so the last step can still log that it ran late.
        deadline = time.monotonic() + self.settings.shutdown_timeout_ms / 1000 * 0.95
        started = time.monotonic()
        for step in STOP_STEPS:
            remaining = max(0.1, deadline - time.monotonic())
            seconds = remaining if step.cap_seconds is None else min(step.cap_seconds, remaining)
            try:
                await asyncio.wait_for(step.run(self, seconds), seconds + 0.5)
            except TimeoutError:
                log.warning("stop step ran out of time; going on", step=step.name, seconds=seconds)
            except Exception:
                log.exception("stop step failed; going on", step=step.name)
        self._lifecycle = Lifecycle.STOPPED
        log.info("sidecar stopped", seconds=round(time.monotonic() - started, 3))

    async def leave_group(self, seconds: float) -> None:
        with contextlib.suppress(MemberGone, MemberBusy, TimeoutError):
            await self.handoff.submit(Leave("sidecar stopping"), timeout=seconds)
        member = self._member
        if member is not None:
            await asyncio.to_thread(member.join, max(0.1, seconds))

    async def cancel_tasks(self, seconds: float) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.wait(self._tasks, timeout=seconds)

    async def close_fleet(self, seconds: float) -> None:
        if self.parts.fleet is not None:
            await self.parts.fleet.close(timeout=seconds)

    async def close_listeners(self, seconds: float) -> None:
        for listener in self._listeners:
            if listener.server is not None:
                listener.server.request_exit()
        tasks = [lst.task for lst in self._listeners if lst.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=seconds)

    async def _prune_forever(self) -> None:
        """Retention, every ``_PRUNE_EVERY_SECONDS``. A round that fails (the database
        busy past its timeout, a full or failing disk) is logged and the next one tried:
        a task ended by one error would stop retention for good, without a word, and the
        journal would grow until its volume evicts the pod."""
        while True:
            await asyncio.sleep(_PRUNE_EVERY_SECONDS)
            try:
                await self._prune()
            except Exception as exc:
                log.error("journal pruning failed; trying again next round", error=repr(exc))

    async def _prune(self) -> None:
        s = self.settings
        dropped = self.journal.prune(
            keep_events=s.journal_retention_events,
            max_age_seconds=s.journal_retention_hours * 3600,
        )
        if dropped:
            log.info("journal pruned", events=dropped)
        if s.journal_max_bytes:
            await self._prune_to_size(s.journal_max_bytes)

    async def _prune_to_size(self, max_bytes: int) -> None:
        dropped = 0
        for cut in self.journal.size_cuts(max_bytes):
            dropped += cut
            # Between slices the loop runs: the API, the probes, webhook deliveries and
            # the acknowledgements a revoke waits for do not wait for a large first cut.
            await asyncio.sleep(0)
        used = self.journal.used_bytes()
        if dropped:
            log.info("journal pruned to size", events=dropped, used_bytes=used, max_bytes=max_bytes)
        over = used > max_bytes
        if over and not self._over_size:
            # Only events a webhook or the fleet topic has still to take are left: they
            # are kept (the backlog alert is the one to act on), said once per episode.
            log.warning(
                "journal over SIDECAR_JOURNAL_MAX_BYTES: what is left is not delivered yet",
                used_bytes=used,
                max_bytes=max_bytes,
                pending_events=self.journal.pending_events(),  # webhooks'
                fleet_pending_events=(
                    self.journal.events_past(FLEET_CURSOR) if self.settings.events_topic else 0
                ),
            )
        self._over_size = over

    async def _watch_first_join(self) -> None:
        """Readiness waits for the first join; the probe alone could miss a short one."""
        while not self.probes.joined_once:
            joined = await self.handoff.wait_until(
                lambda a: a.state is MemberState.STABLE, _JOIN_WATCH_SECONDS
            )
            if joined is not None:
                self.probes.note(joined)


async def _close_journal(sidecar: Sidecar, seconds: float) -> None:
    sidecar.journal.close()


async def _stop_deliveries(sidecar: Sidecar, seconds: float) -> None:
    await sidecar.parts.dispatcher.close()


#: The stop, in order. The member leaves first, while webhooks are still delivered, so its
#: ``revoked`` passes the barrier; the listeners close last, so probes answer to the end.
STOP_STEPS: tuple[StopStep, ...] = (
    StopStep("leave the group", None, Sidecar.leave_group),
    StopStep("stop background tasks", 1.0, Sidecar.cancel_tasks),
    StopStep("stop webhook deliveries", 5.0, _stop_deliveries),
    StopStep("flush the fleet topic", None, Sidecar.close_fleet),
    StopStep("close the listeners", 6.0, Sidecar.close_listeners),
    StopStep("close the journal", 2.0, _close_journal),
)


def _hard_exit_after(seconds: float) -> threading.Timer:
    def hard_exit() -> None:
        log.error("shutdown deadline passed: exiting now", deadline_s=seconds)
        os._exit(1)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()
    return timer
