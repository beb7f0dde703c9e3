"""Two listeners and the probes (issue 12.1, 12.2), on a real broker.

The admin listener serves only probes, metrics and the drain; the control API stays on
loopback unless it has a token. Readiness, once the member joined, stays 200 through a
rebalance held by a slow application and through a broker pause: with native sidecars a
group-wide rebalance must not take every pod out of its Service.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.support.apps import app_with_sidecar
from tests.support.kafka import KAFKA_SH
from tests.support.network import non_loopback_address
from tests.support.receiver import slow_revoke
from tests.support.sidecars import Sidecar, covers, free_port, wait_until

pytestmark = pytest.mark.kafka

PROBES = ("/livez", "/healthz", "/startupz", "/readyz")
TOKEN = "listener-token"


def test_the_admin_listener_serves_only_probes_metrics_and_drain(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    sidecar = sidecar_factory(group_id, topic_factory(2))
    sidecar.wait_stable()
    for path in PROBES:
        answer = sidecar.admin.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.json()["ok"] is True
        assert sidecar.client.get(path).status_code == 200, path  # and on the control API
    scraped = sidecar.admin.get("/metrics")
    assert scraped.status_code == 200
    assert "rebalance_sidecar_assigned_partitions 2.0" in scraped.text
    for method, path in [
        ("GET", "/assignment"),
        ("GET", "/webhooks"),
        ("GET", "/events"),
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("POST", "/enforce-rebalance"),
        ("POST", "/commit"),
        ("POST", "/webhooks"),
    ]:
        answer = sidecar.admin.request(method, path, json={})
        assert answer.status_code in (404, 405), (method, path, answer.status_code)
        assert "error" in answer.json()
    assert sidecar.client.get("/assignment").json()["state"] == "stable"


def test_the_control_api_is_not_on_the_network_without_a_token(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to test from")
    topic = topic_factory(2)
    local = sidecar_factory(group_id, topic)
    local.wait_stable()
    with pytest.raises(httpx.ConnectError):  # bound to 127.0.0.1 only: nothing there
        httpx.get(f"http://{address}:{local.port}/assignment", timeout=5)

    exposed = sidecar_factory(group_id, topic, token=TOKEN, extra_env={"SIDECAR_API_HOST": address})
    wait_until(lambda: covers([local, exposed], topic, 2), 60, "both members stable")
    assert exposed.client.get("/assignment").status_code == 200  # reads need no token
    refused = exposed.client.post("/enforce-rebalance", json={"reason": "from the network"})
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    allowed = exposed.client.post(
        "/enforce-rebalance", json={"reason": "with the token"}, headers=exposed.headers()
    )
    assert allowed.status_code == 202, allowed.text


def test_not_ready_before_joining_but_live_and_started(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """No broker at all: live and started (a restart would not help), not ready yet."""
    unreachable = f"127.0.0.1:{free_port()}"
    waiting = Sidecar(unreachable, "nobody", "t", tmp_path_factory.mktemp("w")).start()
    eager = Sidecar(
        unreachable,
        "nobody",
        "t",
        tmp_path_factory.mktemp("e"),
        extra_env={"SIDECAR_READY_WITHOUT_GROUP": "true"},
    ).start()
    try:
        for sidecar in (waiting, eager):
            assert sidecar.admin.get("/livez").status_code == 200
            assert sidecar.admin.get("/startupz").status_code == 200
        not_ready = waiting.admin.get("/readyz")
        assert not_ready.status_code == 503
        assert "not joined the group yet" in not_ready.json()["reason"]
        assert eager.admin.get("/readyz").status_code == 200
        assert waiting.assignment()["state"] in ("starting", "joining")
    finally:
        waiting.stop()
        eager.stop()


class ReadinessWatch:
    """Polls ``/readyz`` (admin listener) and ``/assignment`` of every member meanwhile."""

    def __init__(self, sidecars: list[Sidecar]) -> None:
        self.sidecars = sidecars
        self.answers: list[tuple[str, int]] = []
        self.states: set[str] = set()
        self.disconnected = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ReadinessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(30)

    def _poll(self) -> None:
        while not self._done.is_set():
            for sidecar in self.sidecars:
                ready = sidecar.admin.get("/readyz", timeout=10)
                self.answers.append((sidecar.name, ready.status_code))
                state = sidecar.assignment()
                self.states.add(state["state"])
                self.disconnected |= not state["connected"]
            time.sleep(0.1)


def test_ready_on_every_member_through_a_rebalance_held_by_the_app(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(4)
    with app_with_sidecar(sidecar_factory, group_id, topic, slow_revoke(3.0)) as (app, held):
        peer = sidecar_factory(group_id, topic)
        members = [held, peer]
        wait_until(lambda: covers(members, topic, 4), 60, "both members stable")
        before = held.assignment()["generation_id"]
        with ReadinessWatch(members) as watch:
            enforced = peer.client.post("/enforce-rebalance", params={"wait": 60})
            assert enforced.status_code == 200, enforced.text
        assert enforced.json()["generation_id"] > before
        assert "rebalancing" in watch.states  # the rebalance was really under way ...
        assert len(watch.answers) >= 10
        assert {status for _, status in watch.answers} == {200}  # ... and all stayed ready
        revoked = app.events("kafka.partitions.revoked")
        assert revoked and revoked[-1].answered_at - revoked[-1].received_at >= 3.0


@pytest.mark.slow
def test_ready_on_every_member_through_a_broker_pause(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    topic = topic_factory(4)
    members = [sidecar_factory(group_id, topic) for _ in range(2)]
    wait_until(lambda: covers(members, topic, 4), 60, "both members stable")
    paused = _broker(kafka_bootstrap, "pause")
    try:
        with ReadinessWatch(members) as watch:
            time.sleep(5.0)  # the outage being survived, not a wait for a result
    finally:
        _broker(kafka_bootstrap, "resume")
    assert paused
    assert {status for _, status in watch.answers} == {200}
    for member in members:
        assert member.admin.get("/livez").status_code == 200
    wait_until(lambda: covers(members, topic, 4), 90, "the group stable again")


def _broker(bootstrap: str, command: str) -> bool:
    port = bootstrap.rsplit(":", 1)[1]
    done = subprocess.run(
        [str(KAFKA_SH), command],
        env={**_environ(), "KAFKA_PORT": port},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return True


def _environ() -> dict[str, str]:
    return dict(os.environ)
