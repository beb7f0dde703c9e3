"""Baselines for the analytics benchmark: what Spark itself does on the same input, same run.

The targets of issue 16 are absolute rates. Whether a rate is within reach of *any* job
of this kind on this machine is a question for a baseline measured next to the job, in
the same SparkSession, on the same files:

- **read floor**: the job's own read (``events.read_normalized``: every column the job
  reads, parsed and normalized to the frame its tables start from, the partition lists
  whole), materialized and nothing else (Spark's ``noop`` sink, which evaluates the whole
  plan and writes nothing). The job cannot read its input faster.
- **plain job**: the reference the issue names, "a plain PySpark job over the same kind
  of JSONL (explicit schema, dedupe, one window, one group-by)": events deduplicated by
  id, each member's gap to its previous event (one window, partitioned by group and
  member, ordered by time), then one row per group and hour (one group-by), written as
  Parquet. It has one shuffle for the dedupe, one sort for the window and one
  aggregation; the product's job builds six tables with about seven sort or window
  passes over the events and their per-partition rows.
- **write floor**: the job's own tables, as that run wrote them, read back and written
  again with the job's writer (``output.write_tables``). The job writes one row per
  partition per owner in ``ownership`` and ``downtime``; the plain job writes a few
  hundred rows. No job producing these tables can be faster than the read floor plus
  the write floor.

The plain job reads the inputs with the events' explicit schema (JSONL) or as
``analytics convert`` wrote them (Parquet), and only the columns it needs: from Parquet
it skips most of the partition lists, which the job reads whole. Neither baseline renders
a report; the job's time includes ``report.html`` unless ``--no-report``.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sidecar.analytics.events import EVENT_SCHEMA, read_normalized
from sidecar.analytics.output import read_tables, write_tables


@dataclass(frozen=True)
class BaselineRun:
    name: str
    events: int
    form: str
    seconds: float
    cpu_seconds: float | None
    rows_out: int  # what the run produced: events read (floor), summary rows (plain job)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds


def read_events(spark: SparkSession, path: Path, form: str) -> DataFrame:
    """The columns the plain job uses, ``time`` as a timestamp, from either format."""
    if form == "jsonl":
        raw = spark.read.schema(EVENT_SCHEMA).json(str(path))
        time_column = F.to_timestamp("time")
    else:
        raw = spark.read.parquet(str(path))
        time_column = F.col("time")  # analytics convert stores it as a timestamp
    return raw.select(
        F.col("id"),
        F.col("source"),
        F.col("type"),
        time_column.alias("time"),
        F.col("data.group_id").alias("group_id"),
        F.col("data.member_id").alias("member_id"),
        F.col("data.generation_id").alias("generation_id"),
        F.size("data.partitions").alias("partitions"),
    )


Check = Callable[[], int]


def read_floor(spark: SparkSession, path: Path, form: str, output: Path, job: Path) -> Check:
    """The job's own read, materialized; nothing written.

    Returns how to count the rows read (run after the timing: for JSONL it parses again).
    """
    del form, output, job
    frame = read_normalized(spark, [str(path)])
    frame.write.format("noop").mode("overwrite").save()
    return frame.count


def plain_job(spark: SparkSession, path: Path, form: str, output: Path, job: Path) -> Check:
    """Dedupe, one window, one group-by, written as Parquet; how to count the summary."""
    del job
    events = read_events(spark, path, form).dropDuplicates(["id"])
    member = Window.partitionBy("group_id", "source").orderBy("time", "id")
    gaps = events.withColumn(
        "gap_seconds",
        F.col("time").cast("double") - F.lag(F.col("time").cast("double")).over(member),
    )
    summary = gaps.groupBy("group_id", F.date_trunc("hour", "time").alias("hour")).agg(
        F.count(F.lit(1)).alias("events"),
        F.countDistinct("member_id").alias("members"),
        F.max("generation_id").alias("last_generation"),
        F.sum("partitions").alias("partitions_moved"),
        F.avg("gap_seconds").alias("mean_gap_seconds"),
        F.max("gap_seconds").alias("max_gap_seconds"),
    )
    shutil.rmtree(output, ignore_errors=True)
    summary.write.mode("overwrite").parquet(str(output))
    return spark.read.parquet(str(output)).count


def write_floor(spark: SparkSession, path: Path, form: str, output: Path, job: Path) -> Check:
    """The job's tables under ``job`` written again to ``output``; how to count their rows."""
    del path, form
    shutil.rmtree(output, ignore_errors=True)
    write_tables(read_tables(spark, job), output)

    def rows() -> int:
        return sum(frame.count() for frame in read_tables(spark, output).values())

    return rows


def written_by(output: Path, name: str) -> Path:
    """Where baseline ``name`` writes under ``output`` (each its own directory)."""
    return output / name.replace(" ", "-")


Runner = Callable[[SparkSession, Path, str, Path, Path], Check]
RUNNERS: dict[str, Runner] = {
    "read floor": read_floor,
    "plain job": plain_job,
    "write floor": write_floor,
}
BASELINES = tuple(RUNNERS)


def run_baselines(
    spark: SparkSession,
    path: Path,
    form: str,
    events: int,
    output: Path,
    job: Path,
    cpu: Callable[[], float | None],
) -> list[BaselineRun]:
    """Every baseline once on that input, timed (wall and the JVM's CPU, as for the job),
    each reported on stderr as it ends.

    ``job``: where the job's run on the same input wrote its tables (for the write floor).
    """
    runs: list[BaselineRun] = []
    for name, runner in RUNNERS.items():
        cpu_before = cpu()
        started = time.monotonic()
        check = runner(spark, path, form, written_by(output, name), job)
        seconds = time.monotonic() - started
        cpu_after = cpu()
        used = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
        run = BaselineRun(name, events, form, seconds, used, check())
        runs.append(run)
        spent = f" ({run.cpu_seconds:.1f} CPU-s)" if run.cpu_seconds is not None else ""
        print(f"  {name}: {run.seconds:.1f}s{spent}, {run.rows_out:,} rows", file=sys.stderr)
    return runs
