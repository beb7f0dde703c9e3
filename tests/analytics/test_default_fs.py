"""Paths without a scheme are on Spark's default file system (``fs.defaultFS``).

Under spark-submit (HDFS on YARN) Spark reads the inputs and writes the tables there, so
what the job does itself must happen there too: the output directory and report.html
(they went to the driver's local disk), and telling a Parquet input from JSONL (it
looked on the driver's disk, found nothing and read a Parquet dataset as JSON). A local
run whose default file system is not local (``HADOOP_CONF_DIR`` naming HDFS) checked its
paths on this machine before the session started: it is refused in one line.

The non-local default file system here is Hadoop's ViewFs (in the hadoop-client jars
pyspark ships), its mount table falling back to a local directory. Under spark-submit it
is checked in ``test_cluster`` (one submit to the standalone cluster, on ViewFs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sidecar.analytics.job import UsageError, _placed

pytestmark = [pytest.mark.spark]


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
