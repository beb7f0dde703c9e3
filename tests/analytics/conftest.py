"""Spark for the analytics tests: one local[2] session for the whole test session.

Kafka tests (``@pytest.mark.kafka``) need the spark-sql-kafka jars on the session's
classpath from the start, so when any is collected the fixture resolves them first
with scripts/spark-jars.sh (cached under .cache/spark-jars after the first run).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sidecar.analytics.generator import write_events
from sidecar.analytics.session import REPO_ROOT, build_session, jar_paths
from tests.support.analytics import TableRows, collect_tables

TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
}


def _kafka_jars() -> list[str]:
    script = REPO_ROOT / "scripts" / "spark-jars.sh"
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/spark-jars.sh failed:\n{done.stderr[-3000:]}")
    jars = jar_paths(Path(done.stdout.strip().splitlines()[-1]))
    if not jars:
        raise RuntimeError("scripts/spark-jars.sh resolved no jars")
    return jars


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    needs_kafka = any(item.get_closest_marker("kafka") for item in request.session.items)
    session = build_session(
        master="local[2]",
        app_name="rebalance-analytics-tests",
        jars=_kafka_jars() if needs_kafka else [],
        driver_memory="1g",
        conf=TEST_CONF,
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def no_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a Spark session (a local one, or spark-submit's) fails the test."""
    from sidecar.analytics import session

    def refuse(*args: object, **kwargs: object) -> SparkSession:
        raise AssertionError("a Spark session was started for arguments known to be bad")

    monkeypatch.setattr(session, "build_session", refuse)
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)


@pytest.fixture(scope="session")
def tables_of(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[list[dict[str, Any]]], TableRows]:
    """Build the tables of a hand-made event list (written as JSONL first)."""
    directory = tmp_path_factory.mktemp("events")
    counter = iter(range(1_000_000))

    def build(events: list[dict[str, Any]]) -> TableRows:
        path = write_events(directory / f"events-{next(counter)}.jsonl", events)
        return collect_tables(spark, path)

    return build
