"""Lag reads while the broker is paused: no 500, no exception left unretrieved.

A paused broker makes the AdminClient's futures time out. Every read must still answer
(figures marked unavailable), the metrics keep their last values, and the sidecar's log
must never show "Future exception was never retrieved" (what failed a CI run once).
This test pauses a broker, so it runs its own (not the session's shared one).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.positions import READ_TIMEOUT_SECONDS
from tests.support.kafka import create_topic, unique
from tests.support.private_broker import PrivateBroker
from tests.support.sidecars import Sidecar, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

NEVER = ("exception was never retrieved", "Exception in callback")


@pytest.fixture
def paused_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    broker = PrivateBroker(tmp_path_factory.mktemp("broker"))
    broker.run("start")
    try:
        yield broker
    finally:
        broker.run("resume")
        broker.run("stop")


def test_lag_reads_during_a_broker_pause_leak_no_exception(
    paused_broker: PrivateBroker, tmp_path: Path
) -> None:
    topic = create_topic(paused_broker.bootstrap, 2)
    sidecar = Sidecar(
        paused_broker.bootstrap,
        unique("group"),
        topic,
        tmp_path / "s",
        token="t",
        # The member keeps its partitions through the pause, so the reads of its own
        # positions (and the scrape's refreshes, which nobody awaits) meet the timeouts.
        extra_env={
            "SIDECAR_KAFKA_SESSION_TIMEOUT_MS": "180000",
            "SIDECAR_KAFKA_MAX_POLL_INTERVAL_MS": "300000",
        },
    ).start()
    try:
        sidecar.wait_stable()
        # A lag needs a committed offset (none: "-", as kafka-consumer-groups prints it).
        offsets = [{"topic": t, "partition": p, "offset": 0} for t, p in sidecar.partitions()]
        committed = sidecar.client.post(
            "/commit", json={"offsets": offsets}, headers=sidecar.headers()
        )
        assert committed.status_code == 200, committed.text
        first = sidecar.client.get("/assignment", params={"offsets": "true"}).json()
        assert first["positions"]["available"], first
        wait_until(
            lambda: "rebalance_sidecar_partition_lag{" in sidecar.client.get("/metrics").text,
            60,
            "lag series while Kafka answers",
        )
        paused_broker.run("pause")
        try:
            # Many reads while nothing answers: each answers, figures unavailable or a cache
            # hit, never an error; reads overlap their own timeouts on purpose, and the
            # scrapes start reads that no request awaits. (Not /group: its DescribeGroups
            # under a pause aborted the process inside librdkafka: docs/observability.md.)
            unavailable = 0
            deadline = time.monotonic() + 150
            while unavailable < 3 and time.monotonic() < deadline:
                for path in ("/metrics", "wait", "/assignment?offsets=true", "/metrics"):
                    if path == "wait":
                        # Past a read's deadline: the scrape's read ends with no request
                        # awaiting it (the case that leaked an exception before).
                        time.sleep(READ_TIMEOUT_SECONDS + 1.5)
                        continue
                    response = sidecar.client.get(path, timeout=60)
                    assert response.status_code in (200, 503), (path, response.text)
                    if path.startswith("/assignment"):
                        positions = response.json()["positions"]
                        assert positions["partitions"], "the member lost its partitions"
                        if not positions["available"]:
                            unavailable += 1
                            assert all(p["lag"] is None for p in positions["partitions"])
                            assert positions["error"]
                    elif path == "/metrics":  # the last values stay while Kafka is away
                        assert "rebalance_sidecar_partition_lag{" in response.text
            assert unavailable >= 3, "the reads never noticed the pause"
        finally:
            paused_broker.run("resume")
        wait_until(
            lambda: sidecar.client.get("/assignment", params={"offsets": "true"}).json()[
                "positions"
            ]["available"],
            120,
            "positions read again after the pause",
        )
    finally:
        sidecar.stop()
    time.sleep(1)
    log = sidecar.log_path.read_text(errors="replace")
    for line in NEVER:
        assert line not in log, log[-6000:]
