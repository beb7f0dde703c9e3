"""The analytics benchmark's baselines compute what they claim (bench/analytics_baseline.py).

A baseline that silently did less work than it says (a read that prunes every column, a
dedupe that keeps duplicates, a rewrite that skips a table) would flatter the targets'
distance; these check the rows each one produces against the input, computed here in
plain Python, and against the job's own tables.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.analytics_baseline import BASELINES, run_baselines, written_by
from sidecar.analytics.events import write_parquet_events
from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.job import run_batch
from sidecar.analytics.output import read_tables
from sidecar.analytics.tables import TABLE_NAMES
from tests.support.analytics import canonical

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("baseline-fleet") / "fleet.jsonl"
    write_fleet_file(path, FleetSpec(groups=5, events=6000, seed=7, duplicate_rate=0.05))
    return path


def expected_summary(fleet: Path) -> Counter[tuple[str, datetime]]:
    """Distinct events per (group, UTC hour), from the file itself."""
    seen: set[str] = set()
    per_hour: Counter[tuple[str, datetime]] = Counter()
    for line in fleet.read_text().splitlines():
        event = json.loads(line)
        if event["id"] in seen:
            continue
        seen.add(event["id"])
        instant = datetime.fromisoformat(event["time"]).replace(tzinfo=None)
        per_hour[event["data"]["group_id"], instant.replace(minute=0, second=0, microsecond=0)] += 1
    return per_hour


def test_each_baseline_does_the_work_it_names(
    spark: SparkSession, fleet: Path, tmp_path: Path
) -> None:
    lines = fleet.read_text().splitlines()
    distinct = {json.loads(line)["id"] for line in lines}
    assert len(distinct) < len(lines)  # the fleet has duplicates for the dedupe to remove
    summary = expected_summary(fleet)
    parquet = tmp_path / "fleet.parquet"
    write_parquet_events(spark, [str(fleet)], parquet)
    job = tmp_path / "job"
    run_batch(spark, [str(fleet)], job, report=False)

    for form, path in (("jsonl", fleet), ("parquet", parquet)):
        output = tmp_path / f"plain-{form}"
        runs = run_baselines(spark, path, form, len(lines), output, job, lambda: None)
        by_name = {run.name: run for run in runs}
        assert list(by_name) == list(BASELINES)
        assert all(run.seconds > 0 and run.cpu_seconds is None for run in runs)

        assert by_name["read floor"].rows_out == len(lines), form

        assert by_name["plain job"].rows_out == len(summary), form
        written = spark.read.parquet(str(written_by(output, "plain job"))).collect()
        assert {(r.group_id, r.hour): r.events for r in written} == dict(summary), form

        tables = read_tables(spark, job)
        assert by_name["write floor"].rows_out == sum(t.count() for t in tables.values())
        rewritten = read_tables(spark, written_by(output, "write floor"))
        for name in TABLE_NAMES:
            assert canonical([r.asDict() for r in rewritten[name].collect()]) == canonical(
                [r.asDict() for r in tables[name].collect()]
            ), name
