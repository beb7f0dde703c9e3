"""Structured Streaming from a real Kafka topic keeps the tables current."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from sidecar.analytics.generator import FleetSpec, cloud_event, write_fleet_file
from sidecar.analytics.streaming import StreamOptions, start_stream
from sidecar.analytics.tables import TABLE_NAMES
from tests.analytics.interrupting import interrupt_when
from tests.support.analytics import canonical, collect_tables, written_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

ASSIGNED = "kafka.partitions.assigned"
REVOKED = "kafka.partitions.revoked"


def event(
    type: str,
    member: str,
    second: float,
    sequence: int,
    generation: int,
    parts: list[int],
    owned: list[int],
) -> dict[str, Any]:
    return cloud_event(
        type=type,
        group_id="live",
        member_id=member,
        sequence=sequence,
        time=f"2024-01-01T00:00:{second:09.6f}Z",
        generation_id=generation,
        partitions=[("t", p) for p in parts],
        assignment=[("t", p) for p in owned],
        reason="member joined",
    )


def produce(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for item in events:
        key = str(item["data"]["group_id"]).encode()
        producer.produce(topic, key=key, value=json.dumps(item).encode())
    assert producer.flush(30) == 0


def rebalances(spark: SparkSession, output: Path) -> list[tuple[int, int, int]]:
    frame = spark.read.parquet(str(output / "rebalances")).orderBy("generation_id")
    return [(r["generation_id"], r["members"], r["partitions_moved"]) for r in frame.collect()]


def test_stream_updates_tables_as_events_arrive(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic_factory: Callable[[int], str],
    tmp_path: Path,
) -> None:
    topic = topic_factory(2)
    output = tmp_path / "out"
    first = [event(ASSIGNED, "a", 0, 1, 1, [0, 1, 2, 3], [0, 1, 2, 3])]
    produce(kafka_bootstrap, topic, first)
    options = StreamOptions(
        inputs=[f"kafka://{kafka_bootstrap}/{topic}"], output=output, trigger_seconds=1.0
    )
    query, refresher = start_stream(spark, options)
    try:
        query.processAllAvailable()
        assert rebalances(spark, output) == [(1, 1, 0)]
        assert (output / "report.html").is_file()

        second = [
            event(REVOKED, "a", 10, 2, 1, [0, 1, 2, 3], []),
            event(ASSIGNED, "a", 12, 3, 2, [0, 1], [0, 1]),
            event(ASSIGNED, "b", 12.5, 1, 2, [2, 3], [2, 3]),
        ]
        produce(kafka_bootstrap, topic, second + second[:1])  # one redelivery
        query.processAllAvailable()
        assert rebalances(spark, output) == [(1, 1, 0), (2, 2, 2)]
        members = spark.read.parquet(str(output / "members")).count()
        assert members == 2
        delivery = spark.read.parquet(str(output / "delivery")).collect()
        assert sum(r["duplicates"] for r in delivery) == 1
        assert refresher.batches >= 2
    finally:
        query.stop()
    assert query.exception() is None


def test_streamed_tables_equal_the_batch_tables(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic_factory: Callable[[int], str],
    tmp_path: Path,
) -> None:
    fleet = tmp_path / "fleet.jsonl"
    write_fleet_file(fleet, FleetSpec(groups=4, events=3000, seed=9))
    events = [json.loads(line) for line in fleet.read_text().splitlines()]
    topic = topic_factory(3)
    produce(kafka_bootstrap, topic, events[:1000])
    output = tmp_path / "out"
    options = StreamOptions(
        inputs=[f"kafka://{kafka_bootstrap}/{topic}"],
        output=output,
        trigger_seconds=1.0,
        report=False,
    )
    query, refresher = start_stream(spark, options)
    try:
        query.processAllAvailable()
        produce(kafka_bootstrap, topic, events[1000:])  # the rest arrives in later batches
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert refresher.batches >= 2
    assert sum(lag.records for lag in refresher.lags) == len(events)
    assert all(lag.lag_seconds >= 0 for lag in refresher.lags)
    expected = collect_tables(spark, fleet)
    for name in TABLE_NAMES:
        assert canonical(written_rows(spark, output, name)) == canonical(expected[name]), name


def stream_until_committed(bootstrap: str, topic: str, output: Path, batch: int) -> str:
    """Run ``analytics --stream`` as a command until its checkpoint has committed
    ``batch``, then Ctrl-C it (SIGINT to its process group, as a terminal does); its
    stderr, after checking it exited 130 with ``interrupted`` and no traceback."""
    command = [
        *(sys.executable, "-m", "sidecar.analytics", "--stream", "--trigger-seconds", "1"),
        *("-i", f"kafka://{bootstrap}/{topic}", "-o", str(output), "--no-report"),
        *("--master", "local[2]", "--driver-memory", "1g"),
    ]
    committed = output / "_checkpoint" / "commits" / str(batch)
    proc = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return interrupt_when(proc, committed.exists, "no batch committed", within=180)


def test_ctrl_c_stops_a_stream_and_a_rerun_resumes_from_its_checkpoint(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic_factory: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """Ctrl-C on ``--stream``: exit 130, ``interrupted``, and the checkpoint intact, so
    the same command again reads only what came since (from a lost checkpoint it would
    read the topic from the start again, and ``_events`` would hold the first event
    twice)."""
    topic = topic_factory(2)
    output = tmp_path / "out"
    produce(kafka_bootstrap, topic, [event(ASSIGNED, "a", 0, 1, 1, [0, 1, 2, 3], [0, 1, 2, 3])])
    stream_until_committed(kafka_bootstrap, topic, output, batch=0)
    assert rebalances(spark, output) == [(1, 1, 0)]
    second = [
        event(REVOKED, "a", 10, 2, 1, [0, 1, 2, 3], []),
        event(ASSIGNED, "a", 12, 3, 2, [0, 1], [0, 1]),
        event(ASSIGNED, "b", 12.5, 1, 2, [2, 3], [2, 3]),
    ]
    produce(kafka_bootstrap, topic, second)
    stream_until_committed(kafka_bootstrap, topic, output, batch=1)
    assert spark.read.parquet(str(output / "_events")).count() == 1 + len(second)
    assert rebalances(spark, output) == [(1, 1, 0), (2, 2, 2)]
