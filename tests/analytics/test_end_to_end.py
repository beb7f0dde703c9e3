"""Real sidecars -> the fleet topic -> the Spark job reading it with spark-sql-kafka.

The tables must describe what the test did: how many rebalances, which members, how many
partitions changed hands. The expected figures are computed from the sidecars' own
journals (what each member was told), independently of the Spark code.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from pyspark.sql import SparkSession

from sidecar.analytics.job import run_batch
from tests.support.sidecars import Sidecar, covers, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 6


def fleet_size(bootstrap: str, topic: str, group: str) -> int:
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    reader.subscribe([topic])
    ids: set[bytes] = set()
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 3:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            ids.add(message.value() or b"")
            quiet_since = time.monotonic()
    reader.close()
    return len(ids)


def expected(journals: list[list[dict[str, Any]]]) -> tuple[set[int], set[str], int]:
    """Generations assigned, member identities, and partitions that changed owner."""
    owner_at: dict[int, dict[int, str]] = defaultdict(dict)
    members: set[str] = set()
    for events in journals:
        for event in events:
            data = event["data"]
            member = data["group_instance_id"] or data["member_id"]
            members.add(member)
            if event["type"] == "kafka.partitions.assigned":
                for p in data["assignment"]:
                    owner_at[data["generation_id"]][p["partition"]] = member
    moved = 0
    last_owner: dict[int, str] = {}
    for generation in sorted(owner_at):
        for partition, member in owner_at[generation].items():
            if partition in last_owner and last_owner[partition] != member:
                moved += 1
            last_owner[partition] = member
    return set(owner_at), members, moved


def test_tables_describe_what_the_sidecars_did(
    spark: SparkSession,
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    topic = topic_factory(PARTITIONS)
    fleet = topic_factory(1)
    env = {"SIDECAR_EVENTS_TOPIC": fleet}
    sidecars = [sidecar_factory(group_id, topic, extra_env=env) for _ in range(2)]
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "two cover everything")
    sidecars.append(sidecar_factory(group_id, topic, extra_env=env))  # a member joins
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "three cover everything")
    for enforcer in sidecars[:2]:  # two enforced rebalances, with a reason
        response = enforcer.client.post(
            "/enforce-rebalance", params={"wait": 30}, json={"reason": "e2e"}
        )
        assert response.status_code == 200
        wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "stable again")
    leaving = sidecars.pop()
    assert leaving.process is not None
    leaving.process.send_signal(signal.SIGTERM)  # a member leaves
    assert leaving.process.wait(60) == 0
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "two cover everything")

    journals = [s.history() for s in sidecars]
    journals.append([e.cloudevent for e in _journal(leaving)])
    total = sum(len(j) for j in journals)
    wait_until(
        lambda: fleet_size(kafka_bootstrap, fleet, f"{group_id}-count") >= total,
        60,
        "every event in the fleet topic",
    )
    generations, members, moved = expected(journals)

    result = run_batch(spark, [f"kafka://{kafka_bootstrap}/{fleet}"], tmp_path / "out")

    rebalances = [
        r.asDict()
        for r in spark.read.parquet(str(tmp_path / "out" / "rebalances"))
        .where(f"group_id = '{group_id}'")
        .collect()
    ]
    assert {r["generation_id"] for r in rebalances} >= generations - {min(generations)}
    assert sum(r["partitions_moved"] for r in rebalances) == moved
    assert moved > 0
    assert all(r["duration_seconds"] is None or r["duration_seconds"] >= 0 for r in rebalances)
    assert any(r["reason"] == "e2e" for r in rebalances)
    table_members = {
        r["member"]
        for r in spark.read.parquet(str(tmp_path / "out" / "members"))
        .where(f"group_id = '{group_id}'")
        .collect()
    }
    assert table_members == members
    assert result.report is not None and result.report.exists()


def _journal(sidecar: Sidecar) -> list[Any]:
    from sidecar.journal import Journal

    journal = Journal(sidecar.data_dir, durable=False)
    try:
        return journal.events_after(0, 10_000)
    finally:
        journal.close()


def test_streaming_updates_the_tables_while_sidecars_run(
    spark: SparkSession,
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    from sidecar.analytics.streaming import StreamOptions, start_stream

    topic = topic_factory(PARTITIONS)
    fleet = topic_factory(1)
    env = {"SIDECAR_EVENTS_TOPIC": fleet}
    sidecars = [sidecar_factory(group_id, topic, extra_env=env) for _ in range(2)]
    wait_until(lambda: covers(sidecars, topic, PARTITIONS), 60, "two cover everything")
    output = tmp_path / "live"

    def generations() -> set[int]:
        query.processAllAvailable()
        if not (output / "rebalances").exists():
            return set()
        frame = spark.read.parquet(str(output / "rebalances")).where(f"group_id = '{group_id}'")
        return {r["generation_id"] for r in frame.collect()}

    query, _ = start_stream(
        spark,
        StreamOptions(
            inputs=[f"kafka://{kafka_bootstrap}/{fleet}"], output=output, trigger_seconds=1.0
        ),
    )
    try:
        wait_until(lambda: bool(generations()), 60, "the first tables")
        before = max(generations())
        response = sidecars[0].client.post("/enforce-rebalance", params={"wait": 30})
        assert response.status_code == 200  # while the stream runs
        after = response.json()["generation_id"]
        assert after > before
        wait_until(lambda: after in generations(), 60, "the new generation in the tables")
    finally:
        query.stop()
    assert query.exception() is None
