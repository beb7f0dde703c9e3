"""Sidecar processes for the footprint and HTTP sections: a timed start, CPU and memory."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from bench.common import REPO
from sidecar.testkit.sidecars import Sidecar

# librdkafka's and the sidecar's defaults, spelled out: the test wrapper's fast group
# settings would make an idle sidecar heartbeat six times as often as a shipped one.
SHIPPED = {
    "SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "45000",
    "SIDECAR_KAFKA_HEARTBEAT_INTERVAL_MS": "3000",
    "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "300000",
    "SIDECAR_KAFKA_TOPIC_METADATA_REFRESH_INTERVAL_MS": "300000",
    "SIDECAR_STATISTICS_INTERVAL_MS": "5000",
    "SIDECAR_LOG_FORMAT": "json",
}


@dataclass(frozen=True)
class Started:
    http_ready: float  # seconds from spawn to the first answer of /healthz
    assigned: float  # seconds from spawn to GET /assignment showing the assignment


def shipped_sidecar(
    bootstrap: str,
    group: str,
    topic: str,
    data_dir: Path,
    webhook: dict[str, str] | None,
    python: str,
    extra_env: dict[str, str] | None = None,
) -> Sidecar:
    return Sidecar(
        bootstrap,
        group,
        topic,
        data_dir,
        strategy=None,
        revoke_timeout_ms=30_000,
        webhooks=[webhook] if webhook else None,
        extra_env={**SHIPPED, **(extra_env or {})},
        name=data_dir.name,
        python=python,
    )


def start_timed(sidecar: Sidecar, timeout: float = 60.0) -> Started:
    """Spawn the sidecar and time it: HTTP up, then the first assignment visible."""
    log = sidecar.log_path.open("ab")
    spawned = time.monotonic()
    sidecar.process = subprocess.Popen(
        sidecar.command,
        env=sidecar.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )
    log.close()
    deadline = spawned + timeout
    client = httpx.Client(base_url=f"http://127.0.0.1:{sidecar.port}", timeout=timeout)
    try:
        while True:
            if sidecar.process.poll() is not None:
                raise RuntimeError(f"{sidecar.name} exited:\n{sidecar.logs()}")
            try:
                client.get("/healthz", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{sidecar.name}: no HTTP within {timeout} s") from None
                time.sleep(0.005)
        http_ready = time.monotonic() - spawned
        while True:
            state = client.get("/assignment").json()
            if state["state"] == "stable":
                break
            # Long-poll: answers as soon as the assignment's sequence moves.
            client.get("/assignment", params={"after": state["sequence"], "wait": 10})
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sidecar.name}: no assignment within {timeout} s")
        return Started(http_ready, time.monotonic() - spawned)
    finally:
        client.close()


def stop(sidecar: Sidecar) -> None:
    if sidecar.process is not None and sidecar.process.poll() is None:
        sidecar.process.send_signal(signal.SIGTERM)
        try:
            sidecar.process.wait(60)
        except subprocess.TimeoutExpired:
            sidecar.process.kill()
            sidecar.process.wait(10)
    sidecar.client.close()


@dataclass(frozen=True)
class Usage:
    cpu_percent: float  # of one core, averaged over the window
    rss_max: int  # bytes, the largest sample
    rss_end: int
    uss_end: int  # memory unique to the process (what killing it would free)
    threads: int


def observe(pid: int, seconds: float) -> Usage:
    """CPU (user + system) over ``seconds`` and resident memory sampled every 0.25 s."""
    process = psutil.Process(pid)
    before = process.cpu_times()
    started = time.monotonic()
    rss_max = 0
    while True:
        rss_max = max(rss_max, process.memory_info().rss)
        left = seconds - (time.monotonic() - started)
        if left <= 0:
            break
        time.sleep(min(0.25, left))
    after = process.cpu_times()
    elapsed = time.monotonic() - started
    used = (after.user - before.user) + (after.system - before.system)
    full = process.memory_full_info()
    return Usage(100 * used / elapsed, rss_max, full.rss, full.uss, process.num_threads())


def mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
