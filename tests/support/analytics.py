"""What the analytics tests share: rows read back from Spark, in a fixed order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from sidecar.analytics.events import read_events

Rows = list[dict[str, Any]]
TableRows = dict[str, Rows]


def canonical(rows: Rows) -> list[tuple[Any, ...]]:
    """Rows in a fixed order; floats to the microsecond (sums may add in another order)."""

    def value(v: Any) -> Any:
        return round(v, 6) if isinstance(v, float) else v

    return sorted(
        (tuple(value(v) for v in row.values()) for row in rows),
        key=lambda t: tuple((v is None, str(v)) for v in t),
    )


def written_rows(spark: SparkSession, output: Path, name: str) -> Rows:
    return [r.asDict() for r in spark.read.parquet(str(output / name)).collect()]


def collect_tables(spark: SparkSession, path: Path) -> TableRows:
    """Every table built from the events in ``path``, as lists of dicts."""
    from sidecar.analytics.tables import build_tables

    tables = build_tables(spark, read_events(spark, [str(path)]))
    try:
        return {name: [row.asDict() for row in frame.collect()] for name, frame in tables.items()}
    finally:
        tables.release()
