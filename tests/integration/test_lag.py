"""Lag per owned partition against a real broker, checked against Kafka's own CLI.

The group has a sidecar and a Java console consumer from the broker's jars (which
consumes and commits its partitions); the sidecar's partitions get offsets committed
through ``POST /commit``. ``/assignment?offsets=true``, ``/group`` and the Prometheus
series must say what ``kafka-consumer-groups --describe`` says in its LAG column.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.java_members import consumer_groups_cli, java_consumer
from tests.support.sidecars import Sidecar, wait_until

pytestmark = pytest.mark.kafka
__all__ = ["java_consumer"]  # a fixture

PARTITIONS = 4


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in counts.items():
        for n in range(count):
            producer.produce(topic, value=f"m{n}".encode(), partition=partition)
    assert producer.flush(60) == 0


def cli_lag(bootstrap: str, group: str) -> dict[tuple[str, int], int | None]:
    rows = consumer_groups_cli(bootstrap, "--describe", "--group", group)
    return {
        (r["TOPIC"], int(r["PARTITION"])): None if r["LAG"] == "-" else int(r["LAG"]) for r in rows
    }


def test_lag_is_what_kafka_consumer_groups_says(
    kafka_bootstrap: str,
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    java_consumer: Callable[[str, str, str, str, str], None],
) -> None:
    topic = topic_factory(PARTITIONS)
    produce(kafka_bootstrap, topic, {p: 5 + 3 * p for p in range(PARTITIONS)})
    sidecar = sidecar_factory(group_id, topic, token="t")
    java_consumer(kafka_bootstrap, group_id, topic, "java-console", "classic")

    def shared() -> bool:
        members = sidecar.client.get("/group").json().get("members", [])
        return len(members) == 2 and 0 < len(sidecar.partitions()) < PARTITIONS

    wait_until(shared, 120, "the sidecar and the Java consumer sharing the partitions")
    sidecar.wait_stable()
    mine = sorted(sidecar.partitions())
    offsets = [{"topic": t, "partition": p, "offset": 1 + p} for t, p in mine]
    response = sidecar.client.post("/commit", json={"offsets": offsets}, headers=sidecar.headers())
    assert response.status_code == 200, response.text

    # The Java consumer commits as it goes and a rebalance may slip in: compare until a
    # read of ours and one of the CLI's agree.
    ours: dict[tuple[str, int], int | None] = {}
    cli: dict[tuple[str, int], int | None] = {}
    body: dict[str, Any] = {}

    def agree() -> bool:
        nonlocal ours, cli, body
        cli = cli_lag(kafka_bootstrap, group_id)
        body = sidecar.client.get("/assignment", params={"offsets": "true"}).json()
        group = sidecar.client.get("/group").json()
        ours = {(p["topic"], p["partition"]): p["lag"] for p in group["partitions"]}
        owned = {(p["topic"], p["partition"]): p["lag"] for p in body["positions"]["partitions"]}
        return (
            body["positions"]["available"]
            and group["positions_available"]
            and ours == cli
            and all(cli[tp] == lag for tp, lag in owned.items())
            and len(owned) == len(mine)
        )

    wait_until(agree, 120, f"the same lag as kafka-consumer-groups: {ours} vs {cli}")
    for t, p in mine:
        assert ours[(t, p)] == (5 + 3 * p) - (1 + p)  # what was produced, less what committed
    assert [p["committed"] for p in body["positions"]["partitions"]] == [1 + p for _, p in mine]

    # Prometheus: one lag series per partition this member owns, and only those.
    def scraped() -> dict[tuple[str, int], float]:
        found = {}
        for line in sidecar.client.get("/metrics").text.splitlines():
            if line.startswith("rebalance_sidecar_partition_lag{"):
                labels, value = line.rsplit(" ", 1)
                partition = int(labels.split('partition="')[1].split('"')[0])
                found[(topic, partition)] = float(value)
        return found

    wait_until(lambda: set(scraped()) == set(mine), 60, "a lag series per owned partition")
    assert scraped() == {tp: float(ours[tp] or 0) for tp in mine}
    rebalances = sidecar.client.get("/group").json()["rebalances"]
    assert rebalances["in_window"] >= 1 and rebalances["window_seconds"] == 600
    assert rebalances["flapping"] is False  # at most a few rebalances: not more than 5
    text = sidecar.client.get("/metrics").text
    assert f'rebalance_sidecar_rebalances_last_hour{{group="{group_id}"}}' in text
    assert f'rebalance_sidecar_seconds_since_last_rebalance{{group="{group_id}"}}' in text
