"""A commit inside a rebalance callback while the coordinator stalls (issue 41.2).

The offsets a blocking subscriber hands back on ``revoked`` are committed inside the
revoke callback. librdkafka's synchronous commit has no timeout of its own: with the
coordinator stalled (the broker paused, as a long GC pause would), the member's own
``partitions_revoked_callback_seconds`` recorded the whole stall (40 s with a revoke
timeout and a commit timeout of 10 s each). The callback must hold the group no longer
than the revoke timeout plus ``SIDECAR_COMMIT_TIMEOUT_MS``, whatever the coordinator does,
and the subscriber's delivery log must say the commit's outcome is unknown.

This test pauses a broker, so it runs its own (never the session's shared one).
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.subscriptions import new_secret
from tests.support.kafka import create_topic, unique
from tests.support.private_broker import PrivateBroker
from tests.support.receiver import running
from tests.support.sidecars import Sidecar, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
# Room for the application to pause the broker (a subprocess) before it answers.
REVOKE_TIMEOUT_MS = 10_000
COMMIT_TIMEOUT_MS = 2_000
# How long the test keeps the coordinator stalled at most: far past the bound (12 s), so
# a callback that waits for the coordinator shows it (the test resumes the broker as soon
# as the delivery log says the outcome is unknown).
STALL_SECONDS = 45.0
# The callback's bound (12 s) plus room for a loaded machine: the "30" bucket. Before the
# fix it held the whole stall (45 s and more), the "60" one.
WITHIN_BUCKET = "30.0"


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    data_dir = tmp_path_factory.mktemp("stalled-broker")
    broker = PrivateBroker(data_dir)
    broker.run("start")
    try:
        yield broker
    finally:
        if broker.paused:
            broker.run("resume")
        broker.run("stop")
        shutil.rmtree(data_dir, ignore_errors=True)


def bucket(metrics: str, name: str, le: str) -> float:
    found = re.search(rf'^{name}_bucket{{le="{re.escape(le)}"}} (\S+)$', metrics, re.M)
    assert found, f"{name} le={le} not in the metrics"
    return float(found.group(1))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_handed_back_commit_is_bounded_while_the_coordinator_stalls(
    protocol: str, private_broker: PrivateBroker, tmp_path: Path
) -> None:
    topic = create_topic(private_broker.bootstrap, PARTITIONS)
    group = unique("group")
    secret = new_secret()
    stalled = threading.Event()

    def respond(event: dict[str, Any]) -> tuple[int, Any, float]:
        if not event["type"].endswith("revoked"):
            return 204, None, 0.0
        if not stalled.is_set():
            stalled.set()
            private_broker.run("pause")  # the coordinator stalls before the commit
        revoked = event["data"]["partitions"]  # all of them (eager), or some (KIP-848)
        offsets = [{"topic": p["topic"], "partition": p["partition"], "offset": 3} for p in revoked]
        return 200, {"offsets": offsets}, 0.0

    options: dict[str, Any] = (
        {"protocol": "classic"}
        if protocol == "classic"
        else {"protocol": "consumer", "strategy": None}
    )
    env = {"SIDECAR_COMMIT_TIMEOUT_MS": str(COMMIT_TIMEOUT_MS)}
    started: list[Sidecar] = []
    try:
        with running(secret, respond) as app:
            member = Sidecar(
                private_broker.bootstrap,
                group,
                topic,
                tmp_path / "member",
                name="member",
                revoke_timeout_ms=REVOKE_TIMEOUT_MS,
                webhooks=[{"url": app.url, "secret": secret, "mode": "blocking"}],
                extra_env=env,
                **options,
            )
            started.append(member.start())
            member.wait_stable()
            webhook = member.client.get("/webhooks").json()[0]["id"]
            # A second member takes some partitions: the first one's revoke comes.
            peer = Sidecar(
                private_broker.bootstrap, group, topic, tmp_path / "peer", name="peer", **options
            )
            started.append(peer.start())
            wait_until(stalled.is_set, 90, "a revoke while the coordinator stalls")

            def outcomes() -> set[str]:
                log = member.client.get(f"/webhooks/{webhook}/deliveries").json()
                return {d["outcome"] for d in log}

            deadline = time.monotonic() + STALL_SECONDS
            while time.monotonic() < deadline and "commit_unknown" not in outcomes():
                time.sleep(0.5)  # polls the delivery log; the stall ends at the deadline
            private_broker.run("resume")
            assert "commit_unknown" in outcomes()
            log = member.client.get(f"/webhooks/{webhook}/deliveries").json()
            unknown = [d for d in log if d["outcome"] == "commit_unknown"]
            assert "outcome of the commit is unknown" in unknown[0]["error"]
            wait_until(
                lambda: (member.partitions() | peer.partitions()) == {(topic, p) for p in range(4)},
                120,
                "the group stable again",
            )
            metrics = member.client.get("/metrics").text
            name = "rebalance_sidecar_partitions_revoked_callback_seconds"
            count = bucket(metrics, name, "+Inf")
            assert count >= 1
            # Every revoke callback ended within the bound (plus room), none held the stall.
            assert bucket(metrics, name, WITHIN_BUCKET) == count, metrics
            assert 'rebalance_sidecar_commits_total{outcome="unknown",source="revoke"}' in metrics
    finally:
        if private_broker.paused:
            private_broker.run("resume")
        for sidecar in started:
            sidecar.stop()
            print(f"---- {sidecar.name} ----\n{sidecar.logs()[-4000:]}")
