"""Under spark-submit an --output without a scheme is on the cluster's default file system.

Spark writes the tables there (``fs.defaultFS``: HDFS on YARN), so the job's own writes
(the output directory, report.html) must go there too, not to the driver's local disk.
The non-local default file system here is Hadoop's ViewFs (in the hadoop-client jars
pyspark ships), its mount table falling back to a local directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.analytics.generator import FleetSpec, write_fleet_file
from sidecar.analytics.session import REPO_ROOT
from sidecar.analytics.tables import TABLE_NAMES

pytestmark = [pytest.mark.spark, pytest.mark.slow]

USER = "analytics"  # HADOOP_USER_NAME: ViewFs's working directory is /user/<user>


def test_a_scheme_less_output_lands_on_the_default_file_system(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.jsonl"
    write_fleet_file(fleet, FleetSpec(groups=3, events=3000, seed=5))
    fallback = tmp_path / "viewfs"  # what viewfs://cluster/ holds
    fallback.mkdir()
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
            fleet.as_uri(),  # a path without a scheme would be on viewfs too
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
    output = fallback / "user" / USER / "out"
    driver_side = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
    assert (output / "report.html").is_file(), f"in the driver's directory: {driver_side}"
    assert "rebalances" in (output / "report.html").read_text(encoding="utf-8").lower()
    for name in TABLE_NAMES:
        assert any((output / name).glob("*.parquet")), name
    assert not (cwd / "out").exists()
    assert list(cwd.iterdir()) == []
    # The job says where the output really went (spark-submit's Python runner passes
    # the driver's stderr on to its stdout).
    wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1, done.stdout[-4000:]
    assert wrote[0].startswith(
        f"wrote {', '.join(TABLE_NAMES)} to viewfs://cluster/user/{USER}/out "
    )
