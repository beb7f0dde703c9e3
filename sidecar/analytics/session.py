"""The SparkSession the job runs in, and where the Kafka connector's jars come from.

Under ``spark-submit`` the session is the cluster's: master, jars and memory come
from the submit command and nothing here overrides them. Run from Python (the CLI,
tests, the bench) the job starts its own session, ``local[*]`` by default, with the
Kafka connector jars that ``scripts/spark-jars.sh`` cached in ``.cache/spark-jars/``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[2]
JARS_CACHE = Path(".cache") / "spark-jars"

# Settings that suit a small machine; each is only a default.
LOCAL_DEFAULTS: Mapping[str, str] = {
    # Event time is UTC on the wire; hour buckets in `summary` are UTC hours.
    "spark.sql.session.timeZone": "UTC",
    # The default 200 shuffle partitions is tuned for clusters, not for local[2].
    "spark.sql.shuffle.partitions": "16",
    "spark.ui.showConsoleProgress": "false",
}
# SQL settings the job's plans and writes are made for, applied to every session the
# job runs in (also under spark-submit, where they are set at run time): they are about
# how the job computes and stores, not about the machine.
PLANNER_CONF: Mapping[str, str] = {
    # Adaptive execution (the default since Spark 3.2, stated because the plans rely
    # on it): it coalesces the small shuffles of the aggregates and turns joins
    # against small frames into broadcasts at run time.
    "spark.sql.adaptive.enabled": "true",
    # Frames already hash-partitioned by group join on (group, generation) without a
    # new shuffle (Spark's default re-shuffles unless partitioned by every key).
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    # A cached frame keeps the partitioning by group it was computed with (by default
    # AQE may coalesce its partitions, and Spark then treats it as unpartitioned and
    # shuffles every aggregate and window over it again).
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "false",
    # Timestamps in the Parquet the job writes (the tables, `analytics convert`'s `time`)
    # as 64-bit microseconds, Parquet's own timestamp type, instead of Spark's default
    # INT96 (deprecated by Parquet, 12-byte values that every dictionary lookup compares
    # byte by byte). Spark, pandas and pyarrow read both as the same timestamps.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # The job's caches (the flagged events, the segments, the rebalances) uncompressed:
    # gathering each column's compressibility statistics was 5 % of the executor's
    # samples, for caches only 16 % smaller (72 against 86 MB at 1M events; array
    # columns, such as the partition lists, are never compressed). Measured in the
    # fifth round of docs/analytics.md.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}
# Static settings (fixed when the JVM's first session starts, so spark-submit gets them
# as --conf from deploy/spark/submit.sh): as PLANNER_CONF, about the job, not the machine.
STATIC_CONF: Mapping[str, str] = {
    # Spark keeps 100 generated classes by default, fewer than the job's queries make, so
    # a warm JVM (the next streaming trigger, a notebook, the benchmark) compiled them
    # again and the JIT re-compiled them: 20-24 CPU-s of JIT per 4M-event run, 3-6 with
    # this (docs/analytics.md, third round).
    "spark.sql.codegen.cache.maxEntries": "2000",
}


def apply_planner_conf(spark: SparkSession) -> SparkSession:
    for key, value in PLANNER_CONF.items():
        spark.conf.set(key, value)
    return spark


def kafka_jars_dir(explicit: str | Path | None = None) -> Path | None:
    """The cached connector jars for the installed pyspark, if any were resolved."""
    if explicit is not None:
        path = Path(explicit)
        return path if path.is_dir() else None
    for root in (Path.cwd(), REPO_ROOT):
        candidate = root / JARS_CACHE / pyspark.__version__
        if any(candidate.glob("*.jar")):
            return candidate
    return None


def jar_paths(directory: Path | None) -> list[str]:
    if directory is None:
        return []
    return sorted(str(p) for p in directory.glob("*.jar"))


# A batch job wants throughput, not short pauses: with the parallel collector the JVM the
# job starts itself spent 4-16 % less CPU on the same run than with G1, the JVM's default
# (docs/analytics.md, third round). Added to the driver's Java options only where nobody
# chose a collector already; executors on a cluster are the operator's to tune.
THROUGHPUT_COLLECTOR = "-XX:+UseParallelGC"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_CHOSEN_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")
# Where the JVM picks up options besides the command line (the launcher passes these on).
_JAVA_OPTION_VARIABLES = (
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "SPARK_SUBMIT_OPTS",
)


_PROPERTY = re.compile(r"\s*(?P<key>[^\s=:#!][^\s=:]*)(?:\s*[=:]\s*|\s+)(?P<value>.*)")


def site_default(key: str, environ: Mapping[str, str]) -> str | None:
    """``key`` from the ``spark-defaults.conf`` spark-submit would read, if set there."""
    home = environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    directory = Path(environ.get("SPARK_CONF_DIR") or Path(home) / "conf")
    try:
        lines = (directory / "spark-defaults.conf").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        # Java properties: the key ends at whitespace, "=" or ":".
        entry = _PROPERTY.match(line)
        if entry and entry["key"] == key:
            return entry["value"].strip()
    return None


def driver_java_options(
    given: str | None, environ: Mapping[str, str], site: str | None
) -> str | None:
    """The driver's Java options with :data:`THROUGHPUT_COLLECTOR` added, or None to set
    nothing: the caller's options (``given``) or else the site's (``spark-defaults.conf``)
    are kept whole, and a collector chosen in them or in the JVM's option variables wins
    (two collectors and the JVM refuses to start)."""
    if any(_CHOSEN_COLLECTOR.search(environ.get(name, "")) for name in _JAVA_OPTION_VARIABLES):
        return given
    options = given if given is not None else site
    if options is not None and _CHOSEN_COLLECTOR.search(options):
        return given
    return f"{options} {THROUGHPUT_COLLECTOR}" if options else THROUGHPUT_COLLECTOR


def build_session(
    *,
    master: str = "local[*]",
    app_name: str = "rebalance-analytics",
    jars: Sequence[str] = (),
    packages: Sequence[str] = (),
    driver_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local session; jars and memory only apply if no JVM is running yet."""
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(LOCAL_DEFAULTS)
    settings.update(STATIC_CONF)
    settings.update(PLANNER_CONF)
    settings.update(conf or {})
    if jars:
        settings["spark.jars"] = ",".join(jars)
    if packages:
        settings["spark.jars.packages"] = ",".join(packages)
    if driver_memory:
        settings["spark.driver.memory"] = driver_memory
    java_options = driver_java_options(
        settings.get(DRIVER_JAVA_OPTIONS),
        os.environ,
        site_default(DRIVER_JAVA_OPTIONS, os.environ),
    )
    if java_options is not None:
        settings[DRIVER_JAVA_OPTIONS] = java_options
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def kafka_package() -> str:
    """Maven coordinates of the connector matching pyspark (for ``--packages``)."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
