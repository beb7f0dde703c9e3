"""The job on a real Spark standalone cluster (master + two workers) gives local[2]'s tables.

deploy/spark/submit.sh submits it exactly as an operator would; the tables it writes
must equal what the same code computes on local[2] in this test session.

The submit also checks that paths without a scheme are on Spark's default file system
(``fs.defaultFS``), as on a YARN cluster with HDFS: Spark reads the inputs and writes
the tables there, so what the job does itself must happen there too. The output
directory and report.html went to the driver's local disk, and telling a Parquet input
from JSONL looked on the driver's disk, found nothing and read a Parquet dataset as
JSON. The non-local default file system here is Hadoop's ViewFs (in the hadoop-client
jars pyspark ships), its mount table falling back to a local directory that the
executors see too. One submit checks both: a second JVM and job would add about 45 s
to the suite.
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

from sidecar.analytics.events import write_parquet_events
from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.session import REPO_ROOT
from sidecar.analytics.tables import TABLE_NAMES
from tests.support.analytics import canonical, collect_tables, written_rows

from .cluster import EXECUTOR_MEMORY, LOOPBACK, SparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

USER = "analytics"  # HADOOP_USER_NAME: ViewFs's working directory is /user/<user>


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
    fallback = tmp_path / "viewfs"  # what viewfs://cluster/ holds
    home = fallback / "user" / USER
    home.mkdir(parents=True)
    # Half the fleet as JSONL, half as Parquet under a name that does not say so (only a
    # look inside tells): both formats are read on the cluster's executors.
    lines = fleet.read_text(encoding="utf-8").splitlines(keepends=True)
    (home / "first.jsonl").write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    second = tmp_path / "second.jsonl"
    second.write_text("".join(lines[len(lines) // 2 :]), encoding="utf-8")
    write_parquet_events(spark, [second.as_uri()], str(home / "events"))
    cwd = tmp_path / "cwd"  # the driver's working directory
    cwd.mkdir()
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
            "--conf",
            "spark.hadoop.fs.defaultFS=viewfs://cluster/",
            "--conf",
            f"spark.hadoop.fs.viewfs.mounttable.cluster.linkFallback={fallback.as_uri()}",
            "--",
            "--input",
            "first.jsonl",
            "events",
            "--output",
            "out",
        ],
        cwd=cwd,
        env={**spark_cluster.env, "HADOOP_USER_NAME": USER},
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

    output = home / "out"
    driver_side = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
    assert (output / "report.html").is_file(), f"in the driver's directory: {driver_side}"
    assert "rebalances" in (output / "report.html").read_text(encoding="utf-8").lower()
    assert list(cwd.iterdir()) == []
    expected = collect_tables(spark, fleet)
    for name in TABLE_NAMES:
        written = written_rows(spark, output, name)
        assert written, name
        assert canonical(written) == canonical(expected[name]), name
    # The job says where the output really went (spark-submit's Python runner passes
    # the driver's stderr on to its stdout).
    wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1, done.stdout[-4000:]
    assert wrote[0].startswith(
        f"wrote {', '.join(TABLE_NAMES)} to viewfs://cluster/user/{USER}/out "
    )
