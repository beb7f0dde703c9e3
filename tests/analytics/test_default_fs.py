"""Paths without a scheme are on Spark's default file system (``fs.defaultFS``).

Under spark-submit (HDFS on YARN) Spark reads the inputs and writes the tables there, so
what the job does itself must happen there too: the output directory and report.html
(they went to the driver's local disk), and telling a Parquet input from JSONL (it
looked on the driver's disk, found nothing and read a Parquet dataset as JSON). A local
run whose default file system is not local (``HADOOP_CONF_DIR`` naming HDFS) checked its
paths on this machine before the session started: it is refused in one line.

The non-local default file system here is Hadoop's ViewFs (in the hadoop-client jars
pyspark ships), its mount table falling back to a local directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sidecar.analytics.events import write_parquet_events
from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.job import UsageError, _placed
from sidecar.analytics.session import REPO_ROOT
from sidecar.analytics.tables import TABLE_NAMES

from .conftest import canonical, collect_tables, written_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

USER = "analytics"  # HADOOP_USER_NAME: ViewFs's working directory is /user/<user>


def test_scheme_less_paths_are_on_the_default_file_system(
    spark: SparkSession, tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.jsonl"
    write_fleet_file(fleet, FleetSpec(groups=3, events=3000, seed=5))
    fallback = tmp_path / "viewfs"  # what viewfs://cluster/ holds
    home = fallback / "user" / USER
    # A Parquet input whose name does not say so: only a look inside tells.
    write_parquet_events(spark, [fleet.as_uri()], str(home / "events"))
    cwd = tmp_path / "cwd"  # the driver's working directory
    cwd.mkdir()
    done = subprocess.run(
        [
            str(REPO_ROOT / "deploy" / "spark" / "submit.sh"),
            "--master",
            "local[2]",
            "--driver-memory",
            "512m",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.hadoop.fs.defaultFS=viewfs://cluster/",
            "--conf",
            f"spark.hadoop.fs.viewfs.mounttable.cluster.linkFallback={fallback.as_uri()}",
            "--",
            "--input",
            "events",
            "--output",
            "out",
        ],
        cwd=cwd,
        env={**os.environ, "HADOOP_USER_NAME": USER, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    output = home / "out"
    driver_side = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
    assert (output / "report.html").is_file(), f"in the driver's directory: {driver_side}"
    assert "rebalances" in (output / "report.html").read_text(encoding="utf-8").lower()
    expected = collect_tables(spark, fleet)
    for name in TABLE_NAMES:
        written = written_rows(spark, output, name)
        assert written, name
        assert canonical(written) == canonical(expected[name]), name
    assert not (cwd / "out").exists()
    assert list(cwd.iterdir()) == []
    # The job says where the output really went (spark-submit's Python runner passes
    # the driver's stderr on to its stdout).
    wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1, done.stdout[-4000:]
    assert wrote[0].startswith(
        f"wrote {', '.join(TABLE_NAMES)} to viewfs://cluster/user/{USER}/out "
    )


def test_a_local_run_on_a_default_file_system_elsewhere_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``HADOOP_CONF_DIR`` (a Hadoop gateway node) can make Spark's default file system
    HDFS for a local run too: Spark would write the tables there, while the job had
    checked ``--overwrite`` and would write report.html on this machine. Checked on the
    test session itself, its default file system switched to ViewFs for the moment (a
    JVM of its own would add seconds to the suite for the same Hadoop call)."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = conf.get("fs.defaultFS")
    conf.set("fs.defaultFS", "viewfs://cluster/")
    conf.set("fs.viewfs.mounttable.cluster.linkFallback", (tmp_path / "viewfs").as_uri())
    try:
        with pytest.raises(UsageError) as refused:
            _placed(spark, [(tmp_path / "in.jsonl").as_uri(), "out"], managed=False)
        placed = _placed(spark, ["kafka://h:1/t", "file:///tmp/x"], managed=False)
    finally:
        conf.set("fs.defaultFS", before)
        conf.unset("fs.viewfs.mounttable.cluster.linkFallback")
    where = str(refused.value)
    assert where.startswith("out: Spark's default file system puts it at viewfs://cluster/")
    assert where.endswith("not on this machine; give a full URI (file:///... for a local path)")
    assert placed == ["kafka://h:1/t", "file:///tmp/x"]  # given with a scheme: kept
