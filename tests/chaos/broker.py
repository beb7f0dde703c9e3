"""A private Kafka broker for the chaos run: started, paused, restarted and stopped by us.

The chaos run pauses and restarts its broker, so it never shares one: it runs
``deploy/local/kafka.sh`` with its own ``KAFKA_PORT`` and ``KAFKA_DATA_DIR`` (the jar
cache is shared, read-only). Every verb records when it happened, so the ownership
analysis can tell windows the protocol allows (a paused broker expires sessions).

Each member reaches the broker over a link of its own: a listener per member whose
advertised address is a Toxiproxy proxy in front of it (``Link``), so cutting or slowing
one member's link (the coordinator included: it is the same broker) leaves the others'
alone. The listeners' ports are drawn below the ephemeral range, like the broker's, so a
restart can bind them again.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.sidecars import REPO, RESERVED_PORTS, free_port
from tests.support.toxiproxy import TEMPLATE, Proxy, Toxiproxy, copy_deploy, with_listeners

KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"


class BrokerError(RuntimeError):
    """kafka.sh failed; the message carries the end of its stderr."""


@dataclass(frozen=True)
class BrokerOutage:
    """A window in which the broker did not answer: paused, or stopped for a restart."""

    kind: str  # "pause" or "restart"
    started: float  # time.time()
    ended: float


@dataclass(frozen=True)
class LinkOutage:
    """A window in which one member's link to Kafka was cut or slowed."""

    kind: str  # "cut" or "slow"
    started: float  # time.time()
    ended: float


class Link:
    """One member's TCP path to the broker, through its own proxy."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.outages: list[LinkOutage] = []
        self._since: tuple[str, float] | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return self.proxy.address

    def cut(self) -> None:
        with self._lock:
            self._end()
            self.proxy.cut()
            self._since = ("cut", time.time())

    def slow(self, latency_ms: int) -> None:
        with self._lock:
            self._end()
            self.proxy.slow(latency_ms)
            self._since = ("slow", time.time())

    def heal(self) -> None:
        """Undo whatever is wrong with the link; safe to call when nothing is."""
        with self._lock:
            self._end()

    def _end(self) -> None:
        if self._since is None:
            return
        kind, started = self._since
        if kind == "cut":
            self.proxy.restore()
        else:
            self.proxy.heal()
        self.outages.append(LinkOutage(kind, started, time.time()))
        self._since = None


def free_port_pair() -> int:
    """A port P such that P (client listener) and P+1 (controller) are both free.

    Below the kernel's ephemeral range, as every port the testkit hands out: the broker
    must be able to bind the same two ports again on restart.
    """
    return free_port(2)


class Broker:
    def __init__(
        self,
        port: int,
        data_dir: Path,
        links: int = 0,
        toxiproxy: Toxiproxy | None = None,
        session_timeout_ms: int | None = None,
    ) -> None:
        """``links`` members get a proxied listener each (``self.links``), made on
        ``toxiproxy``; ``session_timeout_ms`` sets the KIP-848 group session timeout."""
        if port in RESERVED_PORTS or port + 1 in RESERVED_PORTS:
            raise BrokerError(f"port {port} belongs to a shared broker; pick another")
        self.port = port
        self.data_dir = data_dir
        self.bootstrap = f"127.0.0.1:{port}"
        self.outages: list[BrokerOutage] = []
        self.links: list[Link] = []
        self._paused_at: float | None = None
        self._lock = threading.Lock()
        self._env = {
            **os.environ,
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(port + 1),
            "KAFKA_DATA_DIR": str(data_dir),
            "KAFKA_START_TIMEOUT": "120",
            "KAFKA_HOME": str(REPO / ".cache" / "kafka"),
        }
        self._script = KAFKA_SH
        if links or session_timeout_ms:
            listeners: dict[str, tuple[int, str]] = {}
            for index in range(links):
                if toxiproxy is None:
                    raise BrokerError("links need a toxiproxy")
                listen = free_port()
                proxy = toxiproxy.proxy(f"link-{port}-m{index}", f"127.0.0.1:{listen}")
                self.links.append(Link(proxy))
                listeners[f"LINK{index}"] = (listen, proxy.address)
            template = with_listeners(TEMPLATE.read_text(), listeners)
            if session_timeout_ms:
                template = template.replace(
                    "group.consumer.session.timeout.ms=10000",
                    f"group.consumer.session.timeout.ms={session_timeout_ms}",
                )
                assert f"session.timeout.ms={session_timeout_ms}" in template, "template changed"
            deploy = copy_deploy(data_dir.parent / f"deploy-{port}" / "deploy" / "local", template)
            self._script = deploy / "kafka.sh"

    def _run(self, verb: str, timeout: float) -> str:
        done = subprocess.run(
            [str(self._script), verb],
            env=self._env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise BrokerError(f"kafka.sh {verb} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout.strip()

    def start(self) -> str:
        with self._lock:
            self._run("start", 180)
        return self.bootstrap

    def stop(self) -> None:
        """Stop for good (resumes a paused broker first); safe to call twice."""
        with self._lock:
            self._run("stop", 120)
            self._close_pause()

    def pause(self) -> None:
        with self._lock:
            if self._paused_at is None:
                self._run("pause", 30)
                self._paused_at = time.time()

    def resume(self) -> None:
        with self._lock:
            if self._paused_at is not None:
                self._run("resume", 30)
                self._close_pause()

    def restart(self) -> None:
        with self._lock:
            if self._paused_at is not None:
                self._run("resume", 30)
                self._close_pause()
            started = time.time()
            try:
                self._run("restart", 240)
            finally:
                self.outages.append(BrokerOutage("restart", started, time.time()))

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def running(self) -> bool:
        return (
            subprocess.run(
                [str(self._script), "status"], env=self._env, capture_output=True, timeout=30
            ).returncode
            == 0
        )

    def _close_pause(self) -> None:
        if self._paused_at is not None:
            self.outages.append(BrokerOutage("pause", self._paused_at, time.time()))
            self._paused_at = None
