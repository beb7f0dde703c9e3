"""The job on a real Spark standalone cluster (master + two workers) gives local[2]'s tables.

deploy/spark/submit.sh submits it exactly as an operator would; the tables it writes
must equal what the same code computes on local[2] in this test session.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.session import REPO_ROOT
from sidecar.analytics.tables import TABLE_NAMES

from .cluster import EXECUTOR_MEMORY, LOOPBACK, SparkCluster
from .conftest import canonical, collect_tables

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster.start(workers=2)
    finally:
        cluster.stop()  # also when start() failed half-way: no daemon outlives the tests


def completed_apps(cluster: SparkCluster) -> list[dict[str, Any]]:
    url = f"http://{LOOPBACK}:{cluster.master_ui_port}/json/"
    with urllib.request.urlopen(url, timeout=5) as response:
        state: dict[str, Any] = json.load(response)
    return list(state.get("completedapps", []))


def test_cluster_run_equals_local(
    spark: SparkSession, spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.jsonl"
    write_fleet_file(fleet, FleetSpec(groups=5, events=4000, seed=5))
    output = tmp_path / "out"
    done = subprocess.run(
        [
            str(REPO_ROOT / "deploy" / "spark" / "submit.sh"),
            "--master",
            spark_cluster.url,
            "--executor-memory",
            EXECUTOR_MEMORY,
            "--driver-memory",
            "512m",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.driver.host={LOOPBACK}",
            "--conf",
            f"spark.driver.bindAddress={LOOPBACK}",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--",
            "--input",
            str(fleet),
            "--output",
            str(output),
        ],
        env=dict(spark_cluster.env),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n{spark_cluster.logs()}"
    # It ran on the cluster: the master saw the application finish, with executors.
    apps = completed_apps(spark_cluster)
    assert [app["name"] for app in apps] == ["rebalance-analytics"]
    assert apps[0]["cores"] >= 1

    expected = collect_tables(spark, fleet)
    for name in TABLE_NAMES:
        written = [r.asDict() for r in spark.read.parquet(str(output / name)).collect()]
        assert written, name
        assert canonical(written) == canonical(expected[name]), name
    assert (output / "report.html").is_file()
