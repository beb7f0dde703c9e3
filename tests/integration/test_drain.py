"""`POST /drain`, the pod's preStop: the app gets `revoked` while it still runs (issue 5)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sidecar.subscriptions import new_secret
from tests.support.kafka import committed
from tests.support.network import non_loopback_address
from tests.support.receiver import running
from tests.support.sidecars import Sidecar, covers, wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 6


def test_drain_delivers_revoked_to_the_app_then_peers_take_over(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
) -> None:
    topic = topic_factory(PARTITIONS)
    secret = new_secret()

    def flush_and_hand_back(event: dict[str, Any]) -> tuple[int, Any, float]:
        if not event["type"].endswith("revoked") or event["data"]["reason"] != "drain requested":
            return 204, None, 0.0
        offsets = [
            {"topic": p["topic"], "partition": p["partition"], "offset": 77}
            for p in event["data"]["partitions"]
        ]
        return 200, {"offsets": offsets}, 0.5  # the app takes a moment to flush

    with running(secret, flush_and_hand_back) as app:
        draining = sidecar_factory(
            group_id,
            topic,
            token="pod-token",
            webhooks=[{"url": app.url, "secret": secret, "mode": "blocking"}],
        )
        peers = [sidecar_factory(group_id, topic) for _ in range(2)]
        everyone = [draining, *peers]
        wait_until(lambda: covers(everyone, topic, PARTITIONS), 60, "all partitions covered")
        held = draining.partitions()
        assert held

        assert draining.client.post("/drain").status_code == 401
        answers: list[httpx.Response] = []

        def drain() -> None:  # classic sidecars: app preStop and sidecar preStop both drain
            answers.append(
                draining.client.post("/drain", headers=draining.headers(), params={"deadline": 30})
            )

        callers = [threading.Thread(target=drain) for _ in range(2)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(60)
        assert [a.status_code for a in answers] == [200, 200]
        assert answers[0].json()["drained"] is True

        # By the time /drain answered, the app had acknowledged its revocation ...
        revoked = app.events("kafka.partitions.revoked")
        assert revoked and revoked[-1].partitions == held
        # ... and the offsets it handed back were committed by the member that owned them.
        assert committed(kafka_bootstrap, group_id, topic, PARTITIONS) == {p: 77 for _, p in held}

        assert draining.assignment()["state"] == "stopped"
        assert draining.client.get("/readyz").status_code == 503
        assert draining.client.get("/healthz").status_code == 200  # no restart wanted
        wait_until(lambda: covers(peers, topic, PARTITIONS), 60, "peers cover everything")

        assert draining.terminate(timeout=30) == 0  # and the pod's SIGTERM is quick now


def test_a_drain_that_no_stop_follows_fails_liveness_so_the_sidecar_rejoins(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    """In Kubernetes the app container's ``preStop`` drains the sidecar whenever the app
    container stops, also when only the app restarts (its own liveness probe failed): no
    SIGTERM follows for the sidecar. ``drained_restart_after_ms`` after the drain ended,
    liveness fails, the kubelet restarts the sidecar, and it is back in the group; before,
    it stayed drained, live and unready for good. The time counts from the drain's end: a
    drain that takes longer (an app slow to flush) is never cut short."""
    topic = topic_factory(PARTITIONS)
    secret = new_secret()

    def slow_to_flush(event: dict[str, Any]) -> tuple[int, Any, float]:
        return 204, None, 5.0 if event["type"].endswith("revoked") else 0.0

    with running(secret, slow_to_flush) as app:
        drained = sidecar_factory(
            group_id,
            topic,
            token="pod-token",
            webhooks=[{"url": app.url, "secret": secret, "mode": "blocking"}],
            extra_env={"SIDECAR_DRAINED_RESTART_AFTER_MS": "2000"},
        )
        peer = sidecar_factory(group_id, topic)
        wait_until(lambda: covers([drained, peer], topic, PARTITIONS), 60, "both stable")

        during: list[int] = []
        answers: list[httpx.Response] = []
        drain = threading.Thread(
            target=lambda: answers.append(
                drained.client.post("/drain", headers=drained.headers(), params={"deadline": 30})
            )
        )
        drain.start()
        while drain.is_alive():  # 5 s of revoke handling, longer than the 2 s allowed
            during.append(drained.admin.get("/livez").status_code)
            time.sleep(0.25)
        drain.join()
        assert [a.status_code for a in answers] == [200], answers[0].text
        assert len(during) >= 10 and set(during) == {200}, during  # never during the drain
        assert drained.assignment()["state"] == "stopped"
        assert drained.admin.get("/readyz").status_code == 503
        wait_until(lambda: covers([peer], topic, PARTITIONS), 60, "the peer covers everything")

        wait_until(lambda: drained.admin.get("/livez").status_code == 503, 15, "liveness fails")
        failed = drained.admin.get("/livez")
        assert "restart to rejoin the group" in failed.text, failed.text
        assert drained.admin.get("/readyz").status_code == 503

        assert drained.terminate(timeout=30) == 0  # what the kubelet does on a failed liveness
        drained.start()
        wait_until(lambda: covers([drained, peer], topic, PARTITIONS), 60, "both stable again")
        assert drained.partitions()
        assert drained.admin.get("/livez").status_code == 200
        wait_until(lambda: drained.admin.get("/readyz").status_code == 200, 30, "ready again")
        drained.stop()  # while its app answers: after, its last revoke waits out the timeout


DRAIN_TOKEN = "kubelet-drain-token"


def test_the_kubelet_drains_through_the_admin_listener_with_the_drain_token(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    """As ``preStop: httpGet`` does it: a plain GET from off the pod, with one header."""
    address = non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to call from")
    topic = topic_factory(PARTITIONS)
    secret = new_secret()

    def slow_to_flush(event: dict[str, Any]) -> tuple[int, Any, float]:
        return 204, None, 1.0 if event["type"].endswith("revoked") else 0.0

    with running(secret, slow_to_flush) as app:
        draining = sidecar_factory(
            group_id,
            topic,
            webhooks=[{"url": app.url, "secret": secret, "mode": "blocking"}],
            extra_env={"SIDECAR_ADMIN_HOST": address, "SIDECAR_DRAIN_TOKEN": DRAIN_TOKEN},
        )
        peer = sidecar_factory(group_id, topic)
        wait_until(lambda: covers([draining, peer], topic, PARTITIONS), 60, "both stable")
        held = draining.partitions()
        assert str(draining.admin.base_url).startswith(f"http://{address}:")

        for headers in ({}, {"X-Drain-Token": "wrong"}, {"Authorization": f"Bearer {DRAIN_TOKEN}"}):
            for method in ("GET", "POST"):
                refused = draining.admin.request(method, "/drain", headers=headers)
                assert refused.status_code == 401, (method, headers, refused.text)
                assert "X-Drain-Token" in refused.json()["error"]
        assert draining.assignment()["state"] == "stable"  # refused calls changed nothing

        answer = draining.admin.get("/drain", headers={"X-Drain-Token": DRAIN_TOKEN})
        assert answer.status_code == 200, answer.text
        assert answer.json()["drained"] is True
        assert answer.json()["assignment"]["state"] == "stopped"
        assert answer.json()["assignment"]["partitions"] == []
        # It answered only after the app had handled (and answered) its revocation.
        revoked = app.events("kafka.partitions.revoked")
        assert revoked and revoked[-1].partitions == held
        assert revoked[-1].answered_at <= time.time()
        assert draining.admin.get("/readyz").status_code == 503
        assert draining.admin.get("/livez").status_code == 200
        wait_until(lambda: covers([peer], topic, PARTITIONS), 60, "the peer covers everything")


def test_without_a_drain_token_only_loopback_callers_may_drain(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to call from")
    topic = topic_factory(2)
    sidecar = sidecar_factory(group_id, topic, extra_env={"SIDECAR_ADMIN_HOST": "0.0.0.0"})
    sidecar.wait_stable()
    remote = httpx.Client(base_url=f"http://{address}:{sidecar.admin_port}", timeout=60)
    with remote:
        for method in ("GET", "POST"):
            refused = remote.request(method, "/drain")
            assert refused.status_code == 403, refused.text
            assert "loopback" in refused.json()["error"]
        assert remote.get("/readyz").status_code == 200  # the probes are for everyone
    # A browser on this machine is loopback too, but a cross-site page must not drain.
    for browser in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}):
        refused = sidecar.admin.get("/drain", headers=browser)
        assert refused.status_code == 403, (browser, refused.text)
    assert sidecar.assignment()["state"] == "stable"

    drained = sidecar.admin.post("/drain")
    assert drained.status_code == 200, drained.text
    assert drained.json()["assignment"]["state"] == "stopped"
