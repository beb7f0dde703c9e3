"""A private Kafka broker for the chaos run: started, paused, restarted and stopped by us.

The chaos run pauses and restarts its broker, so it never shares one: it runs
``deploy/local/kafka.sh`` with its own ``KAFKA_PORT`` and ``KAFKA_DATA_DIR`` (the jar
cache is shared, read-only). Every verb records when it happened, so the ownership
analysis can tell windows the protocol allows (a paused broker expires sessions).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.sidecars import REPO

KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"
# Ports other sessions' brokers use: never ours (with their controller ports).
RESERVED_PORTS = frozenset({29092, 29093, 39092, 39093, 49092, 49093})


class BrokerError(RuntimeError):
    """kafka.sh failed; the message carries the end of its stderr."""


@dataclass(frozen=True)
class BrokerOutage:
    """A window in which the broker did not answer: paused, or stopped for a restart."""

    kind: str  # "pause" or "restart"
    started: float  # time.time()
    ended: float


def free_port_pair() -> int:
    """A port P such that P (client listener) and P+1 (controller) are both free.

    Drawn below the kernel's ephemeral range (outgoing connections take ports from
    there, and the broker must be able to bind the same two ports again on restart).
    """
    low, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, min(low, 32_768) - 2)
        if port in RESERVED_PORTS or port + 1 in RESERVED_PORTS:
            continue
        if _free(port) and _free(port + 1):
            return port
    raise BrokerError("no two consecutive free ports on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Broker:
    def __init__(self, port: int, data_dir: Path) -> None:
        if port in RESERVED_PORTS or port + 1 in RESERVED_PORTS:
            raise BrokerError(f"port {port} belongs to a shared broker; pick another")
        self.port = port
        self.data_dir = data_dir
        self.bootstrap = f"127.0.0.1:{port}"
        self.outages: list[BrokerOutage] = []
        self._paused_at: float | None = None
        self._lock = threading.Lock()
        self._env = {
            **os.environ,
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(port + 1),
            "KAFKA_DATA_DIR": str(data_dir),
            "KAFKA_START_TIMEOUT": "120",
        }

    def _run(self, verb: str, timeout: float) -> str:
        done = subprocess.run(
            [str(KAFKA_SH), verb],
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
                [str(KAFKA_SH), "status"], env=self._env, capture_output=True, timeout=30
            ).returncode
            == 0
        )

    def _close_pause(self) -> None:
        if self._paused_at is not None:
            self.outages.append(BrokerOutage("pause", self._paused_at, time.time()))
            self._paused_at = None
