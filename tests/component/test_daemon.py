"""The daemon's lifecycle in process: real listeners, a real member thread, no broker."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from sidecar import daemon
from sidecar.daemon import STOP_STEPS, Sidecar
from sidecar.http_protocol import DeadlinedH11
from sidecar.journal import Journal, retention
from sidecar.model import TopicPartition
from sidecar.probes import Lifecycle
from sidecar.settings import Settings
from sidecar.settings_sources import load_settings
from sidecar.testkit.events import draft
from tests.support.sidecars import free_port


def _offline(data_dir: Path, **settings: Any) -> Settings:
    """A sidecar with no admin listener whose broker is not there: never in a group."""
    return Settings(
        bootstrap_servers=f"127.0.0.1:{free_port()}",
        group_id="g",
        topics=("t",),
        data_dir=data_dir,
        api_port=0,
        admin_port=-1,
        **settings,
    )


def _parser(protocol: object) -> tuple[str, float] | object:
    """h11 with the request deadline (``sidecar.http_protocol``), or what it is instead."""
    if isinstance(protocol, type) and issubclass(protocol, DeadlinedH11):
        return ("h11", protocol.timeout)
    return protocol


async def _run(sidecar: Sidecar, once_ready: Callable[[Sidecar], Coroutine[Any, Any, None]]) -> int:
    """Run ``sidecar`` until it stops; ``once_ready`` runs on the loop once it is ready."""
    tasks: list[asyncio.Task[None]] = []
    code = await sidecar.run(
        ready=lambda s: tasks.append(asyncio.get_running_loop().create_task(once_ready(s)))
    )
    await asyncio.gather(*tasks)
    return code


def test_the_stop_leaves_the_group_first_and_closes_http_and_the_journal_last() -> None:
    names = [step.name for step in STOP_STEPS]
    assert names[0] == "leave the group"  # revoked passes the barrier while webhooks run
    assert names.index("stop webhook deliveries") > names.index("leave the group")
    assert names.index("close the listeners") > names.index("flush the fleet topic")
    assert names[-1] == "close the journal"


def test_a_sidecar_serves_both_listeners_then_really_stops(tmp_path: Path) -> None:
    settings = Settings(
        bootstrap_servers=f"127.0.0.1:{free_port()}",  # nothing listens: no group, ever
        group_id="g",
        topics=("t",),
        data_dir=tmp_path,
        api_port=0,
        admin_host="127.0.0.1",
        admin_port=0,
        shutdown_timeout_ms=20_000,
    )
    sidecar = Sidecar(settings)
    seen: dict[str, int] = {}
    parsers: dict[str, object] = {}

    async def probe_then_stop(running: Sidecar) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            api = f"http://127.0.0.1:{running.bound_port}"
            admin = f"http://127.0.0.1:{running.admin_port}"
            for _ in range(200):  # until uvicorn serves
                try:
                    seen["startupz"] = (await client.get(f"{admin}/startupz")).status_code
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            seen["readyz"] = (await client.get(f"{admin}/readyz")).status_code
            seen["livez"] = (await client.get(f"{api}/livez")).status_code
            seen["admin assignment"] = (await client.get(f"{admin}/assignment")).status_code
        # h11 on both, also where httptools is installed (uvicorn would take it): it
        # buffers an endless request head (tests/component/test_http_bad_bodies.py).
        parsers.update(
            (lst.name, _parser(lst.server.config.http)) for lst in running._listeners if lst.server
        )
        running.request_stop()

    before = sidecar.lifecycle
    started = time.monotonic()
    assert asyncio.run(_run(sidecar, probe_then_stop)) == 0
    assert time.monotonic() - started < settings.shutdown_timeout_ms / 1000
    assert seen == {"startupz": 200, "readyz": 503, "livez": 200, "admin assignment": 404}
    assert parsers == {"api": ("h11", 10.0), "admin": ("h11", 10.0)}
    assert (before, sidecar.lifecycle) == (Lifecycle.CREATED, Lifecycle.STOPPED)


def test_an_unreachable_fleet_topic_does_not_hold_the_stop_past_its_deadline(
    tmp_path: Path,
) -> None:
    """The fleet producer's flush waits up to 35 s for a broker; the stop must not."""
    journal = Journal(tmp_path, durable=False)
    journal.append(draft(assignment=(TopicPartition("t", 0),)))
    journal.close()
    settings = _offline(
        tmp_path,
        events_topic="fleet",  # produced to a broker that is not there
        shutdown_timeout_ms=6_000,
    )
    sidecar = Sidecar(settings)

    async def stop_soon(running: Sidecar) -> None:
        await asyncio.sleep(1.0)  # let the fleet journal start its flush
        running.request_stop()

    started = time.monotonic()
    assert (
        asyncio.run(_run(sidecar, stop_soon)) == 0
    )  # asyncio.run also waits for the flush's thread
    assert time.monotonic() - started < 1.0 + settings.shutdown_timeout_ms / 1000


def test_an_admin_listener_on_every_address_takes_ipv4_and_ipv6() -> None:
    """``SIDECAR_ADMIN_HOST=::`` (the chart's ``sidecar.admin.host`` for IPv6 and dual-stack
    clusters): the kubelet probes the pod IP, IPv6 or IPv4. Dual stack is set on the socket,
    whatever the host's ``net.ipv6.bindv6only`` says."""
    import socket

    from sidecar.daemon import _bind

    listener = _bind("::", 0, "ADMIN")
    try:
        assert listener.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        port = listener.getsockname()[1]
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family, socket.SOCK_STREAM) as client:
                client.connect((address, port))
                accepted, _ = listener.accept()
                accepted.close()
    finally:
        listener.close()


def _wide_journal(data_dir: Path, events: int = 1000) -> None:
    """About 6 kB per event (an assignment of 48 partitions), all delivered."""
    wide = [TopicPartition("orders-events", p) for p in range(48)]
    built = Journal(data_dir, durable=False)
    for _ in range(events):
        built.append(draft(assignment=wide))
    built.close()


def _prune_under_budget(
    sidecar: Sidecar, budget: int, beside: Callable[[Sidecar], Coroutine[Any, Any, None]]
) -> int:
    """Run ``sidecar`` until its journal is under ``budget``, with ``beside`` running on
    the loop meanwhile; returns the used bytes then."""
    used: list[int] = []

    async def wait_then_stop(running: Sidecar) -> None:
        watcher = asyncio.get_running_loop().create_task(beside(running))
        for _ in range(200):
            if running.journal.used_bytes() <= budget:
                break
            await asyncio.sleep(0.05)
        used.append(running.journal.used_bytes())
        watcher.cancel()
        running.request_stop()

    assert asyncio.run(_run(sidecar, wait_then_stop)) == 0
    return used[0]


async def _nothing(running: Sidecar) -> None:
    return None


def test_the_daemon_prunes_the_journal_to_its_size_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIDECAR_JOURNAL_MAX_BYTES reaches the prune task: a journal of ~6 MB of delivered
    events is cut under a 1 MiB budget, and the cut is logged as count/age pruning is."""
    _wide_journal(tmp_path)
    monkeypatch.setattr(daemon, "_PRUNE_EVERY_SECONDS", 0.05)
    settings = _offline(tmp_path, journal_max_bytes=1024 * 1024)
    with capture_logs() as logs:
        used = _prune_under_budget(Sidecar(settings), 1024 * 1024, _nothing)
    assert used <= settings.journal_max_bytes
    pruned = [e for e in logs if e["event"] == "journal pruned to size"]
    assert pruned and pruned[0]["events"] > 800 and pruned[0]["max_bytes"] == 1024 * 1024


def test_a_failed_prune_round_does_not_end_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One error in a round (the database busy past its timeout, a disk error) ended the
    prune task for good without a word (a review found it): retention stopped and the
    journal grew until its volume's limit evicted the pod. The next round now prunes."""
    _wide_journal(tmp_path)
    monkeypatch.setattr(daemon, "_PRUNE_EVERY_SECONDS", 0.05)
    settings = _offline(tmp_path, journal_max_bytes=1024 * 1024)
    prune = Journal.prune
    calls = 0

    def busy_once(self: Journal, *, keep_events: int, max_age_seconds: float) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise sqlite3.OperationalError("database is locked")
        return prune(self, keep_events=keep_events, max_age_seconds=max_age_seconds)

    monkeypatch.setattr(Journal, "prune", busy_once)
    with capture_logs() as logs:
        used = _prune_under_budget(Sidecar(settings), 1024 * 1024, _nothing)
    assert used <= settings.journal_max_bytes
    failed = [e for e in logs if e["event"] == "journal pruning failed; trying again next round"]
    assert len(failed) == 1 and "database is locked" in failed[0]["error"], logs


def test_the_loop_runs_between_the_slices_of_a_size_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large first cut ran on the loop in one go (a review found it: 1 s for 300 MiB)
    while the API, the probes and the acknowledgements a revoke waits for stood still.
    Between its slices the loop now runs: a coroutine beside it sees the journal part cut."""
    _wide_journal(tmp_path)
    monkeypatch.setattr(daemon, "_PRUNE_EVERY_SECONDS", 0.05)
    monkeypatch.setattr(retention, "_SIZE_SLICE_BYTES", 256 * 1024)  # ~20 slices of 6 MB
    budget = 1024 * 1024
    seen: list[int] = []

    async def watch(running: Sidecar) -> None:
        while True:
            seen.append(running.journal.used_bytes())
            await asyncio.sleep(0)

    sidecar = Sidecar(_offline(tmp_path, journal_max_bytes=budget))
    assert _prune_under_budget(sidecar, budget, watch) <= budget
    partly = [b for b in seen if budget < b < max(seen)]
    assert partly, f"the loop ran only before and after the cut: {sorted(set(seen))}"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_bracketed_ipv6_address_is_listened_on_and_logged_as_a_url(tmp_path: Path) -> None:
    """``SIDECAR_API_HOST=[::1]`` (as URLs write it) was refused as not loopback, then
    could not be bound; the start-up line said ``http://::1:port``."""
    settings = load_settings(
        {
            "SIDECAR_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "SIDECAR_GROUP_ID": "g",
            "SIDECAR_TOPICS": "t",
            "SIDECAR_DATA_DIR": str(tmp_path),
            "SIDECAR_API_HOST": "[::1]",
            "SIDECAR_API_PORT": "0",
            "SIDECAR_ADMIN_PORT": "-1",
        }
    )
    seen: list[int] = []

    async def probe_then_stop(running: Sidecar) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            seen.append((await client.get(f"http://[::1]:{running.bound_port}/livez")).status_code)
        running.request_stop()

    sidecar = Sidecar(settings)
    with capture_logs() as logs:
        assert asyncio.run(_run(sidecar, probe_then_stop)) == 0
    assert seen == [200]
    (started,) = [e for e in logs if e["event"] == "sidecar started"]
    assert started["api"].startswith("http://[::1]:"), started


def test_listener_urls_write_ipv6_as_urls_do() -> None:
    assert daemon._url("127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert daemon._url("::1", 8080) == "http://[::1]:8080"
    assert daemon._url("fe80::1%eth0", 8080) == "http://[fe80::1%25eth0]:8080"  # RFC 6874
