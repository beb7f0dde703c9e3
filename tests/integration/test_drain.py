"""`POST /drain`, the pod's preStop: the app gets `revoked` while it still runs (issue 5)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sidecar.subscriptions import new_secret
from tests.support.kafka import committed
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
