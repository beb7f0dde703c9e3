"""Sidecars as real subprocesses (`rebalance-sidecar run`, the image's command)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "sidecar", "run"]  # == the image's ENTRYPOINT + CMD

# Short protocol bounds keep the suite fast; the broker allows them (server.properties).
FAST_GROUP = {
    "SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "6000",
    "SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
    "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "30000",
    "SIDECAR_KAFKA_TOPIC_METADATA_REFRESH_INTERVAL_MS": "2000",
}


# The fixed ports of the brokers the suite, the CI and the bench start (client port,
# controller port): free while such a broker restarts, never to be handed out.
RESERVED_PORTS = frozenset({29092, 29093, 39092, 39093, 49092, 49093})
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PREFERRED_LOWEST = 20_000
_LOWEST = 1_024
_HANDED_OUT: set[int] = set()  # by this process, perhaps not bound yet: never twice
_HANDING_OUT = threading.Lock()


def ephemeral_low(source: Path = _EPHEMERAL) -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unreadable)."""
    try:
        return int(source.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def port_band(ephemeral_start: int, consecutive: int = 1) -> range:
    """Where ``free_port`` draws P from: below the ephemeral range, at most up to 32767,
    from 20000 when that leaves at least 1,000 ports, else from 1024."""
    top = min(ephemeral_start, 32_768)
    bottom = _PREFERRED_LOWEST if top - _PREFERRED_LOWEST >= 1_000 else _LOWEST
    return range(bottom, max(bottom, top - consecutive + 1))


def free_port(consecutive: int = 1) -> int:
    """A port P on 127.0.0.1 such that P .. P + consecutive - 1 are free now.

    Drawn below the kernel's ephemeral range, never from it (binding port 0 would): a
    port from that range, once released, can be taken by any outgoing connection before
    the process meant to listen on it binds it. With 60 members starting at once, a
    sidecar exited with "Address already in use" that way and its group never formed.
    Never one of ``RESERVED_PORTS``, nor one this process handed out before (perhaps not
    bound yet).
    """
    band = port_band(ephemeral_low(), consecutive)
    if not band:
        raise RuntimeError(
            f"no ports below the kernel's ephemeral range ({_EPHEMERAL}) to hand out"
        )
    rng = random.SystemRandom()
    with _HANDING_OUT:
        taken = RESERVED_PORTS | _HANDED_OUT
        for _ in range(500):
            port = rng.choice(band)
            wanted = set(range(port, port + consecutive))
            if wanted & taken or not all(_bindable(p) for p in wanted):
                continue
            _HANDED_OUT.update(wanted)
            return port
    raise RuntimeError(f"no {consecutive} consecutive free port(s) on 127.0.0.1")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Sidecar:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: str,
        data_dir: Path,
        *,
        protocol: str = "classic",
        strategy: str | None = "range",
        instance_id: str | None = None,
        revoke_timeout_ms: int = 10_000,
        token: str | None = None,
        webhooks: list[dict[str, Any]] | None = None,
        extra_env: dict[str, str] | None = None,
        name: str = "sidecar",
        python: str | None = None,
    ) -> None:
        self.name = name
        # The interpreter (the benchmark's: a virtualenv with the runtime dependencies only).
        self.command = [python or sys.executable, *COMMAND[1:]]
        self.port = free_port()
        self.admin_port = free_port()  # never the default 8081: sidecars run side by side
        self.data_dir = data_dir
        self.token = token
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / f"{name}.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SIDECAR_") and k != "KAFKA_BOOTSTRAP_SERVERS"
        }
        env.update(
            FAST_GROUP
            if protocol == "classic"
            else {
                "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "30000",
                "SIDECAR_KAFKA_TOPIC_METADATA_REFRESH_INTERVAL_MS": "2000",
            }
        )
        env.update(
            {
                "SIDECAR_BOOTSTRAP_SERVERS": bootstrap,
                "SIDECAR_GROUP_ID": group,
                "SIDECAR_TOPICS": topics,
                "SIDECAR_GROUP_PROTOCOL": protocol,
                "SIDECAR_API_PORT": str(self.port),
                "SIDECAR_ADMIN_HOST": "127.0.0.1",
                "SIDECAR_ADMIN_PORT": str(self.admin_port),
                "SIDECAR_DATA_DIR": str(data_dir),
                "SIDECAR_REVOKE_TIMEOUT_MS": str(revoke_timeout_ms),
                "SIDECAR_STATISTICS_INTERVAL_MS": "1000",
                "SIDECAR_SHUTDOWN_TIMEOUT_MS": "40000",
                "SIDECAR_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if strategy and protocol == "classic":
            env["SIDECAR_ASSIGNMENT_STRATEGY"] = strategy
        if instance_id:
            env["SIDECAR_GROUP_INSTANCE_ID"] = instance_id
        if token:
            env["SIDECAR_API_TOKEN"] = token
        if webhooks:
            env["SIDECAR_WEBHOOKS"] = json.dumps(webhooks)
        env.update(extra_env or {})
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        api_host = _reachable(env.get("SIDECAR_API_HOST", "127.0.0.1"))
        admin_host = _reachable(env["SIDECAR_ADMIN_HOST"])
        self.client = httpx.Client(base_url=f"http://{api_host}:{self.port}", timeout=60)
        self.admin = httpx.Client(base_url=f"http://{admin_host}:{self.admin_port}", timeout=60)

    # -- process -----------------------------------------------------------------------------

    def start(self) -> Sidecar:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        log.close()
        self._wait(lambda: self._up(), 30, "HTTP up")
        return self

    def _up(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.process.returncode}:\n{self.logs()}")
        try:
            return self.client.get("/healthz", timeout=2).status_code in (200, 503)
        except httpx.TransportError:
            return False

    def terminate(self, timeout: float = 60) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.terminate(timeout=45)
            except subprocess.TimeoutExpired:
                self.kill()
        self.client.close()
        self.admin.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    # -- API -----------------------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def assignment(self) -> dict[str, Any]:
        response = self.client.get("/assignment")
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def partitions(self) -> set[tuple[str, int]]:
        return {(p["topic"], p["partition"]) for p in self.assignment()["partitions"]}

    def history(self, after: int = 0) -> list[dict[str, Any]]:
        response = self.client.get(
            "/events",
            params={"after": after, "limit": 10000},
            headers={"Accept": "application/json"},
        )
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json()
        return events

    def wait_stable(self, timeout: float = 60) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def stable() -> bool:
            found.update(self.assignment())
            return bool(found["state"] == "stable")

        self._wait(stable, timeout, "stable")
        return found

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: not {what} within {timeout} s\n{self.logs()}")


def _reachable(host: str) -> str:
    """Where a client connects to a listener bound to ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "localhost") else host  # noqa: S104


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not {what} within {timeout} s")


def covers(sidecars: list[Sidecar], topic: str, partitions: int) -> bool:
    """All partitions owned, by exactly one stable member each, in one generation."""
    try:
        states = [s.assignment() for s in sidecars]
    except httpx.HTTPError:
        return False
    if any(a["state"] != "stable" for a in states):
        return False
    if len({a["generation_id"] for a in states}) != 1:
        return False
    owned = [(p["topic"], p["partition"]) for a in states for p in a["partitions"]]
    return sorted(owned) == [(topic, p) for p in range(partitions)]
