"""Writing the tables and the report: what a batch run and each streaming trigger do.

Both :mod:`.job` (the CLI) and :mod:`.streaming` (``foreachBatch``) call
:func:`refresh`; neither imports the other for it, so there is no import cycle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
from pyspark.sql.types import DoubleType, TimestampType

from .paths import Target, child, local_path, text
from .report import render_report
from .tables import TABLE_NAMES, build_tables

# Tables small enough to be one file each; ownership and downtime keep Spark's split.
SMALL_TABLES = frozenset({"rebalances", "members", "summary", "delivery"})
REPORT_NAME = "report.html"


@contextmanager
def step(spark: SparkSession, description: str) -> Iterator[None]:
    """Label the Spark jobs run inside (UI, event log: bench/analytics_stages.py)."""
    context = spark.sparkContext
    context.setJobDescription(description)
    try:
        yield
    finally:
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


# Columns of these types hold mostly distinct values (instants, shared at most by the
# partitions of one event; durations), so a Parquet dictionary does not pay off for
# them: the writer hashes every value into it and then falls back to plain encoding
# when the dictionary outgrows its page. Measured: those lookups were 6 % of all
# executor samples, a third of the time spent writing, and the files are the same size
# without the dictionary (docs/analytics.md, fifth round). Matched by top-level column
# name: every table is flat; a timestamp nested in a struct would need its dotted path.
UNDICTIONARIED_TYPES = (TimestampType, DoubleType)


def table_writer(frame: DataFrame) -> DataFrameWriter:
    """``frame.write``, overwriting, without a dictionary for its instants and durations
    (the strings, ids and counts keep theirs: few distinct values, small files)."""
    writer = frame.write.mode("overwrite")
    for field in frame.schema.fields:
        if isinstance(field.dataType, UNDICTIONARIED_TYPES):
            writer = writer.option(f"parquet.enable.dictionary#{field.name}", "false")
    return writer


def write_tables(tables: Mapping[str, DataFrame], output: Target) -> None:
    """Each table under ``output`` (a local path or any URI Spark writes to)."""
    local = local_path(output)
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        target = frame.coalesce(1) if name in SMALL_TABLES else frame
        with step(frame.sparkSession, f"write {name}"):
            table_writer(target).parquet(child(text(output), name))


def read_tables(spark: SparkSession, output: Target) -> dict[str, DataFrame]:
    """The tables as written under ``output``."""
    return {name: spark.read.parquet(child(text(output), name)) for name in TABLE_NAMES}


def refresh(spark: SparkSession, events: DataFrame, output: Target, *, report: bool) -> int:
    """Build every table from ``events``, write them and the report; returns #rebalances.

    The report is drawn from the tables as written (small Parquet files, and the big
    ones only through aggregates), so nothing is computed twice.
    """
    tables = build_tables(spark, events)
    try:
        write_tables(tables, output)
    finally:
        tables.release()
    written = read_tables(spark, output)
    if report:
        with step(spark, "report"):
            return render_report(written, child(text(output), REPORT_NAME)).rebalances
    with step(spark, "count rebalances"):
        return written["rebalances"].count()
