"""Fleet rebalance analytics on Spark (the ``analytics`` extra).

    from sidecar.analytics import build_tables, read_events
    tables = build_tables(spark, read_events(spark, ["journal.jsonl"]))

The CLI is :func:`sidecar.analytics.job.main` (``rebalance-sidecar analytics``).
"""

from .events import EVENT_SCHEMA, normalize, read_events
from .tables import TABLE_NAMES, FleetTables, build_tables

__all__ = [
    "EVENT_SCHEMA",
    "TABLE_NAMES",
    "FleetTables",
    "build_tables",
    "normalize",
    "read_events",
]
