"""The daemon's lifecycle in process: real listeners, a real member thread, no broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from sidecar.daemon import STOP_STEPS, Sidecar
from sidecar.journal import Journal
from sidecar.model import TopicPartition
from sidecar.probes import Lifecycle
from sidecar.settings import Settings
from sidecar.testkit.events import draft
from tests.support.sidecars import free_port


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
        running.request_stop()

    async def main() -> int:
        tasks: list[asyncio.Task[None]] = []
        code = await sidecar.run(
            ready=lambda s: tasks.append(asyncio.get_running_loop().create_task(probe_then_stop(s)))
        )
        await asyncio.gather(*tasks)
        return code

    before = sidecar.lifecycle
    started = time.monotonic()
    assert asyncio.run(main()) == 0
    assert time.monotonic() - started < settings.shutdown_timeout_ms / 1000
    assert seen == {"startupz": 200, "readyz": 503, "livez": 200, "admin assignment": 404}
    assert (before, sidecar.lifecycle) == (Lifecycle.CREATED, Lifecycle.STOPPED)


def test_an_unreachable_fleet_topic_does_not_hold_the_stop_past_its_deadline(
    tmp_path: Path,
) -> None:
    """The fleet producer's flush waits up to 35 s for a broker; the stop must not."""
    journal = Journal(tmp_path, durable=False)
    journal.append(draft(assignment=(TopicPartition("t", 0),)))
    journal.close()
    settings = Settings(
        bootstrap_servers=f"127.0.0.1:{free_port()}",
        group_id="g",
        topics=("t",),
        data_dir=tmp_path,
        api_port=0,
        admin_port=-1,
        events_topic="fleet",  # produced to a broker that is not there
        shutdown_timeout_ms=6_000,
    )
    sidecar = Sidecar(settings)

    async def stop_soon(running: Sidecar) -> None:
        await asyncio.sleep(1.0)  # let the fleet journal start its flush
        running.request_stop()

    async def main() -> int:
        tasks: list[asyncio.Task[None]] = []
        code = await sidecar.run(
            ready=lambda s: tasks.append(asyncio.get_running_loop().create_task(stop_soon(s)))
        )
        await asyncio.gather(*tasks)
        return code

    started = time.monotonic()
    assert asyncio.run(main()) == 0  # asyncio.run also waits for the flush's thread
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
